/**
 * Several API processes on one wallet: three runtimes, each with its own Redis connections
 * and HTTP server, on one Redis prefix (as three `web` processes share one Redis), receive
 * concurrent deducts, freezes, consumes and unfreezes for one customer, and duplicates of
 * the same transaction sent to two processes at once. The wallet affords only part of the
 * demand. Afterwards the balance must be exactly what the successful answers say, never
 * below zero, every duplicate charged once, and the ledger in PostgreSQL whole (one entry
 * per applied operation, with its amount) and in step with Redis (reconcile: no drift).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcile } from '../../src/reconcile/walk.js';
import { startTestService, type ApiResponse, type TestProject, type TestService } from '../helpers.js';
import { expectError } from '../support/errors.js';

const process_count = 3;
const clients_per_process = 3;
const steps_per_client = 8;
const deposits = [40_000, 25_000, 15_000];

let services: TestService[];
let p: TestProject;

beforeAll(async () => {
  const first = await startTestService({ workers: true });
  const shared = { REDIS_PREFIX: first.rt.config.REDIS_PREFIX, QUEUE_PREFIX: first.rt.config.QUEUE_PREFIX };
  const others = await Promise.all(Array.from({ length: process_count - 1 }, () => startTestService({ config: shared })));
  services = [first, ...others];
  p = await first.project('B');
});

afterAll(async () => {
  // Only the first service cleans the shared prefix up, once the others are gone.
  for (const s of services?.slice(1) ?? []) {
    await s.server.close();
    await s.rt.close();
  }
  await services?.[0].close();
});

/** A small deterministic generator, so that a failure repeats. */
function lcg(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return x / 2_147_483_648;
  };
}

interface Outcome {
  op: 'deduct' | 'freeze' | 'consume' | 'unfreeze';
  txid: string;
  amount: number;
  res: ApiResponse;
}

describe('three API processes on one wallet', () => {
  it('keep the balance exact under concurrent deducts, freezes, consumes and duplicates', async () => {
    const customer = 'shared-wallet';
    for (const [i, amount] of deposits.entries()) {
      const r = await services[i % process_count].call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    const deposited = deposits.reduce((a, b) => a + b, 0);
    const outcomes: Outcome[] = [];
    const post = async (via: number, op: Outcome['op'], body: Record<string, unknown>, amount: number) => {
      const res = await services[via].call('POST', `/v1/billing/${op}`, { key: p.projectKey, body: { customer_id: customer, ...body } });
      outcomes.push({ op, txid: String(body.transaction_id), amount, res });
      return res;
    };

    // Each client draws 1..4000 per step: together they ask for about twice what the wallet holds.
    const client = async (c: number) => {
      const rnd = lcg(c + 1);
      const pick = () => Math.floor(rnd() * process_count);
      for (let step = 0; step < steps_per_client; step++) {
        const txid = `c${c}-s${step}`;
        const amount = 1 + Math.floor(rnd() * 4_000);
        const kind = rnd();
        if (kind < 0.4) {
          // The same deduct sent to two processes at once: one applies, the other replays.
          await Promise.all([post(pick(), 'deduct', { transaction_id: txid, amount }, amount), post(pick(), 'deduct', { transaction_id: txid, amount }, amount)]);
        } else {
          const frozen = await post(pick(), 'freeze', { transaction_id: txid, amount }, amount);
          if (frozen.status !== 200) continue;
          if (kind < 0.8) {
            const part = 1 + Math.floor(rnd() * amount);
            await post(pick(), 'consume', { transaction_id: txid, amount: part }, part);
          } else {
            await post(pick(), 'unfreeze', { transaction_id: txid }, amount);
          }
        }
      }
    };
    await Promise.all(Array.from({ length: process_count * clients_per_process }, (_, c) => client(c)));

    // Every answer is a success or the refusal of an unaffordable draw: nothing else.
    for (const o of outcomes) {
      if (o.res.status === 200) continue;
      expect(['deduct', 'freeze'], JSON.stringify(o)).toContain(o.op);
      expectError(o.res, 400, 'insufficient_balance', { label: JSON.stringify(o) });
    }
    const applied = outcomes.filter((o) => o.res.status === 200 && o.res.body.is_idempotent_replay === false);
    const refused = outcomes.filter((o) => o.res.status !== 200);
    expect(refused.length, 'the wallet never ran short: the test proves nothing about its edge').toBeGreaterThan(0);

    // Duplicates: each transaction id applied at most once per operation, and its replay repeats the first answer.
    const byKey = new Map<string, Outcome[]>();
    for (const o of outcomes) byKey.set(`${o.op}:${o.txid}`, [...(byKey.get(`${o.op}:${o.txid}`) ?? []), o]);
    for (const [key, list] of byKey) {
      const ok = list.filter((o) => o.res.status === 200);
      expect(ok.filter((o) => !o.res.body.is_idempotent_replay).length, key).toBeLessThanOrEqual(1);
      if (list.length === 2 && ok.length === 2) {
        const strip = (b: Record<string, unknown>) => ({ ...b, is_idempotent_replay: undefined });
        expect(strip(ok[0].res.body), key).toEqual(strip(ok[1].res.body));
      }
    }

    const sum = (op: Outcome['op']) => applied.filter((o) => o.op === op).reduce((n, o) => n + o.amount, 0);
    const used = sum('deduct') + sum('consume');
    const balances = await Promise.all(services.map((s) => s.call('GET', `/v1/customers/${customer}/balance`, { key: p.projectKey })));
    for (const b of balances) {
      expect(b.status).toBe(200);
      // Every freeze was consumed or unfrozen: nothing stays frozen, and what is not used is available.
      expect(b.body).toMatchObject({ total: deposited, used, frozen: 0, available: deposited - used });
      expect(b.body.available).toBeGreaterThanOrEqual(0);
    }

    // The ledger in PostgreSQL: one entry per applied operation, with its amount.
    await services[0].drained();
    const ledger: { type: string; transaction_id: string; amount: number }[] = [];
    let cursor: string | null = null;
    do {
      const page: ApiResponse = await services[0].call('GET', `/v1/customers/${customer}/ledger?limit=100${cursor ? `&cursor=${cursor}` : ''}`, { key: p.projectKey });
      expect(page.status).toBe(200);
      ledger.push(...page.body.data);
      cursor = page.body.has_more ? page.body.next_cursor : null;
    } while (cursor);
    const expected = [
      ...deposits.map((a) => `DEPOSIT:${a}`),
      ...applied.map((o) => `${o.op.toUpperCase()}:${o.txid}:${o.amount}`),
      // A consume also returns the rest of its freeze; its entry's amount is what it used.
    ].sort();
    const got = ledger.map((e) => (e.type === 'DEPOSIT' ? `DEPOSIT:${e.amount}` : `${e.type}:${e.transaction_id}:${e.amount}`)).sort();
    expect(got).toEqual(expected);
    const report = await reconcile(services[0].rt, { projectId: p.projectId, repair: false });
    expect(report).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });
  }, 60_000);
});
