/** The one error middleware: catalogue errors as the contract's body, the rest as 500. */
import type { ErrorRequestHandler, RequestHandler } from 'express';
import { ApiError } from '../errors/catalogue.js';

export const notFound: RequestHandler = (req) => {
  throw new ApiError('not_found', { message: `no route for ${req.method} ${req.path}` });
};

function isRedisUnavailable(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: string };
  return (
    e?.name === 'MaxRetriesPerRequestError' ||
    e?.code === 'ECONNREFUSED' ||
    /Connection is closed|Command timed out|Stream isn't writeable/.test(e?.message ?? '')
  );
}

export const errorHandler: ErrorRequestHandler = (err, req, res, _next) => {
  let apiError: ApiError;
  if (err instanceof ApiError) {
    apiError = err;
  } else if ((err as { type?: string }).type === 'entity.too.large') {
    apiError = new ApiError('payload_too_large');
  } else if ((err as { type?: string }).type === 'entity.parse.failed') {
    apiError = new ApiError('invalid_json');
  } else if (isRedisUnavailable(err)) {
    req.log?.error({ err }, 'redis unavailable');
    apiError = new ApiError('service_unavailable');
  } else {
    req.log?.error({ err }, 'unhandled error');
    apiError = new ApiError('server_error');
  }
  if (res.headersSent) {
    res.end();
    return;
  }
  if (apiError.headers) res.set(apiError.headers);
  res.status(apiError.status).json(apiError.toBody());
};
