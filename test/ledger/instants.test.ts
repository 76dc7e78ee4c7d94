/**
 * Expiry and TTL boundaries at exactly their instant, one example each (the model's
 * property test reaches them only by chance): a source no longer counts at its
 * `expires_at`, a TTL freeze is settled by a read at its deadline, and a deposit whose
 * `expires_at` is the instant it runs is refused.
 *
 * The scripts read Redis TIME plus the test clock's offset. A test cannot stop that
 * clock, so it lands a script on the instant: the view script answers the instant it ran
 * at, and reads from a few ms before the instant, one after the other, pass through it
 * (a stall that skips it starts the case again). Scripts sent in one turn of the event
 * loop go to Redis in one pipeline and run in order, so a deposit sent between two views
 * that both ran at the instant ran at it too.
 */
import { describe, expect, it } from 'vitest';
import { customerKeys, scriptKeys } from '../../src/redis/keys.js';
import { registerScripts, scriptApi, ScriptStatus, type ScriptApi, type ScriptReply } from '../../src/redis/scripts.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService();

/** Cases tried before a test gives up landing on its instant. */
const tries_max = 50;

let api: ScriptApi | undefined;
let entries = 0;

function scripts(): ScriptApi {
  api ??= scriptApi(registerScripts(svc.rt.redis, svc.rt.config.ARCHIVE_GRACE_MS));
  return api;
}

function call(customerId: string) {
  return {
    keys: scriptKeys(customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customerId)),
    clockOffsetMs: svc.rt.clock.offsetMs(), projectId: p.projectId, customerId, entryIdBase: `le_instants_${++entries}`, bindingReadAtMs: null,
  };
}

interface View {
  nowMs: number;
  /** Wallet -> total, used and frozen credits of the sources active at nowMs. */
  wallets: Record<string, { t: number; u: number; f: number }>;
}

function parseView(reply: ScriptReply): View {
  expect(reply[0]).toBe(ScriptStatus.Ok);
  const wallets = JSON.parse(reply[5] as string) as Record<string, { t: string | number; u: string | number; f: string | number }>;
  const out: View['wallets'] = {};
  // cjson encodes an empty object as [].
  for (const [w, v] of Object.entries(Array.isArray(wallets) ? {} : wallets)) out[w] = { t: Number(v.t), u: Number(v.u), f: Number(v.f) };
  return { nowMs: Number(reply[4]), wallets: out };
}

const view = async (customerId: string): Promise<View> => parseView(await scripts().view(call(customerId), { listSources: '0' }));

async function serviceNow(): Promise<number> {
  const [s, us] = await svc.rt.redis.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000) + svc.rt.clock.offsetMs();
}

/**
 * The customer's view read at exactly `atMs`: moves the clock to a few ms before it, then
 * reads until a read runs at it. Null when a read went past it without one landing on it.
 * `before` gets every read that ran earlier.
 */
async function viewAt(customerId: string, atMs: number, before: View[] = []): Promise<View | null> {
  const now = await serviceNow();
  if (atMs - now > 5) svc.rt.clock.advance(atMs - now - 5);
  for (;;) {
    const v = await view(customerId);
    if (v.nowMs === atMs) return v;
    if (v.nowMs > atMs) return null;
    before.push(v);
  }
}

async function deposit(customerId: string, body: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
  const res = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customerId, amount: 100, ...body } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

describe('boundaries at exactly their instant', () => {
  it('a source counts until the ms before its expires_at and not at it', async () => {
    for (let i = 0; i < tries_max; i++) {
      const customer = `expiring-${i}`;
      const expiresAtMs = (await serviceNow()) + 60_000;
      await deposit(customer, { expires_at: new Date(expiresAtMs).toISOString() });
      const before: View[] = [];
      const at = await viewAt(customer, expiresAtMs, before);
      if (at === null) continue;
      for (const v of before) expect(v.wallets.credits).toEqual({ t: 100, u: 0, f: 0 });
      expect(at.wallets.credits ?? { t: 0, u: 0, f: 0 }).toEqual({ t: 0, u: 0, f: 0 });
      const balance = await svc.call('GET', `/v1/customers/${customer}/balance`, { key: p.projectKey });
      expect(balance.body).toMatchObject({ total: 0, available: 0 });
      return;
    }
    throw new Error(`no read landed on the instant in ${tries_max} tries`);
  });

  it.each([
    ['release', 'release_after_seconds', { t: 100, u: 0, f: 0 }],
    ['consume', 'consume_after_seconds', { t: 100, u: 40, f: 0 }],
  ] as const)('a TTL %s is settled by a read at its deadline', async (kind, field, settled) => {
    for (let i = 0; i < tries_max; i++) {
      const customer = `ttl-${kind}-${i}`;
      await deposit(customer);
      const freeze = await svc.call('POST', '/v1/billing/freeze', {
        key: p.projectKey, body: { customer_id: customer, transaction_id: `${customer}-f`, amount: 40, [field]: 1 },
      });
      expect(freeze.status, JSON.stringify(freeze.body)).toBe(200);
      const dueAtMs = Date.parse(freeze.body.auto_settle_at as string);
      expect(dueAtMs - Date.parse(freeze.body.frozen_at as string)).toBe(1_000);
      const before: View[] = [];
      const at = await viewAt(customer, dueAtMs, before);
      if (at === null) continue;
      for (const v of before) expect(v.wallets.credits).toEqual({ t: 100, u: 0, f: 40 });
      expect(at.wallets.credits).toEqual(settled);
      const ledger = await svc.call('GET', `/v1/customers/${customer}/ledger`, { key: p.projectKey });
      expect(ledger.body.data[0]).toMatchObject({
        transaction_id: `${customer}-f`, type: kind === 'release' ? 'UNFREEZE' : 'CONSUME', reason: `ttl_${kind}`, created_at: new Date(dueAtMs).toISOString(),
      });
      return;
    }
    throw new Error(`no read landed on the deadline in ${tries_max} tries`);
  });

  it('a deposit whose expires_at is the instant it runs is refused', async () => {
    const customer = 'expires-now';
    await deposit(customer);
    let last = (await view(customer)).nowMs;
    // Many more cases than above: a case is three scripts, not a setup and a read loop.
    for (let i = 0; i < tries_max * 10; i++) {
      const expiresAtMs = last + 1;
      const args = {
        idempotencyKey: '', requestHash: `h${i}`, amount: 10, wallet: 'credits', label: 'deposit', startsAtMs: '', expiresAtMs,
        name: '0', email: '0', metadata: '0', description: '', sourceId: `src_expires_now_${i}`, requestFields: '',
      };
      // One turn of the event loop: one pipeline, run in this order.
      const [a, d, b] = await Promise.all([view(customer), scripts().deposit(call(customer), args), view(customer)]);
      last = b.nowMs;
      if (a.nowMs !== expiresAtMs || b.nowMs !== expiresAtMs) {
        // Not on the instant: a deposit that ran before it applies, one after it is refused.
        if (b.nowMs < expiresAtMs) expect(d[0]).toBe(ScriptStatus.Ok);
        if (a.nowMs >= expiresAtMs) expect(d[0]).toBe(ScriptStatus.InvalidExpires);
        continue;
      }
      expect(d[0]).toBe(ScriptStatus.InvalidExpires);
      return;
    }
    throw new Error(`no deposit landed on the instant in ${tries_max * 10} tries`);
  });
});
