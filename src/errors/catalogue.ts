/**
 * The one error catalogue: stable code -> HTTP status -> default message, grouped by
 * area. `error.type` follows the status (docs/API.md, "Errors"). docs/API.md lists the
 * same codes; test/errors/catalogue.test.ts keeps the two in step.
 */

export const errorCatalogue = {
  // Request shape
  invalid_json: { status: 400, message: 'request body is not a valid JSON object' },
  invalid_request: { status: 400, message: 'invalid request' },
  invalid_amount: { status: 400, message: 'invalid amount' },
  unsupported_amount_field: { status: 400, message: 'unit-suffixed amount fields are not supported in this contract variant; send amount in credits' },
  invalid_starts_at: { status: 400, message: 'starts_at is not a valid ISO 8601 timestamp' },
  invalid_expires_at: { status: 400, message: 'expires_at must be a valid ISO 8601 timestamp later than starts_at and than now' },
  invalid_credit_types: { status: 400, message: 'credit_types must be a non-empty array of wallet names' },
  payload_too_large: { status: 413, message: 'request body is too large' },

  // Authentication and permissions
  missing_api_key: { status: 401, message: 'no API key: send Authorization: Bearer <key>' },
  invalid_api_key: { status: 401, message: 'invalid API key' },
  api_key_revoked: { status: 401, message: 'API key has been revoked' },
  api_key_expired: { status: 401, message: 'API key has expired' },
  permission_denied: { status: 403, message: 'this key may not call this endpoint' },
  model_not_allowed: { status: 403, message: 'model is not allowed for this key' },
  plan_limit_reached: { status: 403, message: 'the plan limit is reached; upgrade the plan' },
  invalid_credentials: { status: 401, message: 'email or password is incorrect' },
  organization_required: { status: 401, message: 'this email is a member of more organizations than a sign-in checks without one: name the organization (organization_id) and sign in again' },
  not_signed_in: { status: 401, message: 'sign in first: no valid session' },
  csrf_token_invalid: { status: 403, message: 'missing or wrong X-CSRF-Token header: send the csrf_token of GET /dashboard/api/session' },

  // Lookups
  not_found: { status: 404, message: 'not found' },
  customer_not_found: { status: 404, message: 'customer not found' },
  model_not_found: { status: 404, message: 'model not found' },
  customer_required: { status: 400, message: 'a customer is required: send X-Service-Customer or use a customer-scoped key' },

  // Wallet and transactions
  insufficient_balance: { status: 400, message: 'insufficient balance' },
  insufficient_balance_in_selected_credit_types: { status: 400, message: 'insufficient balance in selected credit_types' },
  no_consumable_freeze_records: { status: 400, message: 'no consumable freeze records for this transaction' },
  freeze_records_already_consumed: { status: 400, message: 'the frozen funds of this transaction are already consumed' },
  no_unfreezable_records: { status: 400, message: 'no unfreezable records for this transaction' },
  actual_amount_exceeds_frozen_amount: { status: 400, message: 'actual amount exceeds the frozen amount' },
  transaction_conflict: { status: 409, message: 'this identifier is already used by another customer, operation or request' },
  customer_scope_mismatch: { status: 409, message: 'the transaction belongs to a different customer' },
  idempotency_key_reused: { status: 409, message: 'this Idempotency-Key was already used; the first call was not charged again' },
  budget_exceeded: { status: 400, message: 'a spending budget would be exceeded; nothing was applied' },
  byok_key_required: { status: 402, message: 'the model has no upstream provider key configured' },

  // Management
  project_deactivated: { status: 409, message: 'the project is deactivated: its records can be read, nothing can be added or changed' },
  customer_exists: { status: 409, message: 'a customer with this id already exists with other fields; PATCH /v1/customers/{id} changes them' },

  // Organisation members
  email_taken: { status: 409, message: 'a member of this organisation already has this email' },
  last_owner: { status: 409, message: 'an organisation keeps at least one owner' },

  // Limits
  usage_limit_exceeded: { status: 429, message: 'monthly transaction limit of the Free plan reached; upgrade to continue' },
  rate_limited: { status: 429, message: 'rate limit exceeded; retry later' },

  // Server and dependencies
  upstream_error: { status: 502, message: 'the upstream provider is unreachable or sent an invalid response' },
  upstream_timeout: { status: 504, message: 'the upstream provider did not answer in time' },
  service_unavailable: { status: 503, message: 'a backing service is unavailable; nothing was applied' },
  outcome_unknown: {
    status: 503,
    message:
      'the store stopped answering after the operation was sent, and its outcome could not be learned in time; it may have been applied: retry it with the same transaction_id, idempotency_key or Idempotency-Key, which answers with its original result if it was',
  },
  billing_account_not_found: { status: 500, message: 'internal inconsistency: wallet account missing' },
  server_error: { status: 500, message: 'internal server error' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof errorCatalogue;

export type ErrorType = 'bad_request' | 'auth_error' | 'not_found' | 'conflict' | 'too_many_requests' | 'server_error';

export function errorTypeForStatus(status: number): ErrorType {
  if (status === 401 || status === 403) return 'auth_error';
  if (status === 404) return 'not_found';
  if (status === 409) return 'conflict';
  if (status === 429) return 'too_many_requests';
  if (status >= 500) return 'server_error';
  return 'bad_request';
}

/** An operating error with a stable code: answered to the client, never a crash. */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly param?: string;
  readonly extra?: Record<string, unknown>;
  readonly headers?: Record<string, string>;

  constructor(
    code: ErrorCode,
    opts: { message?: string; param?: string; status?: number; extra?: Record<string, unknown>; headers?: Record<string, string> } = {},
  ) {
    super(opts.message ?? errorCatalogue[code].message);
    this.code = code;
    this.status = opts.status ?? errorCatalogue[code].status;
    this.param = opts.param;
    this.extra = opts.extra;
    this.headers = opts.headers;
  }

  toBody(): { error: Record<string, unknown> } {
    const error: Record<string, unknown> = { message: this.message, type: errorTypeForStatus(this.status), code: this.code };
    if (this.param !== undefined) error.param = this.param;
    if (this.extra) Object.assign(error, this.extra);
    return { error };
  }
}
