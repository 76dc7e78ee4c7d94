/**
 * On a single Redis a money operation's id binding and the operation itself are one
 * script, one command (lua/bound_<op>-12.lua; docs/ARCHITECTURE.md, "Round trips on the
 * hot path"). A MONITOR connection watches a ledger of the test's own, on a connection of
 * its own, and every command that connection sends during an operation is listed: a
 * deduct, a freeze, a deposit with a key, and a consume or unfreeze naming their customer
 * send exactly one script, a consume without a customer the binding read first and then
 * its script. An id the Bloom filter has (archived by the trim) takes the two steps after
 * the bound script changed nothing, and its replay answers the original result.
 *
 * A Redis Cluster keeps the two steps (other slots): every other ledger suite runs there.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Socket } from 'node:net';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgArchive } from '../../src/ledger/bindings.js';
import { archive_grace_ms } from '../../src/ledger/retention.js';
import { LedgerService } from '../../src/ledger/service.js';
import type { OpResult } from '../../src/ledger/results.js';
import type { ProjectScope } from '../../src/ledger/requests.js';
import { createRedis, detectCluster } from '../../src/redis/client.js';
import { customerKeys } from '../../src/redis/keys.js';
import { registerScripts } from '../../src/redis/scripts.js';
import { ApiError } from '../../src/errors/catalogue.js';
import { testConfig, waitFor } from '../helpers.js';
import { clientAddress, describeCommand, watchCommands } from '../support/monitor.js';
import { p, svc, useTestService } from '../support/service.js';

const clustered = await detectCluster(testConfig().REDIS_URL, undefined);

let scope: ProjectScope;
/** The ledger under watch: its own connection, so its commands are told apart by address. */
let conn: Redis;
let ledger: LedgerService;
let monitor: Socket;
let connAddr: string;
/** Commands `conn` sent since the last `commandsOf` began. */
let seen: string[] = [];

/** Time for a record to be archived and deleted: the retention, the grace, and trim passes. */
const archived_within_ms = 1_000 + archive_grace_ms + 10_000;

// On a Redis Cluster every test here is skipped: no service to start.
if (!clustered) useTestService({ workers: true, config: { REDIS_RETENTION_SECONDS: 1 } });
beforeAll(async () => {
  if (clustered) return;
  scope = { projectId: p.projectId, organizationId: p.organizationId };
  conn = createRedis(svc.rt.config.REDIS_URL);
  ledger = new LedgerService(conn, registerScripts(conn, svc.rt.config.ARCHIVE_GRACE_MS), svc.rt.config.REDIS_PREFIX, svc.rt.clock, { archived: pgArchive(svc.rt.db) });
  connAddr = await clientAddress(conn);
  monitor = await watchCommands(svc.rt.config.REDIS_URL, (source, args) => {
    if (source === connAddr) seen.push(describeCommand(args));
  });
});

afterAll(async () => {
  monitor?.destroy();
  conn?.disconnect();
});

/**
 * The commands the ledger's connection sent while `op` ran: between an ECHO before and
 * one after it, sent on that connection (the dirty mark an operation leaves goes out in a
 * later turn of the event loop, after the second ECHO).
 */
async function commandsOf<T>(op: () => Promise<T>): Promise<{ result: T | ApiError; commands: string[] }> {
  await nextTurn();
  await conn.echo('begin');
  let result: T | ApiError;
  try {
    result = await op();
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    result = err;
  }
  await conn.echo('end');
  await waitFor(() => seen.lastIndexOf('echo') > seen.indexOf('echo'), 5_000, 'the MONITOR lines');
  const lines = seen;
  seen = [];
  return { result, commands: lines.slice(lines.indexOf('echo') + 1, lines.lastIndexOf('echo')) };
}

const deduct = (customerId: string, transactionId: string, amount: number) =>
  ledger.deduct(scope, { customerId, transactionId, amount, wallets: null, businessType: null, description: null });
const freeze = (customerId: string, transactionId: string, amount: number) =>
  ledger.freeze(scope, { customerId, transactionId, amount, wallets: null, businessType: null, description: null, ttl: null });
