/**
 * Graceful shutdown (src/shutdown.ts), with the web process and the worker run as real
 * child processes from the build production runs (dist/, as the Procfile does) and sent
 * SIGTERM:
 * - while 20 streams (OpenAI and Anthropic, slowed down by the mock upstream) and 200
 *   deducts (their bodies half sent) are in flight: /health/ready answers 503 on a
 *   connection opened before, new connections are refused, every deduct is answered and
 *   every stream completes, billed the exact cost of the usage the mock sent; the process
 *   exits 0 within the default grace (SHUTDOWN_GRACE_MS unset), and once a worker has
 *   persisted, PostgreSQL holds every acknowledged operation once;
 * - streams longer than the grace are cut when it ends and settled as a client that left
 *   (estimated, nothing left frozen), and the process still exits 0; a second signal
 *   cuts them at once;
 * - a worker stopped in the middle of a backlog finishes its pass, leaves every outbox it
 *   did not empty marked dirty, and exits 0; another worker then persists everything,
 *   each entry once.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'slonik';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdminQueries } from '../../src/admin/queries.js';
import { mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { customerKeysFromBase, dirty_shards, dirtyKey } from '../../src/redis/keys.js';
import { scanKeys } from '../../src/redis/scan.js';
import { createRuntime, type Runtime } from '../../src/runtime.js';
import { startWorkers } from '../../workers/index.js';
import { testConfig, waitFor, type Json } from '../helpers.js';
import { expectedCost, modelBody, sseData } from '../gateway/support.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const build_timeout_ms = 180_000;
const streams = 20;
const deducts = 200;
const stream_tokens = 30;
const token_delay_ms = 100;

let rt: Runtime;
let mock: MockUpstream;
let env: Record<string, string>;
let organizationId: string;
let projectId: string;
let projectKey: string;
let adminKey: string;
const upstreamKey = `sk-up-${randomBytes(6).toString('hex')}`;

beforeAll(() => {
  // A no-op when dist/ is newer than the sources (CI builds it before the tests).
  execFileSync(process.execPath, [join(root, 'scripts', 'build-if-stale.mjs')], { cwd: root, stdio: 'inherit' });
}, build_timeout_ms);

beforeAll(async () => {
  const masterKey = randomBytes(32).toString('hex');
  const config = testConfig({ SVC_MASTER_KEY: masterKey });
  rt = await createRuntime(config);
  mock = await startMockUpstream({ requireKey: upstreamKey });
  const admin = createAdminQueries(rt.db);
  const org = await admin.createOrganization('graceful shutdown');
  organizationId = org.id;
  projectId = (await admin.createProject(org.id, 'shutdown', 'B')).id;
  projectKey = (await rt.keyQueries.insertKey({ organizationId: org.id, projectId, type: 'project' })).secret;
  adminKey = (await rt.keyQueries.insertKey({ organizationId: org.id, projectId: null, type: 'admin' })).secret;
  env = {
    REDIS_URL: config.REDIS_URL,
    REDIS_PREFIX: config.REDIS_PREFIX,
    QUEUE_PREFIX: config.QUEUE_PREFIX,
    DATABASE_URL: process.env.TEST_DATABASE_URL!,
    HOST: '127.0.0.1',
    SVC_MASTER_KEY: masterKey,
    PERSIST_IDLE_MS: '5',
    PERSIST_IDLE_MAX_MS: '5',
    LOG_LEVEL: 'warn',
  };
});

afterAll(async () => {
  await mock?.close();
  await rt?.close();
});

/** A web process with the two models on the mock upstream, and funded customers; the default grace when `graceMs` is null. */
async function startWeb(graceMs: number | null, customers: string[]): Promise<ServiceProcess> {
  const web = await spawnService('dist/src/web.js', graceMs === null ? env : { ...env, SHUTDOWN_GRACE_MS: String(graceMs) });
  for (const [id, provider] of [['gpt-s', 'openai'], ['claude-s', 'anthropic']] as const) {
    const r = await fetch(`${web.url}/v1/admin/projects/${projectId}/models/${id}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(modelBody(mock, upstreamKey, provider)),
    });
    expect(r.status, await r.text()).toBeLessThan(300);
  }
  for (const customer of customers) {
    const r = await fetch(`${web.url}/v1/customers/deposit`, {
      method: 'POST',
      headers: { authorization: `Bearer ${projectKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ customer_id: customer, amount: 100_000_000 }),
    });
    expect(r.status, await r.text()).toBe(200);
  }
  return web;
}

