/**
 * Errors that name the thing they are about: the customer id of a customer_not_found and
 * how a customer comes to be; a provider's API key sent instead of one of this service
 * (never echoed); a `Bearer` with no key after it (an unset shell variable); an unreadable
 * `expires_at` apart from one in the past.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService();

const newId = (prefix: string) => `${prefix}_${randomBytes(6).toString('hex')}`;

describe('customer_not_found names the customer and what creates one', () => {
  const message = (id: string) => `customer ${id} not found: a deposit (POST /v1/customers/deposit) or POST /v1/customers creates it`;

  it('on a deduct, a freeze and the reads of a customer', async () => {
    const id = newId('nobody');
    const deduct = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: id, transaction_id: newId('tx'), amount: 1 } });
    expectError(deduct, 404, 'customer_not_found', { message: message(id), fields: { customer_id: id } });
    const freeze = await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: id, transaction_id: newId('tx'), amount: 1 } });
    expectError(freeze, 404, 'customer_not_found', { message: message(id) });
    for (const path of [`/v1/customers/${id}`, `/v1/customers/${id}/balance`, `/v1/customers/${id}/ledger`]) {
      expectError(await svc.call('GET', path, { key: p.projectKey }), 404, 'customer_not_found', { message: message(id), label: path });
    }
    expectError(await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body: { name: 'x' } }), 404, 'customer_not_found', { message: message(id) });
  });

  it('a customer-scoped key asking for another customer hears the id it asked for, nothing more', async () => {
    const key = await p.customerKey(newId('own'));
    const other = newId('other');
    expectError(await svc.call('GET', `/v1/customers/${other}`, { key }), 404, 'customer_not_found', { message: message(other), fields: { customer_id: other } });
  });
});

describe('a Bearer with no key after it is a missing key, said in words', () => {
  it('as curl sends it when $API_KEY is unset', async () => {
    const message = 'no API key: the Authorization header is "Bearer" with no key after it (is the variable holding the key set?)';
    for (const authorization of ['Bearer ', 'Bearer', 'bearer   ']) {
      const res = await svc.call('GET', '/v1/customers/alice/balance', { headers: { authorization } });
      expectError(res, 401, 'missing_api_key', { message, label: JSON.stringify(authorization) });
    }
  });
});

describe('invalid_api_key says when the key is a provider key, without echoing it', () => {
  const advice = 'use a key from this service (created in the dashboard or by npm run bootstrap)';
  it.each([
    ['an OpenAI key', `sk-proj-${'a'.repeat(40)}`, `invalid API key: this looks like an OpenAI API key; ${advice}`],
    ['an Anthropic key', `sk-ant-api03-${'b'.repeat(40)}`, `invalid API key: this looks like an Anthropic API key; ${advice}`],
    ['any other text', `not-a-key-${'c'.repeat(20)}`, 'invalid API key'],
  ])('%s', async (_case, key, expected) => {
    for (const headers of [{ authorization: `Bearer ${key}` }, { 'x-api-key': key }] as Record<string, string>[]) {
      const res = await svc.call('GET', '/v1/customers/alice/balance', { headers });
      expectError(res, 401, 'invalid_api_key', { message: expected });
      expect(JSON.stringify(res.body)).not.toContain(key.slice(3, 20));
    }
  });
});

describe('expires_at: unreadable and in the past are told apart', () => {
  const deposit = (expires_at: unknown) =>
    svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: newId('exp'), amount: 10, expires_at } });

  it('an unreadable time quotes what was sent and shows the format', async () => {
    expectError(await deposit('next tuesday'), 400, 'invalid_expires_at', {
      param: 'expires_at',
      message: 'expires_at is not a readable ISO 8601 timestamp (such as 2030-01-01T00:00:00Z): got "next tuesday"',
    });
    expectError(await deposit(1_900_000_000), 400, 'invalid_expires_at', { param: 'expires_at', message: /: got a number$/ });
    expectError(await deposit('2030-02-30'), 400, 'invalid_expires_at', { message: /got "2030-02-30"$/ });
  });

  it('a time in the past names it and says it must be later than now (deposit and key)', async () => {
    expectError(await deposit('2020-01-01T00:00:00Z'), 400, 'invalid_expires_at', {
      param: 'expires_at',
      message: "expires_at 2020-01-01T00:00:00.000Z is not in the future: a deposit's credits must expire later than now",
    });
    const key = await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey, body: { type: 'project', expires_at: '2020-01-01' } });
    expectError(key, 400, 'invalid_expires_at', {
      param: 'expires_at',
      message: 'expires_at 2020-01-01T00:00:00.000Z is not in the future: a key must expire later than now',
    });
  });
});
