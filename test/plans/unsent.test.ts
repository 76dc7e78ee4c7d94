/**
 * The plan reservation of a deduct or consume whose script failed without an answer: an
 * error that proves the script never reached Redis (never written, or refused by the Redis
 * generation guard) gives the reservation back, so the count stays as it was; a lost reply
 * is learned (the script sent again answers its replay: 200) and commits it once. The operation
 * is served from the process's lease (the first of the organization takes it), and the
 * count read after it includes what the lease reported.
 */
import type { Command } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { periodAt } from '../../src/plans/catalogue.js';
import { scriptSource } from '../../src/redis/scripts.js';
import { CommandNotSentError, OutcomeUnknownError } from '../../src/redis/sent.js';
import type { TestProject } from '../helpers.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ variants: [] });

type Op = 'deduct' | 'consume' | 'consume naming its customer';

/**
 * The script that carries each operation on a single Redis (this suite talks to one):
 * deduct and a consume naming its customer bind in their own script (lua/bound_*-12.lua),
 * a consume without one runs its script after the binding read.
 */
const scriptOf: Record<Op, string> = { deduct: 'bound_deduct', consume: 'consume', 'consume naming its customer': 'bound_consume' };
type Failure = 'never written' | 'refused by the generation guard' | 'outcome unknown';

const ops = async (p: TestProject) => (await svc.rt.plans.organization(p.organizationId)).billable_ops;

async function pendingKey(p: TestProject): Promise<string> {
  const period = periodAt(await svc.rt.plans.organizationAnchor(p.organizationId), Date.now() + svc.rt.clock.offsetMs());
  return `${svc.rt.config.REDIS_PREFIX}o:{${p.organizationId}}:ops:${period.startMs}:pending`;
}

/** The members of the pending set: the process's lease (`<weight>:<name>`) and reservations. */
const pendingMembers = async (p: TestProject) => svc.rt.redis.zrange(await pendingKey(p), 0, -1);

/**
 * Runs `f` while the next `op` script fails the way `failure` says. 'never written': the
 * script fails with the error src/redis/sent.ts gives a command that was never written.
 * 'refused by the generation guard': the guard loses its verification as soon as the
 * operation's reservation is answered, so the script is refused before it is sent.
 * 'outcome unknown': the script is sent (and applies), and its caller gets the error of a
 * connection that closed before the reply.
 */
async function withFailure<T>(op: Op, failure: Failure, f: () => Promise<T>): Promise<T> {
  const redis = svc.rt.redis;
  const send = redis.sendCommand;
  const fn = scriptSource(scriptOf[op]).fn;
  const reserveFns = [scriptSource('plan_reserve').fn, scriptSource('plan_lease').fn];
  const generation = svc.rt.generation as unknown as { verifiedRunId: string | null };
  const runId = generation.verifiedRunId;
  let armed = true;
  redis.sendCommand = ((command: Command, ...rest: unknown[]) => {
    const script = command.name === 'fcall' ? String(command.args[0]) : '';
    if (armed && failure === 'refused by the generation guard' && reserveFns.includes(script)) {
      armed = false;
      void command.promise.then(() => {
        generation.verifiedRunId = null;
      });
    }
    if (armed && script === fn) {
      armed = false;
      if (failure === 'never written') {
        command.reject(new CommandNotSentError(new Error('Connection is closed.')));
        return command.promise;
      }
      const result = (send as (...a: unknown[]) => unknown).call(redis, command, ...rest);
      command.reject(new OutcomeUnknownError(new Error('Connection is closed.')));
      return result;
    }
    return (send as (...a: unknown[]) => unknown).call(redis, command, ...rest);
  }) as typeof redis.sendCommand;
  try {
    return await f();
  } finally {
    redis.sendCommand = send;
    generation.verifiedRunId = runId;
  }
}

const cases: [Op, Failure, number][] = [
  ['deduct', 'never written', 0],
  ['deduct', 'refused by the generation guard', 0],
  ['deduct', 'outcome unknown', 1],
  ['consume', 'never written', 0],
  ['consume', 'refused by the generation guard', 0],
  ['consume', 'outcome unknown', 1],
  ['consume naming its customer', 'never written', 0],
  ['consume naming its customer', 'refused by the generation guard', 0],
  ['consume naming its customer', 'outcome unknown', 1],
];

describe('a billable script that failed without an answer', () => {
  it.each(cases)('%s %s: the count grows by %i', async (op, failure, added) => {
    const p = await svc.project();
    const key = p.projectKey;
    const customer = 'u1';
    expect((await svc.call('POST', '/v1/customers/deposit', { key, body: { customer_id: customer, amount: 1_000 } })).status).toBe(200);
    if (op !== 'deduct') {
      expect((await svc.call('POST', '/v1/billing/freeze', { key, body: { customer_id: customer, transaction_id: 't1', amount: 10 } })).status).toBe(200);
    }
    const before = await ops(p);
    const res = await withFailure(op, failure, () =>
      op === 'deduct'
        ? svc.call('POST', '/v1/billing/deduct', { key, body: { customer_id: customer, transaction_id: 't1', amount: 10 } })
        : svc.call('POST', '/v1/billing/consume', { key, body: { transaction_id: 't1', ...(op === 'consume' ? {} : { customer_id: customer }) } }),
    );
    if (failure === 'outcome unknown') {
      expect([res.status, res.body.is_idempotent_replay], JSON.stringify(res.body)).toEqual([200, false]);
    } else {
      expect(res.status, JSON.stringify(res.body)).toBe(503);
      expect(res.body.error.message).toMatch(/nothing was applied/);
    }
    // Served from the lease: nothing was reserved alone, and the lease is all that is pending.
    const members = await pendingMembers(p);
    expect(members).toHaveLength(1);
    expect(await ops(p)).toBe(before + added);
    // Once the lease goes back, the count is exactly what applied: the lease held every
    // operation it did not count, none lost or counted twice. (Its weight is not read here:
    // it changes with the 250 ms report and the 1 s idle give-back, a race under load.)
    await svc.rt.plans.giveBackLeases(p.organizationId);
    expect(await pendingMembers(p)).toEqual([]);
    expect(await ops(p)).toBe(before + added);
  });
});
