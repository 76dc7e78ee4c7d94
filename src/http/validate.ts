/** zod at the edge: the first issue becomes invalid_request with `param`. */
import type { Request } from 'express';
import type { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';

export function parseWith<T extends z.ZodTypeAny>(schema: T, value: unknown): z.infer<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const param = issue.path.join('.') || undefined;
  throw new ApiError('invalid_request', { param, message: param ? `${param}: ${issue.message}` : issue.message });
}

/** The JSON body as an object, or invalid_json. */
export function jsonBody(req: Request): Record<string, unknown> {
  const body: unknown = req.body;
  // The JSON parser reads an empty body as {}, but an empty body is not a JSON object.
  const empty = req.headers['content-length'] === '0';
  if (empty || body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new ApiError('invalid_json', { message: 'request body must be a JSON object (Content-Type: application/json)' });
  }
  return body as Record<string, unknown>;
}
