/**
 * On a single Redis a gateway call sends one command before its upstream call, the hold
 * with the call's receipt index entry (lua/bound_gateway_hold-12.lua), and one after it,
 * the settlement, with the outbox's dirty mark after it unawaited (docs/ARCHITECTURE.md,
 * "Round trips on the hot path"). A MONITOR connection lists what the service's Redis
 * connection sends about the call (the customer's keys or the project's binding buckets
 * among the arguments: the process's plan lease reports in the background on the same
 * connection);
 * the upstream is the mock behind a relay that sends an ECHO on that connection when the
 * call reaches it, so the commands before and after the upstream call fall on either side
 * of it. A refused hold is its one command, and leaves no index entry to take back.
 *
 * The service runs without workers here: they share its Redis connection. A Redis Cluster
 * keeps the hold and the index entry as two commands (other slots; test/gateway/holds.test.ts).
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { detectCluster } from '../../src/redis/client.js';
import { binding_buckets, bindingKeysOfBucket, customerKeys } from '../../src/redis/keys.js';
import { startTestService, testConfig, waitFor, type TestProject, type TestService } from '../helpers.js';
import { clientAddress, describeCommand, watchCommands } from '../support/monitor.js';
import { modelBody, OPENAI_MODEL, rawPost, type RawResponse } from './support.js';

const clustered = await detectCluster(testConfig().REDIS_URL, undefined);

let svc: TestService;
let p: TestProject;
let mock: MockUpstream;
let relay: http.Server;
let monitor: Socket;
/** The transaction id of each gateway hold the service ran, in order. */
const held: string[] = [];
/** Commands the service's connection sent since the last `commandsOf` began. */
let seen: string[] = [];

beforeAll(async () => {
  if (clustered) return;
  const upstreamKey = `sk-upstream-${randomBytes(8).toString('hex')}`;
  mock = await startMockUpstream({ requireKey: upstreamKey });
  svc = await startTestService({ config: { SVC_MASTER_KEY: randomBytes(32).toString('hex') } });
  p = await svc.project('B');
  // The upstream: marks the service's connection, then passes the call on to the mock.
  const mockUrl = new URL(mock.url);
  relay = http.createServer((req, res) => {
    void svc.rt.redis.echo('upstream').then(() => {
      const out = http.request({ host: mockUrl.hostname, port: mockUrl.port, path: req.url, method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      req.pipe(out);
    });
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  const relayUrl = `http://127.0.0.1:${(relay.address() as AddressInfo).port}/v1`;
  const put = await svc.call('PUT', `/v1/admin/projects/${p.projectId}/models/${OPENAI_MODEL}`, {
    key: p.adminKey,
    body: { ...modelBody(mock, upstreamKey, 'openai'), upstream_base_url: relayUrl },
  });
  expect(put.status, JSON.stringify(put.body)).toBeLessThan(300);
  const ledger = svc.rt.ledger;
  const runBound = ledger.runBound.bind(ledger);
  ledger.runBound = (...args: Parameters<typeof runBound>) => {
    if (args[0] === 'gateway_hold') held.push(args[3]);
    return runBound(...args);
  };
  const addr = await clientAddress(svc.rt.redis);
  // The customers' keys, and the project's transaction id buckets (the receipt index).
  const prefix = svc.rt.config.REDIS_PREFIX;
  const watched = [
    ...['c1', 'poor'].map((c) => customerKeys(prefix, p.projectId, c).base),
    ...Array.from({ length: binding_buckets }, (_, n) => bindingKeysOfBucket(prefix, p.projectId, 't', n).ids),
  ];
  monitor = await watchCommands(svc.rt.config.REDIS_URL, (source, args) => {
    if (source !== addr) return;
    if (args[0].toLowerCase() === 'echo') seen.push(`echo ${args[1]}`);
    else if (args.some((a) => watched.some((w) => a.includes(w)))) seen.push(describeCommand(args));
  });
});

afterAll(async () => {
  monitor?.destroy();
  relay?.close();
  await svc?.close();
  await mock?.close();
});

const fund = async (customerId: string, amount: number) => {
  const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customerId, amount } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
};

const chat = (customerId: string) =>
  rawPost(svc.url, '/v1/chat/completions', {
    key: p.projectKey,
    headers: { 'x-service-customer': customerId },
    body: { model: OPENAI_MODEL, messages: [{ role: 'user', content: 'say something short' }] },
  });

/**
 * The commands about the watched customers that the service's connection sent during
 * `call`, between an ECHO before and one after it, sent on that connection.
 */
async function commandsOf(call: () => Promise<RawResponse>): Promise<{ res: RawResponse; commands: string[] }> {
  await nextTurn();
  await svc.rt.redis.echo('begin');
  const res = await call();
  await svc.rt.redis.echo('end');
  await waitFor(() => seen.includes('echo end'), 5_000, 'the MONITOR lines');
  const lines = seen;
  seen = [];
  return { res, commands: lines.slice(lines.indexOf('echo begin') + 1, lines.indexOf('echo end')) };
}

describe.skipIf(clustered)('one command before the upstream call and one after it on a single Redis', () => {
  beforeAll(async () => {
    // The customer's active mark is a command of its own once per 5 s, the plan's lease
    // one per organization and process, and a script's first call loads its library:
    // all done here.
    await fund('c1', 1_000_000);
    await fund('poor', 1);
    expect((await chat('c1')).status).toBe(200);
    expect((await chat('poor')).status).toBe(402);
  });

  it('a settled call: the hold with its index entry, the upstream, the settlement', async () => {
    const { res, commands } = await commandsOf(() => chat('c1'));
    expect(res.status, res.text).toBe(200);
    // After the settlement, the outbox's dirty mark, which the call does not wait for
    // (src/ledger/service.ts, markDirty).
    expect(commands).toEqual(['script bound_gateway_hold', 'echo upstream', 'script gateway_settle', 'sadd']);
    // The index entry names the call's customer: its receipt is found (from the outbox,
    // no workers here).
    const txid = String(res.headers['x-service-transaction-id']);
    expect((await svc.rt.ledger.bindings.command(p.projectId, 't', txid, '', true)).owner).toBe('c1');
    const receipt = await svc.call('GET', `/v1/billing/receipts/${txid}`, { key: p.projectKey });
    expect(receipt.status, JSON.stringify(receipt.body)).toBe(200);
    expect(receipt.body).toMatchObject({ transaction_id: txid, customer_id: 'c1' });
  });

  it('a refused hold: one command, no upstream call, and no index entry to take back', async () => {
    const { res, commands } = await commandsOf(() => chat('poor'));
    expect(res.status, res.text).toBe(402);
    expect(commands).toEqual(['script bound_gateway_hold']);
    expect((await svc.rt.ledger.bindings.command(p.projectId, 't', held.at(-1)!, '', true)).owner).toBeNull();
  });
});
