/**
 * Field errors: each invalid field of a request as `error.errors` lists it, and the one
 * error that names them all. Foundation, so that a domain parser (the gateway's request,
 * src/gateway/request.ts) and the HTTP layer's zod checks (src/http/validate.ts) share it.
 */
import { ApiError, type ErrorCode } from './catalogue.js';

/** One invalid field of a request, as `error.errors` lists them. */
export interface FieldError {
  param: string | null;
  code: ErrorCode;
  message: string;
}

/**
 * Codes that say a request field is invalid: the ones a request's every field is checked
 * for. `customer_required` is the gateway's missing X-Service-Customer.
 */
const field_error_codes: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'invalid_request', 'invalid_amount', 'unsupported_amount_field', 'invalid_starts_at', 'invalid_expires_at', 'invalid_credit_types', 'customer_required',
]);

function isFieldError(err: unknown): err is ApiError {
  return err instanceof ApiError && field_error_codes.has(err.code);
}

function fieldErrorsOf(err: ApiError): FieldError[] {
  const listed = err.extra?.errors as FieldError[] | undefined;
  return listed ?? [{ param: err.param ?? null, code: err.code, message: err.message }];
}

/**
 * The one error of several field errors: the first one's code, param and message (what a
 * client that reads one error has always read), and every invalid field in `errors`.
 */
function allFieldErrors(errs: readonly ApiError[]): ApiError {
  const first = errs[0];
  const seen = new Set<string>();
  const errors: FieldError[] = [];
  for (const e of errs) {
    for (const f of fieldErrorsOf(e)) {
      const k = `${f.param}\u0000${f.code}`;
      if (seen.has(k)) continue;
      seen.add(k);
      errors.push(f);
    }
  }
  return new ApiError(first.code, { param: first.param, message: first.message, status: first.status, headers: first.headers, extra: { ...first.extra, errors } });
}

/**
 * `checks` run one by one on `value`, each a check of some of its fields, after `first`
 * failed: the error of every field that fails, `first` first (allFieldErrors). Runs on
 * the failure path only, so a valid request pays nothing for it. An error that is not a
 * field error is answered as it is.
 */
export function everyFieldError<V>(first: unknown, checks: readonly ((value: V) => unknown)[], value: V): unknown {
  if (!isFieldError(first)) return first;
  const found: ApiError[] = [first];
  for (const check of checks) {
    try {
      check(value);
    } catch (err) {
      if (!isFieldError(err)) return first;
      found.push(err);
    }
  }
  return allFieldErrors(found);
}

/** The 400 of an X-Service-Api-Variant that is neither A nor B. */
export function variantRefused(): ApiError {
  return new ApiError('invalid_request', { param: 'X-Service-Api-Variant', message: 'X-Service-Api-Variant must be A or B' });
}
