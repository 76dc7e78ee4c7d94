/**
 * Plan accounting: billable operations (successful deduct and consume, an accepted freeze
 * whose TTL consumes it, settled gateway calls) counted per organization and billing
 * period in Redis, exact under concurrency because the count and the limit check are one
 * script. Operations are
 * normally served from in-process leases taken in chunks (src/plans/leases.ts,
 * lua/plan_lease-3.lua); near the limit each reserves its count alone while it runs
 * (pending, lua/plan_reserve-3.lua) and commits it once applied, so an operation in
 * flight never refuses one that fits. The counter is seeded from PostgreSQL's ledger when
 * absent (a new period, or a Redis rebuilt from PostgreSQL), so the count survives Redis.
 *
 * With PLANS=off (a single-tenant install) operations are still counted, but nothing
 * limits them: the reserve and lease scripts read a hard limit of 0 (none), from a plan
 * hash of its own (`...:plan:off`, so that a hash written with the plans on is never
 * read), and every organization may have any number of projects, keys and members. The
 * plan and invoice endpoints answer 404 (src/plans/policy.ts).
 */
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { newId } from '../ids.js';
import type { Clock } from '../ledger/clock.js';
import { scriptApi, type ScriptApi, type Scripts } from '../redis/scripts.js';
import { quoteEntry, quotePlanChange, type PlanQuote } from '../billing/proration.js';
import type { OperatorEvents } from '../webhooks/operator.js';
import { hardLimitOf, limitsOf, periodAt, planIds, plans, unlimited, type Limits, type PlanId } from './catalogue.js';
import { PlanLeases, type PeriodKeys, type PlanTicket } from './leases.js';
import { countBillableEntries } from './billable.js';
import { effectivePlan, orgRow, type OrgRow } from './organizations.js';
import { refuseOwnerChange, type PlanChanger } from './policy.js';

export type { PlanTicket } from './leases.js';

/**
 * How long a ledger operation's reservation stays pending before it counts as applied: a
 * deduct or consume script answers in milliseconds, so only a process that died holds it
 * this long.
 */
const ledger_reservation_ms = 30_000;
/**
 * The same for a gateway call, which holds its reservation for the whole upstream call. A
 * call still running past it is counted already; its settlement then adds nothing.
 */
export const gateway_reservation_ms = 600_000;
/**
 * How long a reservation waits when the limit is within reach only of operations in
 * flight: their outcome decides it. Past it the answer is 429 with Retry-After.
 */
export const pending_wait_ms = 3_000;
const pending_retry_after_seconds = 1;
/** Tries of recording operations counted without a reservation (TTL auto-consumes). */
const record_attempts_max = 5;
/** Organizations whose current period a process keeps; past it, it forgets them all. */
const cached_periods_max = 100_000;

export interface Reservation {
  /** False when the plan's hard limit is reached: only replays may go on. */
  admitted: boolean;
  /**
   * Not admitted because operations in flight may use the rest of the limit and did not
   * finish within pending_wait_ms: a retry shortly may succeed.
   */
  undecided: boolean;
  counterKey: string;
  pendingKey: string;
  /** The pending set's member of an admitted reservation. */
  member: string | null;
}

/** The organization read's `limits` (null: unlimited). */
function limitsEntry(l: Limits) {
  return { projects_max: l.projectsMax, keys_per_project_max: l.keysPerProjectMax, members_max: l.membersMax };
}

export class PlanService {
  private readonly anchors = new Map<string, number>();
  /** The current period of each organization and its keys (currentKeys). */
  private readonly periods = new Map<string, Omit<PeriodKeys, 'now'> & { anchor: number }>();
  private readonly projectOrgs = new Map<string, string>();
  private readonly leases: PlanLeases;
  private readonly api: ScriptApi;

  constructor(
    private readonly redis: RedisClient,
    scripts: Scripts,
    private readonly db: DatabasePool,
    private readonly prefix: string,
    private readonly clock: Clock,
    private readonly logger: Logger,
    /** Where a change records its `plan.changed` operator event (src/webhooks/operator.ts). */
    private readonly events: OperatorEvents,
    /**
     * Resolves once the Redis generation guard lets scripts through (503 after its wait):
     * reads that run a script wait for it as money operations do, instead of answering
     * 503 at once in the moments after a start or a reconnect.
     */
    private readonly ready: () => Promise<void> = async () => undefined,
    /** PLANS: `off` counts operations but limits nothing (see the top of this file). */
    readonly mode: 'on' | 'off' = 'on',
  ) {
    this.api = scriptApi(scripts);
    this.leases = new PlanLeases(
      {
        nowMs: () => this.nowMs(),
        currentKeys: (orgId) => this.currentKeys(orgId),
        seed: (orgId, k) => this.seed(orgId, k),
        reserveOne: async (orgId, reservationMs) => this.ticketOf(await this.reserve(orgId, reservationMs)),
      },
      scripts,
      logger,
    );
  }

