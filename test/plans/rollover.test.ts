/**
 * A billing period that starts while PostgreSQL is down: the new period's count starts at
 * 0 from what Redis knows (the plan and the previous period's count), so billable
 * operations go on instead of answering 503. The service reaches PostgreSQL through a TCP
 * proxy that the test cuts; the clock moves with the test clock offset.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startTestService, type TestProject, type TestService } from '../helpers.js';

const proxy = TcpProxy.to(process.env.TEST_DATABASE_URL!, 5432);
let svc: TestService;
let p: TestProject;

beforeAll(async () => {
  await proxy.start();
  svc = await startTestService({ config: { DATABASE_URL: proxy.via(process.env.TEST_DATABASE_URL!) } });
  p = await svc.project('B');
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1_000 } })).status).toBe(200);
});
afterAll(async () => {
  await svc?.close();
  await proxy.close();
});

describe('a period rollover while PostgreSQL is down', () => {
  it('starts the new period at 0 without PostgreSQL; deducts and consumes go on', async () => {
    const deduct = (id: string) => svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: id, amount: 10 } });
    expect((await deduct('before')).status).toBe(200);
    const first = await svc.rt.plans.organization(p.organizationId);
    expect(first.billable_ops).toBe(1);

    await proxy.close();
    svc.rt.clock.advance(Date.parse(first.period_end) - Date.now() - svc.rt.clock.offsetMs() + 1_000);
    const res = await deduct('after');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'f1', amount: 5 } })).status).toBe(200);
    const consume = await svc.call('POST', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'f1', amount: 5 } });
    expect(consume.status, JSON.stringify(consume.body)).toBe(200);

    await proxy.start();
    const next = await svc.rt.plans.organization(p.organizationId);
    expect(next).toMatchObject({ period_start: first.period_end, billable_ops: 2 });
  });
});