/** The exit of a child: its code and when it came. */
function exitOf(web: ServiceProcess): Promise<{ code: number | null; signal: string | null; atMs: number }> {
  if (web.child.exitCode !== null || web.child.signalCode !== null) {
    return Promise.resolve({ code: web.child.exitCode, signal: web.child.signalCode, atMs: Date.now() });
  }
  return new Promise((resolve) => web.child.once('exit', (code, signal) => resolve({ code, signal, atMs: Date.now() })));
}

interface StreamResult {
  status: number;
  headers: http.IncomingHttpHeaders;
  trailers: NodeJS.Dict<string>;
  text: string;
  /** The whole response arrived (false: the connection was cut). */
  complete: boolean;
}

/** A streamed gateway call through node:http (for its trailers), on a keep-alive agent. */
function startStream(port: number, agent: http.Agent, format: 'openai' | 'anthropic', customer: string, tokens: number, delayMs: number) {
  const controls = mockDirective({ output_tokens: tokens, chunk_delay_ms: delayMs, cache_read_tokens: 2 });
  const messages = [{ role: 'user', content: `count for me please ${controls}` }];
  const body = JSON.stringify(
    format === 'openai'
      ? { model: 'gpt-s', stream: true, stream_options: { include_usage: true }, messages }
      : { model: 'claude-s', stream: true, max_tokens: 512, messages },
  );
  let firstBytes!: () => void;
  const started = new Promise<void>((resolve) => (firstBytes = resolve));
  const done = new Promise<StreamResult>((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port,
      agent,
      method: 'POST',
      path: format === 'openai' ? '/v1/chat/completions' : '/v1/messages',
      headers: { authorization: `Bearer ${projectKey}`, 'x-service-customer': customer, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
        firstBytes();
      });
      res.on('error', () => undefined);
      res.on('close', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, trailers: res.trailers, text, complete: res.complete }));
    });
    req.end(body);
  });
  return { started, done };
}

/** The usage the mock sent in a stream, as billing kinds. */
function usageSent(format: 'openai' | 'anthropic', text: string) {
  const events = sseData(text) as Json[];
  if (format === 'openai') {
    const u = events.find((e) => e !== '[DONE]' && e.usage)!.usage;
    const cached = u.prompt_tokens_details?.cached_tokens ?? 0;
    return { input: u.prompt_tokens - cached, output: u.completion_tokens, cacheRead: cached, cacheWrite: 0 };
  }
  const u = events.find((e) => e.type === 'message_delta')!.usage;
  return { input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens ?? 0, cacheWrite: u.cache_creation_input_tokens ?? 0 };
}

/**
 * A request written up to `sentBytes` of its body over a connection of its own; `finish`
 * writes the rest and reads the answer (the server closes the connection after it).
 */
async function partialRequest(port: number, head: string, body: string, sentBytes: number) {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  let received = '';
  socket.setEncoding('utf8').on('data', (c: string) => (received += c));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => undefined);
  socket.write(head + body.slice(0, sentBytes));
  return {
    async finish(): Promise<{ status: number; head: string; body: string }> {
      socket.write(body.slice(sentBytes));
      await closed;
      const at = received.indexOf('\r\n\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0);
      return { status, head: received.slice(0, at).toLowerCase(), body: received.slice(at + 4) };
    },
  };
}