  nowMs(): number {
    return Date.now() + this.clock.offsetMs();
  }

  private keys(orgId: string, periodStartMs: number) {
    const tag = `${this.prefix}o:{${encodeURIComponent(orgId)}}`;
    return { plan: this.mode === 'on' ? `${tag}:plan` : `${tag}:plan:off`, counter: `${tag}:ops:${periodStartMs}`, pending: `${tag}:ops:${periodStartMs}:pending` };
  }

  private loadOrg(orgId: string): Promise<OrgRow> {
    return this.db.one(sql.type(orgRow)`
      SELECT id, name, plan, pending_plan, pending_from, demo_allowance, created_at FROM organizations WHERE id = ${orgId}`);
  }

  /** The subscription's anchor: billing periods are calendar months from it. */
  organizationAnchor(orgId: string): Promise<number> {
    return this.anchorOf(orgId);
  }

  private async anchorOf(orgId: string): Promise<number> {
    let anchor = this.anchors.get(orgId);
    if (anchor === undefined) {
      anchor = (await this.loadOrg(orgId)).created_at;
      this.anchors.set(orgId, anchor);
    }
    return anchor;
  }

  async organizationOfProject(projectId: string): Promise<string> {
    let org = this.projectOrgs.get(projectId);
    if (org === undefined) {
      org = await this.db.oneFirst(sql.type(z.object({ organization_id: z.string() }))`
        SELECT organization_id FROM projects WHERE id = ${projectId}`);
      this.projectOrgs.set(projectId, org);
    }
    return org;
  }

  /**
   * The billing period and its keys at this moment. Every billable operation asks (the
   * lease it is served from belongs to one period), so the organization's current period
   * and its keys are kept while `now` stays inside it: periodAt's calendar arithmetic and
   * the key strings are made once per period, not per operation.
   */
  private async currentKeys(orgId: string): Promise<PeriodKeys & { anchor: number }> {
    const now = this.nowMs();
    let current = this.periods.get(orgId);
    if (current === undefined || now < current.period.startMs || now >= current.period.endMs) {
      const anchor = this.anchors.get(orgId) ?? (await this.anchorOf(orgId));
      const period = periodAt(anchor, now);
      current = { anchor, period, ...this.keys(orgId, period.startMs) };
      // periodAt answers the first period for a time before the anchor: not kept, since
      // `now` is not inside it.
      if (now >= period.startMs && now < period.endMs) {
        if (this.periods.size >= cached_periods_max) this.periods.clear();
        this.periods.set(orgId, current);
      }
    }
    return { now, ...current };
  }

  /**
   * Writes the plan limits to Redis and the period's count, from PostgreSQL's billable
   * entries (src/plans/billable.ts), when absent.
   * Without PostgreSQL a new period still starts, at 0, when this Redis holds the plan and
   * the previous period's count: it has counted the organization without a break, and no
   * operation of the new period can have been counted elsewhere (a reservation needs the
   * counter). Otherwise the error stands (503: nothing known to count from).
   */
  private async seed(orgId: string, k: PeriodKeys): Promise<void> {
    const { period } = k;
    const anchor = await this.anchorOf(orgId);
    let count: number;
    try {
      const org = await this.loadOrg(orgId);
      await this.writePlanHash(org, k.plan);
      count = await countBillableEntries(this.db, orgId, period);
    } catch (err) {
      const previous = this.keys(orgId, periodAt(anchor, period.startMs - 1).startMs).counter;
      if (period.startMs <= anchor || (await this.redis.exists(k.plan, previous)) < 2) throw err;
      count = 0;
    }
    await this.redis.set(k.counter, count, 'EX', this.counterTtlSeconds(period), 'NX');
  }

  /** Kept a while past the period so the last period's count can still be read. */
  private counterTtlSeconds(period: { startMs: number; endMs: number }): number {
    return Math.ceil((period.endMs - period.startMs) / 1000) + 40 * 86_400;
  }

