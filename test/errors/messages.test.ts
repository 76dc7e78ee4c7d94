/**
 * Errors that say what to do (issue 12, section 3): the key type an endpoint takes, what
 * receipts are for, the body limit, and every invalid field of a request at once
 * (error.errors), the first of them still in error.param, error.code and error.message.
 * Nothing of a refused request is applied.
 */
import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

let a: TestProject;
let b: TestProject;

useTestService({ variants: [] });
beforeAll(async () => {
  a = await svc.project('A');
  b = await svc.project('B');
});

const newId = (p: string) => `${p}_${randomBytes(6).toString('hex')}`;

describe('permission_denied names the key type that may call the endpoint', () => {
  it('a customer-scoped key on a money operation', async () => {
    const res = await svc.call('POST', '/v1/billing/deduct', {
      key: await b.customerKey('alice'),
      body: { customer_id: 'alice', transaction_id: newId('tx'), amount: 1 },
    });
    expect(res.status).toBe(403);
    expect(res.body.error).toEqual({
      code: 'permission_denied',
      type: 'auth_error',
      message: 'this endpoint takes a project key (svc_live_...); this is a customer-scoped key (svc_customer_...)',
      key_types_allowed: ['project'],
      key_type: 'customer',
    });
  });

  it('an admin key on the gateway, a project key on the management API', async () => {
    const gateway = await svc.call('POST', '/v1/chat/completions', { key: b.adminKey, body: { model: 'm', messages: [] } });
    expect(gateway.status).toBe(403);
    expect(gateway.body.error.message).toBe(
      'this endpoint takes a project key (svc_live_...) or a customer-scoped key (svc_customer_...); this is an admin key (svc_admin_...)',
    );
    const admin = await svc.call('GET', '/v1/admin/projects', { key: b.projectKey });
    expect(admin.status).toBe(403);
    expect(admin.body.error).toMatchObject({
      message: 'this endpoint takes an admin key (svc_admin_...); this is a project key (svc_live_...)',
      key_types_allowed: ['admin'],
      key_type: 'project',
    });
  });
});

it('a receipt 404 says that receipts exist for gateway calls', async () => {
  const res = await svc.call('GET', `/v1/billing/receipts/${newId('tx')}`, { key: b.projectKey });
  expectError(res, 404, 'not_found');
  expect(res.body.error.message).toMatch(/^no receipt for this transaction id: receipts exist for gateway calls \(POST \/v1\/chat\/completions, \/v1\/responses, \/v1\/messages and \/v1\/embeddings\)/);
  const admin = await svc.call('GET', `/v1/admin/projects/${b.projectId}/receipts/${newId('tx')}`, { key: b.adminKey });
  expect(admin.status).toBe(404);
  expect(admin.body.error.message).toBe(res.body.error.message);
});

it('payload_too_large states the limit', async () => {
  const body = JSON.stringify({ customer_id: 'big', amount: 1, metadata: { pad: 'x'.repeat(1024 * 1024) } });
  const res = await fetch(`${svc.url}/v1/customers/deposit`, {
    method: 'POST',
    headers: { authorization: `Bearer ${b.projectKey}`, 'content-type': 'application/json' },
    body,
  });
  expect(res.status).toBe(413);
  const error = ((await res.json()) as { error: Record<string, unknown> }).error;
  const length = Buffer.byteLength(body);
  expect(error).toEqual({
    code: 'payload_too_large',
    type: 'bad_request',
    message: `request body is too large: this endpoint takes at most 1 MiB (1048576 bytes), the body has ${length}`,
    details: { limit_bytes: 1_048_576, length_bytes: length },
  });
});

describe('every invalid field at once', () => {
  it('a Variant B deduct: the first error as before, every one in error.errors, nothing applied', async () => {
    const res = await svc.call('POST', '/v1/billing/deduct', {
      key: b.projectKey,
      body: { customer_id: '', transaction_id: 42, amount: -5, wallet: 'has space', credit_types: ['x'], colour: 'red' },
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'invalid_request', param: 'colour', message: 'unknown field colour' });
    expect(res.body.error.errors).toEqual([
      { param: 'colour', code: 'invalid_request', message: 'unknown field colour' },
      // docs/API.md shows these messages.
      { param: 'customer_id', code: 'invalid_request', message: 'customer_id: String must contain at least 1 character(s)' },
      { param: 'transaction_id', code: 'invalid_request', message: 'transaction_id: Expected string, received number' },
      { param: 'amount', code: 'invalid_amount', message: 'amount must be greater than 0' },
      { param: 'credit_types', code: 'invalid_request', message: 'Variant B selects one wallet with wallet' },
      { param: 'wallet', code: 'invalid_request', message: expect.stringMatching(/^wallet: /) },
    ]);
  });

  it('a Variant B freeze: the wallet name and the TTLs too', async () => {
    const res = await svc.call('POST', '/v1/billing/freeze', {
      key: b.projectKey,
      body: { customer_id: 'c', transaction_id: newId('tx'), amount: 1.5, wallet: 'has space', release_after_seconds: 0 },
    });
    expect(res.status).toBe(400);
    expect(res.body.error.param).toBe('amount');
    expect(res.body.error.errors.map((e: { param: string }) => e.param)).toEqual(['amount', 'wallet', 'release_after_seconds']);
  });

  it('a Variant A deposit: amount, wallet and window, each with its own code', async () => {
    const res = await svc.call('POST', '/v1/customers/deposit', {
      key: a.projectKey,
      body: { customer_id: 'c', amount_usd: 1, amount_cents: 100, credit_type: 'bad name', starts_at: 'soon', email: 'not-an-email' },
    });
    expect(res.status).toBe(400);
    expect(res.body.error.errors).toEqual([
      { param: 'email', code: 'invalid_request', message: expect.stringMatching(/^email: /) },
      { param: expect.any(String), code: 'invalid_amount', message: expect.any(String) },
      { param: 'credit_type', code: 'invalid_request', message: expect.stringMatching(/^credit_type: /) },
      { param: 'starts_at', code: 'invalid_starts_at', message: expect.any(String) },
    ]);
    expect(res.body.error).toMatchObject({ code: 'invalid_request', param: 'email' });
    const listed = await svc.call('GET', '/v1/customers/c', { key: a.projectKey });
    expect(listed.status).toBe(404);
  });

  it('a single invalid field is listed alone', async () => {
    const res = await svc.call('POST', '/v1/billing/unfreeze', { key: b.projectKey, body: { transaction_id: '' } });
    expect(res.status).toBe(400);
    expect(res.body.error.errors).toEqual([{ param: 'transaction_id', code: 'invalid_request', message: res.body.error.message }]);
  });

  it('a management body: unknown fields and invalid values together', async () => {
    const res = await svc.call('POST', '/v1/admin/projects', { key: b.adminKey, body: { name: '', contract: 'C', colour: 'red', size: 1 } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'invalid_request', param: 'colour' });
    expect(res.body.error.errors.map((e: { param: string }) => e.param)).toEqual(['colour', 'size', 'name', 'contract']);
  });
});