function deductRequest(port: number, customer: string, id: string, amount: number) {
  const body = JSON.stringify({ customer_id: customer, transaction_id: id, amount });
  const head =
    `POST /v1/billing/deduct HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${projectKey}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
  return partialRequest(port, head, body, Math.floor(body.length / 2));
}

/** Whether a new connection to `port` is refused now. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED'));
  });
}

/** Runs workers in this process until every outbox of the test's prefix is in PostgreSQL. */
async function persistEverything(): Promise<void> {
  const workers = await startWorkers(rt);
  try {
    await waitFor(async () => (await outboxEntries()) === 0, 60_000, 'the outboxes to be persisted');
  } finally {
    await workers.stop();
  }
}

async function outboxEntries(): Promise<number> {
  let total = 0;
  await scanKeys(rt.redis, `${rt.config.REDIS_PREFIX}c:*:outbox`, 1000, async (keys) => {
    for (const k of keys) total += await rt.redis.xlen(k);
  });
  return total;
}

const entryRow = z.object({ transaction_id: z.string(), type: z.string(), amount: z.number() });
const usageRow = z.object({ transaction_id: z.string(), status: z.string(), usage_estimated: z.boolean(), cost_credits: z.number() });

async function entriesOf(customers: string[]) {
  return rt.db.any(sql.type(entryRow)`
    SELECT transaction_id, type, amount::float8 AS amount FROM ledger_entries
    WHERE project_id = ${projectId} AND customer_id = ANY(${sql.array(customers, 'text')})`);
}

async function usageOf(transactionIds: string[]) {
  return rt.db.any(sql.type(usageRow)`
    SELECT transaction_id, status, usage_estimated, cost_credits::float8 AS cost_credits FROM usage_records
    WHERE project_id = ${projectId} AND transaction_id = ANY(${sql.array(transactionIds, 'text')})`);
}

describe('SIGTERM to a web process', () => {
  it('with 20 streams and 200 deducts in flight: every one completes, streams are billed exactly, readiness says 503, new connections are refused, exit 0 within the grace', async () => {
    const customers = ['g0', 'g1', 'g2', 'g3', 'g4'];
    const web = await startWeb(null, customers);
    const exited = exitOf(web);
    try {
      const ready = await fetch(`${web.url}/health/ready`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toMatchObject({ status: 'ready', checks: { redis: { status: 'ok' }, postgres: { status: 'ok' } } });
      expect((await fetch(`${web.url}/health/live`)).status).toBe(200);

      // 20 streams, each answering its first event before the signal.
      const agent = new http.Agent({ keepAlive: true });
      const calls = Array.from({ length: streams }, (_, i) => {
        const format = i % 2 === 0 ? ('openai' as const) : ('anthropic' as const);
        return { format, ...startStream(web.port, agent, format, customers[i % customers.length]!, stream_tokens, token_delay_ms) };
      });
      await Promise.all(calls.map((c) => c.started));

      // 200 deducts whose bodies are half sent, and a readiness request whose headers are.
      const pending = await Promise.all(Array.from({ length: deducts }, (_, i) => deductRequest(web.port, customers[i % customers.length]!, `gd-${i}`, 7)));
      const readiness = await partialRequest(web.port, `GET /health/ready HTTP/1.1\r\nHost: 127.0.0.1:${web.port}\r\n`, '\r\n', 0);
      // The server has read what came before an answer it gave after (and a moment more).
      expect((await fetch(`${web.url}/health/live`)).status).toBe(200);
      await new Promise((r) => setTimeout(r, 200));

      const signalledAt = Date.now();
      web.child.kill('SIGTERM');
      await waitFor(() => refused(web.port), 10_000, 'new connections to be refused');
      const streamsEnded = await Promise.race([Promise.all(calls.map((c) => c.done)).then(() => true), Promise.resolve(false)]);
      expect(streamsEnded, 'new connections refused while the streams were still in flight').toBe(false);

      const r = await readiness.finish();
      expect(r.status).toBe(503);
      expect(r.head).toContain('connection: close');
      expect(JSON.parse(r.body)).toMatchObject({ status: 'stopping' });

      // Answered, and their connections closed by the server once idle (finish waits for it),
      // though their answers said keep-alive: their requests had begun before the signal.
      const answers = await Promise.all(pending.map((p) => p.finish()));
      expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));

      const results = await Promise.all(calls.map((c) => c.done));
      const billed: { txid: string; cost: number }[] = [];
      for (const [i, res] of results.entries()) {
        const { format } = calls[i]!;
        expect(res.status).toBe(200);
        expect(res.complete, `stream ${i} complete`).toBe(true);
        const events = sseData(res.text) as Json[];
        const text =
          format === 'openai'
            ? events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.delta?.content ?? '').join('')
            : events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join('');
        expect(text).toBe(mockOutputText(stream_tokens));
        const cost = expectedCost(usageSent(format, res.text));
        expect(res.trailers['x-service-cost-credits'], `stream ${i} trailers`).toBe(String(cost));
        billed.push({ txid: String(res.headers['x-service-transaction-id']), cost });
      }

      const exit = await exited;
      expect(exit).toMatchObject({ code: 0, signal: null });
      // The child's default, read the way it reads it (the environment it inherits, the config's default).
      expect(exit.atMs - signalledAt).toBeLessThan(rt.config.SHUTDOWN_GRACE_MS);
      agent.destroy();

      // Once a worker has persisted: every acknowledged deduct once, every stream's exact cost.
      await persistEverything();
      const rows = await entriesOf(customers);
      const deducted = new Map<string, number>();
      for (const row of rows.filter((e) => e.type === 'DEDUCT')) deducted.set(row.transaction_id, (deducted.get(row.transaction_id) ?? 0) + 1);
      for (let i = 0; i < deducts; i++) expect(deducted.get(`gd-${i}`), `gd-${i}`).toBe(1);
      const gateway = new Map(rows.filter((e) => e.type === 'GATEWAY').map((e) => [e.transaction_id, e.amount]));
      for (const b of billed) expect(gateway.get(b.txid), b.txid).toBe(b.cost);
      const usage = await usageOf(billed.map((b) => b.txid));
      expect(usage).toHaveLength(streams);
      for (const u of usage) expect(u).toMatchObject({ status: 'settled', usage_estimated: false });
      for (const customer of customers) {
        const view = await rt.ledger.view({ projectId, organizationId }, customer);
        expect(view, customer).not.toBeNull();
        expect(view!.wallets.credits!.frozen, customer).toBe(0);
      }
      expect(web.output()).not.toMatch(/"level":50/);
    } finally {
      await web.kill();
    }
  }, 180_000);

  it('cuts the streams still running when the grace ends, settles them as a client that left, and exits 0', async () => {
    const customers = ['cut0', 'cut1'];
    const graceMs = 1_500;
    const web = await startWeb(graceMs, customers);
    const exited = exitOf(web);
    try {
      const agent = new http.Agent({ keepAlive: true });
      const calls = Array.from({ length: 4 }, (_, i) => {
        const format = i % 2 === 0 ? ('openai' as const) : ('anthropic' as const);
        return { format, ...startStream(web.port, agent, format, customers[i % 2]!, 200, 100) };
      });
      await Promise.all(calls.map((c) => c.started));
      const signalledAt = Date.now();
      web.child.kill('SIGTERM');
      const results = await Promise.all(calls.map((c) => c.done));
      for (const res of results) {
        expect(res.complete).toBe(false);
        expect(res.trailers['x-service-cost-credits']).toBeUndefined();
      }
      const exit = await exited;
      expect(exit).toMatchObject({ code: 0, signal: null });
      // The grace, the settlements of the cut calls and the closing: well under the 5 s allowed past it.
      expect(exit.atMs - signalledAt).toBeLessThan(graceMs + 5_000);
      expect(exit.atMs - signalledAt).toBeGreaterThanOrEqual(graceMs - 50);
      agent.destroy();

      await persistEverything();
      const txids = results.map((r) => String(r.headers['x-service-transaction-id']));
      const usage = await usageOf(txids);
      expect(usage).toHaveLength(calls.length);
      for (const u of usage) {
        expect(u).toMatchObject({ status: 'client_aborted', usage_estimated: true });
        expect(u.cost_credits).toBeGreaterThan(0);
      }
      const gateway = (await entriesOf(customers)).filter((e) => e.type === 'GATEWAY');
      expect(gateway.map((e) => e.transaction_id).sort()).toEqual([...txids].sort());
      for (const customer of customers) {
        const view = await rt.ledger.view({ projectId, organizationId }, customer);
        expect(view!.wallets.credits!.frozen, customer).toBe(0);
      }
    } finally {
      await web.kill();
    }
  }, 120_000);
});

describe('a second signal', () => {
  it('cuts what is still in flight at once, settles it, and exits 0 long before the grace', async () => {
    const customers = ['twice0'];
    const web = await startWeb(60_000, customers);
    const exited = exitOf(web);
    try {
      const agent = new http.Agent({ keepAlive: true });
      const call = startStream(web.port, agent, 'anthropic', 'twice0', 200, 100);
      await call.started;
      const signalledAt = Date.now();
      web.child.kill('SIGTERM');
      await waitFor(() => refused(web.port), 10_000, 'new connections to be refused');
      web.child.kill('SIGINT');
      const res = await call.done;
      expect(res.complete).toBe(false);
      const exit = await exited;
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(exit.atMs - signalledAt).toBeLessThan(15_000);
      agent.destroy();
      await persistEverything();
      const usage = await usageOf([String(res.headers['x-service-transaction-id'])]);
      expect(usage).toMatchObject([{ status: 'client_aborted', usage_estimated: true }]);
    } finally {
      await web.kill();
    }
  }, 120_000);
});

describe('SIGTERM to a worker', () => {
  it('in the middle of a backlog: the pass finishes, nothing is stranded, and another worker persists every entry once', async () => {
    const scope = { projectId, organizationId };
    const customers = Array.from({ length: 800 }, (_, i) => `w${i}`);
    const perCustomer = 10;
    // The backlog, written with no worker running.
    for (let round = 0; round < perCustomer; round++) {
      await Promise.all(
        customers.map((customerId) =>
          rt.ledger.deposit(scope, { customerId, amount: 10, wallet: 'credits', label: 'backlog', startsAtMs: null, expiresAtMs: null, idempotencyKey: `wd-${customerId}-${round}`, description: null }),
        ),
      );
    }
    const total = customers.length * perCustomer;
    const worker = await spawnService('dist/workers/main.js', env);
    const exited = exitOf(worker);
    try {
      const persisted = async () => (await entriesOf(customers)).length;
      await waitFor(async () => (await persisted()) > 0, 30_000, 'the worker to persist its first entries');
      worker.child.kill('SIGTERM');
      const exit = await exited;
      expect(exit, worker.output()).toMatchObject({ code: 0, signal: null });
      const before = await persisted();
      expect(before).toBeGreaterThan(0);
      expect(before, 'the worker stopped before the backlog was done').toBeLessThan(total);

      // Every outbox that still holds entries is marked dirty: none waits for the sweeper.
      const dirty = new Set<string>();
      for (let n = 0; n < dirty_shards; n++) for (const base of await rt.redis.smembers(dirtyKey(rt.config.REDIS_PREFIX, n))) dirty.add(base);
      let waiting = 0;
      for (const customerId of customers) {
        const base = rt.ledger.keys(scope, customerId).base;
        if ((await rt.redis.xlen(customerKeysFromBase(base).outbox)) > 0) {
          waiting++;
          expect(dirty.has(base), base).toBe(true);
        }
      }
      expect(waiting).toBeGreaterThan(0);

      await persistEverything();
      const rows = await entriesOf(customers);
      expect(rows).toHaveLength(total);
      expect(new Set(rows.map((r) => r.transaction_id)).size).toBe(total);
    } finally {
      await worker.kill();
    }
  }, 120_000);
});
