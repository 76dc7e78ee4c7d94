/**
 * Which failures of Redis or PostgreSQL left nothing applied, and which may have: the
 * classification that the error middleware (src/http/errors.ts) answers from and the
 * metrics (src/metrics/metrics.ts) count by. Foundation: it knows the stores' errors, not HTTP.
 */
import { BackendTerminatedError, BackendTerminatedUnexpectedlyError, ConnectionError, SlonikError } from 'slonik';
import { CommandNotSentError, OutcomeUnknownError } from '../redis/sent.js';

/**
 * Redis or PostgreSQL could not answer: 'unsent' answers 503 service_unavailable, 'unknown'
 * 503 outcome_unknown. 'unsent' only with proof that the command never
 * reached the store, so nothing was applied: a Redis command that failed before it was
 * written (CommandNotSentError, see src/redis/sent.ts), or a database connection that
 * could not be opened (slonik's ConnectionError: no query went out). Every other failure
 * of a store is 'unknown': the command may have been written and applied, and only its
 * reply was lost, or it came after part of the request applied (OutcomeUnknownError).
 * ioredis's own errors (MaxRetriesPerRequestError, "Connection is closed",
 * "Command timed out") are given to written and unwritten commands alike, so they prove
 * nothing by themselves.
 */
export function backendFailure(err: unknown): 'unsent' | 'unknown' | null {
  const e = err as { name?: string; message?: string; code?: string };
  if (err instanceof CommandNotSentError || err instanceof ConnectionError) return 'unsent';
  if (err instanceof OutcomeUnknownError || err instanceof BackendTerminatedError || err instanceof BackendTerminatedUnexpectedlyError) return 'unknown';
  if (e?.name === 'MaxRetriesPerRequestError' || e?.code === 'ECONNREFUSED') return 'unknown';
  if (/Connection is closed|Command timed out|Stream isn't writeable/.test(e?.message ?? '')) return 'unknown';
  return null;
}

/** The store a backend failure (backendFailure) came from: slonik's errors are PostgreSQL's, the rest Redis's. */
export function failedStore(err: unknown): 'redis' | 'postgres' {
  return err instanceof SlonikError ? 'postgres' : 'redis';
}
