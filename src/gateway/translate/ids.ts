/**
 * A translated answer's id in the client format's shape (chat `chatcmpl-...`, Responses
 * `resp_...` and its message items `msg_...`, Anthropic `msg_...`), derived from the
 * upstream's id: the same upstream answer always gets the same id, and the id still
 * leads to the upstream's logs. Tool call ids are never reshaped: a later turn sends them back.
 */
const UPSTREAM_PREFIXES = ['chatcmpl-', 'resp_', 'msg_'] as const;

/** `prefix` followed by the upstream id without its own format's prefix. */
export function clientId(prefix: string, upstreamId: unknown): string {
  const id = typeof upstreamId === 'string' ? upstreamId : '';
  const own = UPSTREAM_PREFIXES.find((p) => id.startsWith(p));
  return prefix + (own === undefined ? id : id.slice(own.length));
}
