/**
 * A billing period that starts while PostgreSQL is down: the new period's count starts at
 * 0 from what Redis knows (the plan and the previous period's count), so billable
 * operations go on instead of answering 503. The service reaches PostgreSQL through a TCP
 * proxy that the test cuts; the clock moves with the test clock offset.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestProject, type TestService } from '../helpers.js';

/** A TCP proxy to PostgreSQL that can be cut (every connection closed, new ones refused). */
class CuttableProxy {
  private readonly sockets = new Set<net.Socket>();
  private server: net.Server | undefined;
  port = 0;

  constructor(private readonly target: URL) {}

  async open(port = 0): Promise<void> {
    this.server = net.createServer((client) => {
      const upstream = net.connect(Number(this.target.port || 5432), this.target.hostname);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('error', () => undefined);
        s.on('close', () => this.sockets.delete(s));
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  async cut(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server!.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
  }
}

const target = new URL(process.env.TEST_DATABASE_URL!);
const proxy = new CuttableProxy(target);
let svc: TestService;
let p: TestProject;

beforeAll(async () => {
  await proxy.open();
  const viaProxy = new URL(target);
  viaProxy.host = `127.0.0.1:${proxy.port}`;
  svc = await startTestService({ config: { DATABASE_URL: viaProxy.toString() } });
  p = await svc.project('B');
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1_000 } })).status).toBe(200);
});
afterAll(async () => {
  await svc?.close();
  await proxy.cut().catch(() => undefined);
});

describe('a period rollover while PostgreSQL is down', () => {
  it('starts the new period at 0 without PostgreSQL; deducts and consumes go on', async () => {
    const deduct = (id: string) => svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: id, amount: 10 } });
    expect((await deduct('before')).status).toBe(200);
    const first = await svc.rt.plans.organization(p.organizationId);
    expect(first.billable_ops).toBe(1);

    await proxy.cut();
    svc.rt.clock.advance(Date.parse(first.period_end) - Date.now() - svc.rt.clock.offsetMs() + 1_000);
    const res = await deduct('after');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'f1', amount: 5 } })).status).toBe(200);
    const consume = await svc.call('POST', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'f1', amount: 5 } });
    expect(consume.status, JSON.stringify(consume.body)).toBe(200);

    await proxy.open(proxy.port);
    const next = await svc.rt.plans.organization(p.organizationId);
    expect(next).toMatchObject({ period_start: first.period_end, billable_ops: 2 });
  });
});