const consume = (customerId: string | null, transactionId: string, amount: number | null) =>
  ledger.consume(scope, { customerId, transactionId, amount, description: null });
const unfreeze = (customerId: string | null, transactionId: string) => ledger.unfreeze(scope, { customerId, transactionId, description: null });
const deposit = (customerId: string, amount: number, idempotencyKey: string | null) =>
  ledger.deposit(scope, { customerId, amount, wallet: 'default', label: 'test', startsAtMs: null, expiresAtMs: null, idempotencyKey, description: null });

const errorCode = (r: OpResult | ApiError) => (r instanceof ApiError ? r.code : null);

describe.skipIf(clustered)('one script per money operation on a single Redis', () => {
  beforeAll(async () => {
    // A script's first call on a Redis that lacks its function loads it (FUNCTION LOAD);
    // the customer's active mark is a command of its own once per 5 s. Both are done here.
    await deposit('c1', 1_000, 'c1-warm-k');
    await deposit('c1', 1_000, null);
    await deduct('c1', 'c1-warm-d', 1);
    await freeze('c1', 'c1-warm-f1', 1);
    await freeze('c1', 'c1-warm-f2', 1);
    await freeze('c1', 'c1-warm-f3', 1);
    await consume('c1', 'c1-warm-f1', null);
    await unfreeze('c1', 'c1-warm-f2');
    await consume(null, 'c1-warm-f3', null);
  });

  it('deduct, freeze, consume and unfreeze naming the customer, and deposit with a key: one script each', async () => {
    const d = await commandsOf(() => deduct('c1', 'c1-d1', 10));
    expect(d.commands).toEqual(['script bound_deduct']);
    expect(d.result).toMatchObject({ replay: false, body: { deducted_amount: 10 } });

    const f = await commandsOf(() => freeze('c1', 'c1-f1', 20));
    expect(f.commands).toEqual(['script bound_freeze']);
    expect(f.result).toMatchObject({ replay: false, body: { frozen_amount: 20 } });

    const c = await commandsOf(() => consume('c1', 'c1-f1', 15));
    expect(c.commands).toEqual(['script bound_consume']);
    expect(c.result).toMatchObject({ replay: false, body: { consumed_amount: 15, returned_amount: 5 } });

    await freeze('c1', 'c1-f2', 20);
    const u = await commandsOf(() => unfreeze('c1', 'c1-f2'));
    expect(u.commands).toEqual(['script bound_unfreeze']);
    expect(u.result).toMatchObject({ replay: false, body: { unfrozen_amount: 20 } });

    const k = await commandsOf(() => deposit('c1', 100, 'c1-k1'));
    expect(k.commands).toEqual(['script bound_deposit']);
    expect(k.result).toMatchObject({ replay: false, body: { added_amount: 100 } });

    // Replays too: the binding is there, the script answers the stored result.
    const again = await commandsOf(() => deduct('c1', 'c1-d1', 10));
    expect(again.commands).toEqual(['script bound_deduct']);
    expect(again.result).toMatchObject({ replay: true, body: (d.result as OpResult).body });
  });

  it('a consume or unfreeze without its customer reads the binding first: two commands', async () => {
    await freeze('c1', 'c1-f3', 20);
    const c = await commandsOf(() => consume(null, 'c1-f3', null));
    expect(c.commands).toEqual(['script bind', 'script consume']);
    expect(c.result).toMatchObject({ replay: false, customerId: 'c1', body: { consumed_amount: 20 } });
  });

  it('refusals of the binding step: one command, and the other customer untouched', async () => {
    await deposit('c2', 1_000, null);
    await freeze('c1', 'c1-f4', 10);
    const before = await conn.hgetall(customerKeys(svc.rt.config.REDIS_PREFIX, scope.projectId, 'c2').src);
    const cases: [() => Promise<OpResult>, string][] = [
      [() => deduct('c2', 'c1-d1', 10), 'transaction_conflict'],
      [() => freeze('c2', 'c1-f4', 10), 'transaction_conflict'],
      [() => deposit('c2', 100, 'c1-k1'), 'transaction_conflict'],
      [() => consume('c2', 'c1-f4', null), 'customer_scope_mismatch'],
      [() => unfreeze('c2', 'c1-f4'), 'customer_scope_mismatch'],
      [() => consume('c1', 'never-bound', null), 'no_consumable_freeze_records'],
      [() => unfreeze('c1', 'never-bound'), 'no_unfreezable_records'],
    ];
    for (const [op, code] of cases) {
      const r = await commandsOf(op);
      expect(errorCode(r.result), code).toBe(code);
      expect(r.commands, code).toHaveLength(1);
      expect(r.commands[0], code).toMatch(/^script bound_/);
    }
    expect(await conn.hgetall(customerKeys(svc.rt.config.REDIS_PREFIX, scope.projectId, 'c2').src)).toEqual(before);
    // Nothing bound on the way: a consume of an id bound to nobody binds nothing.
    expect((await ledger.bindings.command(scope.projectId, 't', 'never-bound', '')).owner).toBeNull();
    // The freeze still belongs to c1 and settles there.
    expect(await consume('c1', 'c1-f4', null)).toMatchObject({ customerId: 'c1', body: { consumed_amount: 10 } });
  });

  it('an archived id: the bound script changes nothing, the two steps ask PostgreSQL, and the replay is the original answer', async () => {
    const keys = customerKeys(svc.rt.config.REDIS_PREFIX, scope.projectId, 'a1');
    const dep = await deposit('a1', 1_000, 'a1-k1');
    const ded = await deduct('a1', 'a1-d1', 30);
    const frz = await freeze('a1', 'a1-f1', 50);
    const con = await consume('a1', 'a1-f1', 20);
    await svc.drained();
    const gone = async () => (await conn.hexists(keys.tx, 'a1-d1')) + (await conn.hexists(keys.tx, 'a1-f1')) + (await conn.hexists(keys.dep, 'a1-k1')) === 0;
    await waitFor(gone, archived_within_ms, 'the records to be archived and deleted');
    const balance = JSON.stringify(await conn.hgetall(keys.src));

    const replayed = await commandsOf(() => deduct('a1', 'a1-d1', 30));
    expect(replayed.result).toEqual({ ...ded, replay: true });
    // The bound script first (archived: nothing written), then bind, restore, bind again
    // (bindings.ts), and the deduct script, which finds the restored record. A script sent
    // again because its reply was late (src/ledger/outcome.ts, seen on a loaded machine)
    // shows twice in a row: counted once here, as the result and the balance below show
    // it applied nothing.
    const scripts = replayed.commands.filter((c) => c.startsWith('script '));
    expect(scripts.filter((c, i) => c !== scripts[i - 1])).toEqual([
      'script bound_deduct', 'script bind', 'script restore', 'script bind', 'script deduct',
    ]);

    expect((await commandsOf(() => consume('a1', 'a1-f1', 20))).result).toEqual({ ...con, replay: true });
    expect((await commandsOf(() => freeze('a1', 'a1-f1', 50))).result).toEqual({ ...frz, replay: true });
    expect((await commandsOf(() => deposit('a1', 1_000, 'a1-k1'))).result).toEqual({ ...dep, replay: true });
    expect(errorCode((await commandsOf(() => unfreeze('a1', 'a1-f1'))).result)).toBe('no_unfreezable_records');
    expect(errorCode((await commandsOf(() => deduct('a1', 'a1-d1', 31))).result)).toBe('transaction_conflict');
    expect(errorCode((await commandsOf(() => deduct('b1', 'a1-d1', 30))).result)).toBe('transaction_conflict');
    expect(JSON.stringify(await conn.hgetall(keys.src))).toBe(balance);

    // Restored and bound again: the next replay is one script.
    const next = await commandsOf(() => deduct('a1', 'a1-d1', 30));
    expect(next.commands).toEqual(['script bound_deduct']);
    expect(next.result).toEqual({ ...ded, replay: true });
  });
});
