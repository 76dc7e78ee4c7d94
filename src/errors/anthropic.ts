/**
 * Anthropic's error types by HTTP status (the type Anthropic itself answers each status
 * with: docs.anthropic.com, "Errors"). Used for the service's own errors on /v1/messages
 * (src/http/errors.ts) and for errors translated to a messages client (src/gateway/translate/).
 */
/** Every type anthropicTypeOfStatus answers. */
export const anthropic_error_types = [
  'invalid_request_error', 'authentication_error', 'billing_error', 'permission_error', 'not_found_error',
  'timeout_error', 'request_too_large', 'rate_limit_error', 'overloaded_error', 'api_error',
] as const;

export function anthropicTypeOfStatus(status: number): (typeof anthropic_error_types)[number] {
  switch (status) {
    case 401: return 'authentication_error';
    case 402: return 'billing_error';
    case 403: return 'permission_error';
    case 404: return 'not_found_error';
    case 408: case 504: return 'timeout_error';
    case 413: return 'request_too_large';
    case 429: return 'rate_limit_error';
    case 529: return 'overloaded_error';
    default: return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}
