/**
 * Plan accounting: billable operations (successful deduct and consume, TTL auto-consumes,
 * settled gateway calls) counted per organization and billing period in Redis, exact
 * under concurrency because the count and the limit check are one script
 * (lua/plan_reserve-2.lua). The counter is seeded from PostgreSQL's ledger when absent
 * (a new period, or a Redis rebuilt from PostgreSQL), so the count survives Redis.
 */
import type { Redis } from 'ioredis';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import type { Clock } from '../ledger/clock.js';
import type { Scripts } from '../redis/scripts.js';
import { hardLimitOf, periodAt, plans, type PlanId } from './catalogue.js';

const orgRow = z.object({
  id: z.string(),
  name: z.string(),
  plan: z.enum(['free', 'pro_500k', 'pro_2m', 'pro_5m', 'pro_15m', 'pro_50m', 'enterprise']),
  pending_plan: z.enum(['free', 'pro_500k', 'pro_2m', 'pro_5m', 'pro_15m', 'pro_50m', 'enterprise']).nullable(),
  pending_from: z.number().nullable(),
  created_at: z.number(),
});
type OrgRow = z.infer<typeof orgRow>;

export interface Reservation {
  /** False when the plan's hard limit is reached: only replays may go on. */
  admitted: boolean;
  counterKey: string;
}

/** The plan in force at `nowMs`: a pending downgrade applies from its period on. */
export function effectivePlan(org: OrgRow, nowMs: number): PlanId {
  return org.pending_plan !== null && org.pending_from !== null && org.pending_from <= nowMs ? org.pending_plan : org.plan;
}

export class PlanService {
  private readonly anchors = new Map<string, number>();
  private readonly projectOrgs = new Map<string, string>();

  constructor(
    private readonly redis: Redis,
    private readonly scripts: Scripts,
    private readonly db: DatabasePool,
    private readonly prefix: string,
    private readonly clock: Clock,
  ) {}

  nowMs(): number {
    return Date.now() + this.clock.offsetMs();
  }

  private keys(orgId: string, periodStartMs: number) {
    const tag = `${this.prefix}o:{${encodeURIComponent(orgId)}}`;
    return { plan: `${tag}:plan`, counter: `${tag}:ops:${periodStartMs}` };
  }

  private loadOrg(orgId: string): Promise<OrgRow> {
    return this.db.one(sql.type(orgRow)`
      SELECT id, name, plan, pending_plan, pending_from, created_at FROM organizations WHERE id = ${orgId}`);
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

  private async currentKeys(orgId: string) {
    const now = this.nowMs();
    const period = periodAt(await this.anchorOf(orgId), now);
    return { now, period, ...this.keys(orgId, period.startMs) };
  }

  /** Writes the plan limits to Redis and the period's count, from PostgreSQL, when absent. */
  private async seed(orgId: string, period: { startMs: number; endMs: number }, k: { plan: string; counter: string }): Promise<void> {
    const org = await this.loadOrg(orgId);
    await this.writePlanHash(org, k.plan);
    const count = await this.db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int8 AS n FROM ledger_entries e JOIN projects p ON p.id = e.project_id
      WHERE p.organization_id = ${orgId} AND e.type IN ('DEDUCT', 'CONSUME', 'GATEWAY')
        AND e.created_at >= ${sql.timestamp(new Date(period.startMs))} AND e.created_at < ${sql.timestamp(new Date(period.endMs))}`);
    // Kept a while past the period so the last period's count can still be read.
    const ttlSeconds = Math.ceil((period.endMs - period.startMs) / 1000) + 40 * 86_400;
    await this.redis.set(k.counter, count, 'EX', ttlSeconds, 'NX');
  }

  private async writePlanHash(org: OrgRow, key: string): Promise<void> {
    const tx = this.redis.multi().del(key).hset(key, 'limit', hardLimitOf(org.plan));
    if (org.pending_plan !== null && org.pending_from !== null) {
      tx.hset(key, 'pending_limit', hardLimitOf(org.pending_plan), 'pending_from', org.pending_from);
    }
    await tx.exec();
  }

  /** Counts one billable operation before it is applied (see Reservation). */
  async reserve(orgId: string): Promise<Reservation> {
    for (let attempt = 0; ; attempt++) {
      const k = await this.currentKeys(orgId);
      const [status] = await this.scripts.runOther<[number, number]>('plan_reserve', [k.plan, k.counter], [k.now, 1]);
      if (status === 0) return { admitted: true, counterKey: k.counter };
      if (status === 1) return { admitted: false, counterKey: k.counter };
      if (attempt > 0) throw new Error('plan counter could not be seeded');
      await this.seed(orgId, k.period, k);
    }
  }

  /** Gives back a reservation whose operation did not apply (error or replay). */
  async release(r: Reservation): Promise<void> {
    if (r.admitted) await this.redis.decrby(r.counterKey, 1);
  }

  /** Counts operations that happened without a reservation (TTL auto-consumes). */
  async record(orgId: string, n: number): Promise<void> {
    const k = await this.currentKeys(orgId);
    if (!(await this.redis.exists(k.counter))) await this.seed(orgId, k.period, k);
    await this.redis.incrby(k.counter, n);
  }

  /** Changes the plan: an upgrade at once, a downgrade from the next period. */
  async setPlan(orgId: string, plan: PlanId): Promise<void> {
    const now = this.nowMs();
    const org = await this.loadOrg(orgId);
    const current = effectivePlan(org, now);
    const period = periodAt(org.created_at, now);
    if (plans[plan].rank >= plans[current].rank) {
      await this.db.query(sql.unsafe`UPDATE organizations SET plan = ${plan}, pending_plan = NULL, pending_from = NULL WHERE id = ${orgId}`);
    } else {
      await this.db.query(sql.unsafe`
        UPDATE organizations SET plan = ${current}, pending_plan = ${plan}, pending_from = ${sql.timestamp(new Date(period.endMs))}
        WHERE id = ${orgId}`);
    }
    await this.writePlanHash(await this.loadOrg(orgId), this.keys(orgId, period.startMs).plan);
  }

  /** GET /v1/admin/organization. */
  async organization(orgId: string) {
    const k = await this.currentKeys(orgId);
    if (!(await this.redis.exists(k.counter))) await this.seed(orgId, k.period, k);
    const org = await this.loadOrg(orgId);
    const plan = plans[effectivePlan(org, k.now)];
    const billable = Number(await this.redis.get(k.counter));
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
    };
  }

  /** Projects and keys a plan allows (403 plan_limit_reached beyond). */
  async limitsOf(orgId: string) {
    const org = await this.loadOrg(orgId);
    const plan = plans[effectivePlan(org, this.nowMs())];
    return { projectsMax: plan.projectsMax, keysPerProjectMax: plan.keysPerProjectMax };
  }

  throwLimitReached(): never {
    throw new ApiError('usage_limit_exceeded');
  }
}