  private async writePlanHash(org: OrgRow, key: string): Promise<void> {
    const tx = this.redis.multi().del(key).hset(key, 'limit', this.mode === 'on' ? hardLimitOf(org.plan) : 0);
    if (this.mode === 'on' && org.pending_plan !== null && org.pending_from !== null) {
      tx.hset(key, 'pending_limit', hardLimitOf(org.pending_plan), 'pending_from', org.pending_from);
    }
    await tx.exec();
  }

  /**
   * One billable operation before it is applied: from this process's lease of the
   * organization when it can (no Redis command), else reserved alone (see reserve). The
   * ticket's commit and release never reject.
   */
  take(orgId: string, reservationMs = ledger_reservation_ms): Promise<PlanTicket> {
    return this.leases.take(orgId, reservationMs);
  }

  private ticketOf(r: Reservation): PlanTicket {
    return {
      admitted: r.admitted,
      undecided: r.undecided,
      commit: () => this.finishReservation(r, 'commit'),
      release: () => this.finishReservation(r, 'release'),
    };
  }

  /** Gives back this process's unused leased operations of an organization. */
  giveBackLeases(orgId: string): Promise<void> {
    return this.leases.giveBack(orgId);
  }

  /** Gives back every lease of this process (it stops). */
  close(): Promise<void> {
    return this.leases.close();
  }

  /**
   * Reserves one billable operation alone before it is applied (see Reservation). When only
   * operations in flight stand between the count and the limit, it asks again until they
   * have finished (committed or given back) or pending_wait_ms has passed.
   * `reservationMs`: how long the reservation stays pending before it counts as applied.
   */
  async reserve(orgId: string, reservationMs = ledger_reservation_ms): Promise<Reservation> {
    const member = `1:${newId('rsv')}`;
    const waitUntil = Date.now() + pending_wait_ms;
    let seeded = false;
    for (let pause = 5; ; pause = Math.min(pause * 2, 100)) {
      const k = await this.currentKeys(orgId);
      const [status] = await this.api.plan_reserve(k, { nowMs: k.now, member, deadlineMs: k.now + reservationMs });
      const r = { counterKey: k.counter, pendingKey: k.pending };
      if (status === 0) return { ...r, admitted: true, undecided: false, member };
      if (status === 1) return { ...r, admitted: false, undecided: false, member: null };
      if (status === 2) {
        if (seeded) throw new Error('plan counter could not be seeded');
        await this.seed(orgId, k);
        seeded = true;
        continue;
      }
      const left = waitUntil - Date.now();
      if (left <= 0) return { ...r, admitted: false, undecided: true, member: null };
      await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
    }
  }

  /** The operation of a reservation applied, or may have (a lost reply): it counts. */
  async commit(r: Reservation): Promise<void> {
    if (r.member !== null) await this.api.plan_commit({ counter: r.counterKey, pending: r.pendingKey }, { member: r.member });
  }

  /**
   * Gives back a reservation whose operation did not apply (error or replay). One whose
   * deadline passed was counted already and stays counted: one too many, never too few.
   */
  async release(r: Reservation): Promise<void> {
    if (r.member !== null) await this.redis.zrem(r.pendingKey, r.member);
  }

  /**
   * Commits or gives back a reservation without the caller waiting on it or seeing it
   * fail: an operation's answer never waits on its count. One that fails is logged, and
   * the reservation counts when its deadline passes.
   */
  private finishReservation(r: Reservation, how: 'commit' | 'release'): Promise<void> {
    return this[how](r).catch((err: unknown) => this.logger.warn({ err, counterKey: r.counterKey }, `plan reservation ${how} failed; it counts at its deadline`));
  }

  /** Commits or gives back a ticket (never rejects: see PlanTicket). */
  finish(t: PlanTicket, how: 'commit' | 'release'): Promise<void> {
    return t[how]();
  }

  /** The error for a reservation that was not admitted. */
  refusal(r: { undecided: boolean }): ApiError {
    if (!r.undecided) return new ApiError('usage_limit_exceeded');
    return new ApiError('usage_limit_exceeded', {
      message: 'operations in flight may reach the monthly transaction limit of the Free plan; retrying shortly may succeed',
      headers: { 'Retry-After': String(pending_retry_after_seconds) },
    });
  }

