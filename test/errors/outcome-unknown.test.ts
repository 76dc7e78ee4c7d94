/**
 * The two 503s say opposite things: service_unavailable that nothing was applied,
 * outcome_unknown that the operation may have been (docs/API.md, "Errors"). The error
 * middleware answers a store failure without proof that nothing was sent with
 * outcome_unknown on a write, and service_unavailable on a read, which changes nothing.
 */
import type { Request, Response } from 'express';
import { describe, expect, it } from 'vitest';
import { errorCatalogue } from '../../src/errors/catalogue.js';
import { errorHandler } from '../../src/http/errors.js';
import { CommandNotSentError, OutcomeUnknownError } from '../../src/redis/sent.js';

/** What the middleware answers for `err` on `method`: status and error body. */
function answer(method: string, err: unknown): { status: number; body: { error: Record<string, unknown> } } {
  const out = { status: 0, body: { error: {} } };
  const res = {
    headersSent: false,
    set: () => res,
    status(s: number) {
      out.status = s;
      return res;
    },
    json(b: { error: Record<string, unknown> }) {
      out.body = b;
      return res;
    },
  };
  errorHandler()(err, { method, path: '/v1/billing/deduct', originalUrl: '/v1/billing/deduct' } as Request, res as unknown as Response, () => undefined);
  return out;
}

describe('outcome_unknown and service_unavailable', () => {
  it('have the status, type and words the contract gives them', () => {
    expect(errorCatalogue.outcome_unknown.status).toBe(503);
    expect(errorCatalogue.service_unavailable.message).toMatch(/nothing was applied/);
    expect(errorCatalogue.outcome_unknown.message).toMatch(/may have been applied/);
    for (const id of ['transaction_id', 'idempotency_key', 'Idempotency-Key']) expect(errorCatalogue.outcome_unknown.message).toContain(id);
    expect(errorCatalogue.outcome_unknown.message).not.toMatch(/nothing was applied/);
  });

  it.each([
    ['a written command whose reply was lost, on a write', 'POST', new OutcomeUnknownError(new Error('Connection is closed.')), 'outcome_unknown'],
    ['an ioredis error that proves nothing, on a write', 'POST', Object.assign(new Error('Reached the max retries per request limit'), { name: 'MaxRetriesPerRequestError' }), 'outcome_unknown'],
    ['a command never written, on a write', 'POST', new CommandNotSentError(new Error('Connection is closed.')), 'service_unavailable'],
    ['a written command whose reply was lost, on a read', 'GET', new OutcomeUnknownError(new Error('Connection is closed.')), 'service_unavailable'],
  ])('%s: %s', (_what, method, err, code) => {
    const { status, body } = answer(method, err);
    expect(status).toBe(503);
    expect(body.error).toEqual({ code, type: 'server_error', message: errorCatalogue[code as 'outcome_unknown'].message });
  });
});
