/**
 * Requests that Express or the body parser refuse before any route runs answer the
 * contract's 400 invalid_request, not a 500 that says the service failed.
 */
import { describe, expect, it } from 'vitest';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService();

describe('requests refused before a route runs', () => {
  it('a path with a broken percent-encoding: 400 invalid_request', async () => {
    const res = await svc.call('GET', '/v1/customers/%E0%A4%A', { key: p.projectKey });
    expectError(res, 400, 'invalid_request');
  });

  it('a body in an unsupported Content-Encoding: 400 invalid_request, nothing applied', async () => {
    const res = await svc.call('POST', '/v1/customers/deposit', {
      key: p.projectKey,
      headers: { 'content-encoding': 'br2' },
      body: { customer_id: 'c1', amount: 5 },
    });
    expectError(res, 400, 'invalid_request');
    expect((await svc.call('GET', '/v1/customers/c1', { key: p.projectKey })).status).toBe(404);
  });

  it('a body in a charset the parser does not know: 400 invalid_request', async () => {
    const res = await svc.call('POST', '/v1/customers/deposit', {
      key: p.projectKey,
      headers: { 'content-type': 'application/json; charset=klingon' },
      body: { customer_id: 'c1', amount: 5 },
    });
    expectError(res, 400, 'invalid_request');
  });
});