  /**
   * Counts operations that happened without a reservation (TTL auto-consumes of freezes
   * made before they were counted at acceptance): one member
   * of weight n in the pending set, scored 0, so that the next reservation (or read of the
   * count) folds it into `used`. It needs neither the counter nor PostgreSQL, and sending
   * it again after a lost reply adds the same member: counted once.
   */
  async record(orgId: string, n: number): Promise<void> {
    const member = `${n}:${newId('rec')}`;
    // The period is fixed by the first try that learns it, so that every try adds the
    // same member to the same set.
    let k: PeriodKeys | undefined;
    for (let attempt = 1; ; attempt++) {
      try {
        k ??= await this.currentKeys(orgId);
        await Promise.all([this.redis.zadd(k.pending, 0, member), this.redis.expire(k.pending, this.counterTtlSeconds(k.period))]);
        return;
      } catch (err) {
        if (attempt >= record_attempts_max) throw err;
        await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** attempt));
      }
    }
  }

  /**
   * What changing to `plan` would do now (the preview endpoint): nothing is written. An
   * owner's preview of a change only the operator may make is refused as the change is.
   */
  async previewPlan(orgId: string, plan: PlanId, by: PlanChanger = 'owner'): Promise<PlanQuote> {
    const now = this.nowMs();
    const org = await this.loadOrg(orgId);
    const current = effectivePlan(org, now);
    refuseOwnerChange(by, current, plan);
    return quotePlanChange(current, plan, periodAt(org.created_at, now), now);
  }

  /**
   * Changes the plan: an upgrade at once, charged pro rata for the rest of the period
   * (src/billing/proration.ts) and recorded with its charge in plan_changes for the
   * period's invoice; a downgrade from the next period. Either replaces a downgrade still
   * waiting. The organization row is locked for the whole change, so two concurrent
   * upgrades charge the difference once each from the plan the other left, never twice
   * from the same one. The same transaction records the `plan.changed` operator event
   * (src/webhooks/operator.ts), queued for delivery once committed.
   * from the same one. An owner may not move to Enterprise (403 permission_denied,
   * nothing changed): the operator does, `by` 'operator'.
   */
  async setPlan(orgId: string, plan: PlanId, by: PlanChanger = 'owner'): Promise<PlanQuote> {
    const now = this.nowMs();
    const at = sql.timestamp(new Date(now));
    const { quote, eventId } = await this.db.transaction(async (tx) => {
      const org = await tx.one(sql.type(orgRow)`
        SELECT id, name, plan, pending_plan, pending_from, demo_allowance, created_at FROM organizations WHERE id = ${orgId} FOR UPDATE`);
      const current = effectivePlan(org, now);
      refuseOwnerChange(by, current, plan);
      const q = quotePlanChange(current, plan, periodAt(org.created_at, now), now);
      const [replaced = null] = await tx.anyFirst(sql.type(z.object({ to_plan: z.enum(planIds) }))`
        UPDATE plan_changes SET cancelled_at = ${at}
        WHERE organization_id = ${orgId} AND kind = 'downgrade' AND cancelled_at IS NULL AND effective_at > ${at}
        RETURNING to_plan`);
      if (q.change === 'downgrade') {
        await tx.query(sql.unsafe`
          UPDATE organizations SET plan = ${current}, pending_plan = ${plan}, pending_from = ${sql.timestamp(new Date(q.period_end_ms))}
          WHERE id = ${orgId}`);
      } else {
        await tx.query(sql.unsafe`UPDATE organizations SET plan = ${plan}, pending_plan = NULL, pending_from = NULL WHERE id = ${orgId}`);
      }
      const changeId = q.change === 'none' ? null : newId('pchg');
      if (changeId !== null) {
        await tx.query(sql.unsafe`
          INSERT INTO plan_changes (id, organization_id, kind, from_plan, to_plan, requested_at, effective_at, period_start, period_end, remaining_ms, charge_cents)
          VALUES (${changeId}, ${orgId}, ${q.change}, ${current}, ${plan}, ${at}, ${sql.timestamp(new Date(q.effective_at_ms))},
                  ${sql.timestamp(new Date(q.period_start_ms))}, ${sql.timestamp(new Date(q.period_end_ms))}, ${q.remaining_ms}, ${q.prorated_charge_cents})`);
      }
      // The operator hears of a change, and of a pending downgrade given up (a change back to the plan in force).
      const event =
        changeId === null && replaced === null
          ? null
          : await this.events.record(tx, {
              id: `evt_${changeId ?? newId('pchg')}`,
              type: 'plan.changed',
              organizationId: orgId,
              atMs: now,
              data: { plan_change_id: changeId, ...quoteEntry(q), replaced_pending_plan: replaced },
            });
      return { quote: q, eventId: event };
    });
    await this.events.committed([eventId]);
    await this.writePlanHash(await this.loadOrg(orgId), this.keys(orgId, quote.period_start_ms).plan);
    return quote;
  }

  /** GET /v1/admin/organization. */
  async organization(orgId: string) {
    await this.ready();
    // What this process's leases served is reported first; other processes report theirs
    // within lease_report_ms.
    await this.leases.flush(orgId);
    const k = await this.currentKeys(orgId);
    if (!(await this.redis.exists(k.counter))) await this.seed(orgId, k);
    const org = await this.loadOrg(orgId);
    const plan = plans[effectivePlan(org, k.now)];
    // Recorded operations (and reservations past their deadline) are folded in first;
    // reservations in flight are not counted yet.
    const [, billable] = await this.api.plan_reserve(k, { nowMs: k.now, member: '', deadlineMs: 0 });
    const overage = plan.includedOps === null || plan.hardLimit ? 0 : Math.max(0, billable - plan.includedOps);
    const pendingStill = org.pending_plan !== null && org.pending_from !== null && org.pending_from > k.now;
    return {
      id: org.id,
      name: org.name,
      plan: plan.id,
      pending_plan: pendingStill ? org.pending_plan : null,
      pending_plan_from: pendingStill ? new Date(org.pending_from!).toISOString() : null,
      period_start: new Date(k.period.startMs).toISOString(),
      period_end: new Date(k.period.endMs).toISOString(),
      billable_ops: billable,
      included_ops: plan.includedOps,
      overage_ops: overage,
      overage_cost_usd: (overage * plan.overageMicroUsdPerOp) / 1_000_000,
      hard_limit: plan.hardLimit,
      demo_allowance: org.demo_allowance,
      limits: limitsEntry(limitsOf(plan.id, org.demo_allowance)),
    };
  }

  /**
   * The billable operations each organization has counted in its current period, for the
   * plan usage gauge (src/metrics/stores.ts): the period's counter in Redis, which holds
   * what every process's leases reported (they report within lease_report_ms), without
   * the reservations in flight. Every organization is looked at, in keyset pages of
   * `pageSize` (one query and one GET per organization of the page, auto-pipelined, no
   * script, nothing written); the answer keeps the `max` with the highest counts, the
   * highest first (ties by id), so that a busy organization is never hidden by older,
   * idle ones. One whose period has no counter yet (nothing counted since the period
   * began, or since Redis was rebuilt) is left out rather than reported as 0. Memory
   * stays within 2 * max + pageSize organizations whatever their number.
   */
  async usageOfOrganizations(max: number, pageSize = 1_000): Promise<{ organizationId: string; used: number; included: number | null }[]> {
    type Usage = { organizationId: string; used: number; included: number | null };
    const byUse = (a: Usage, b: Usage) => b.used - a.used || (a.organizationId < b.organizationId ? -1 : a.organizationId > b.organizationId ? 1 : 0);
    const now = this.nowMs();
    let kept: Usage[] = [];
    let after: string | null = null;
    for (;;) {
      const page: readonly OrgRow[] = await this.db.any(sql.type(orgRow)`
        SELECT id, name, plan, pending_plan, pending_from, demo_allowance, created_at FROM organizations
        ${after === null ? sql.fragment`` : sql.fragment`WHERE id > ${after}`}
        ORDER BY id LIMIT ${pageSize}`);
      if (page.length === 0) break;
      const counts = await Promise.all(page.map((org) => this.redis.get(this.keys(org.id, periodAt(org.created_at, now).startMs).counter)));
      page.forEach((org, i) => {
        const count = counts[i];
        if (count !== null && count !== undefined) kept.push({ organizationId: org.id, used: Number(count), included: plans[effectivePlan(org, now)].includedOps });
      });
      if (kept.length > 2 * max) kept = kept.sort(byUse).slice(0, max);
      if (page.length < pageSize) break;
      after = page[page.length - 1]!.id;
    }
    return kept.sort(byUse).slice(0, max);
  }

  /**
   * Projects, keys and members the organization may have now (403 plan_limit_reached
   * beyond): its plan's, raised by the demo allowance when it has one; none under
   * PLANS=off.
   */
  async limitsOf(orgId: string): Promise<Limits> {
    return (await this.standing(orgId)).limits;
  }

  /**
   * The plan in force now, whether the demo allowance raises its limits, and the limits
   * (see limitsOf): what the dashboard's banner and team screen say, read per page.
   */
  async standing(orgId: string): Promise<{ plan: PlanId; demoAllowance: boolean; limits: Limits }> {
    const org = await this.loadOrg(orgId);
    const plan = effectivePlan(org, this.nowMs());
    return { plan, demoAllowance: org.demo_allowance, limits: this.mode === 'on' ? limitsOf(plan, org.demo_allowance) : unlimited };
  }
}
