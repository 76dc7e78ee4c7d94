/**
 * Plan counting from in-process leases, the way the rate limiter takes its budget in
 * chunks (src/http/rate-limit.ts): a process takes a lease of up to lease_ops_max
 * billable operations of an organization's period in one script (lua/plan_lease-3.lua),
 * serves operations from it in memory, and tops it up in the background before it runs
 * out, so an operation normally costs no Redis command for its count and no process
 * touches the organization's keys on every operation.
 *
 * Exact at the edge of the limit: a lease holds at most 1/lease_divisor of what the limit
 * leaves beyond every other pending weight, and none below lease_ops_min; the operations
 * of an organization near its limit are then reserved one by one (PlanService.reserve,
 * lua/plan_reserve-3.lua, with its "undecided" wait). The processes together never hold
 * more than the limit leaves, so they never admit more than the plan sells.
 *
 * What a lease served is reported within lease_report_ms (so the count another process
 * reads trails by at most that), unused operations go back after lease_idle_ms without
 * use, at a period's end and when the process stops. A lease whose process died is
 * counted whole at its deadline (lease_deadline_ms after its last report): never too few.
 */
import type { Logger } from 'pino';
import { newId } from '../ids.js';
import { scriptApi, type ScriptApi, type Scripts } from '../redis/scripts.js';
import { provesNothingSent } from '../redis/sent.js';

/** The most operations a lease holds. */
export const lease_ops_max = 64;
/** A grant is at most this fraction of what the limit leaves beyond other pending weights. */
const lease_divisor = 16;
/** A smaller grant is none: the organization is near its limit (per-operation reservations). */
const lease_ops_min = 4;
/** A lease not reported for this long counts whole: its process died or lost Redis. */
const lease_deadline_ms = 30_000;
/** Operations served from a lease reach the count in Redis within this. */
export const lease_report_ms = 250;
/** Unused operations of a lease go back after this long without use. */
export const lease_idle_ms = 1_000;
/** After a lease was refused near the limit, operations are reserved one by one this long. */
const lease_edge_ms = 1_000;
/** How long a stopping process waits to give its leases back. */
const lease_close_wait_ms = 1_000;
/** A lease is renewed (its deadline moved) at least this often while it holds operations. */
const lease_renew_ms = lease_deadline_ms / 3;

/** The Redis keys of an organization's period, and the period. */
export interface PeriodKeys {
  now: number;
  period: { startMs: number; endMs: number };
  plan: string;
  counter: string;
  pending: string;
}

/** A reservation of one billable operation, from a lease or reserved alone. */
export interface PlanTicket {
  /** False when the plan's hard limit is reached: only replays may go on. */
  admitted: boolean;
  /** Not admitted because operations in flight decide it: a retry shortly may succeed. */
  undecided: boolean;
  /** The operation applied, or may have: it counts. Never rejects. */
  commit(): Promise<void>;
  /** The operation did not apply: it does not count. Never rejects. */
  release(): Promise<void>;
}

/** What the leases need of the plan service. */
export interface LeaseOwner {
  /** The clock of the plan scripts (the test clock offset included). */
  nowMs(): number;
  currentKeys(orgId: string): Promise<PeriodKeys>;
  /** Seeds the plan hash and the period's counter when absent. */
  seed(orgId: string, k: PeriodKeys): Promise<void>;
  /** A per-operation reservation (near the limit). */
  reserveOne(orgId: string, reservationMs: number): Promise<PlanTicket>;
}

/** One organization's lease for one period in this process. */
class Lease {
  /** The weight of the lease's member in Redis (0: none). */
  weight = 0;
  /** Operations that applied since the last report. */
  consumed = 0;
  /** Operations taken and not finished, of the current epoch. */
  inFlight = 0;
  /** Operations the lease may still serve. */
  available = 0;
  /** Changes when the member was lost (counted whole): older tickets no longer count. */
  epoch = 0;
  /** The member's name; a new one after a failed call, whose outcome is unknown. */
  name: string;
  lastUsedMs = Date.now();
  lastReportMs = Date.now();
  /** The last grant: the lease is topped up once half of it is used. */
  lastGrant = 0;
  edgeUntilMs = 0;
  closing = false;
  call: Promise<void> | null = null;

  constructor(
    readonly orgId: string,
    readonly k: PeriodKeys,
    private readonly names: () => string,
  ) {
    this.name = names();
  }

  renamed(): void {
    this.name = this.names();
  }
}

export class PlanLeases {
  /** The current lease of each organization. */
  private readonly leases = new Map<string, Lease>();
  /** Leases of past periods still holding operations in flight. */
  private readonly closing = new Set<Lease>();
  private readonly processId = newId('lease');
  private generation = 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly owner: LeaseOwner,
    scripts: Scripts,
    private readonly logger: Logger,
  ) {
    this.api = scriptApi(scripts);
  }

  private readonly api: ScriptApi;

  /**
   * One billable operation: from the organization's lease when it has one to spare (no
   * Redis command), else a lease is taken first (one script), else, near the limit, the
   * operation is reserved alone. `reservationMs` bounds a reservation made alone.
   */
  async take(orgId: string, reservationMs: number): Promise<PlanTicket> {
    const k = await this.owner.currentKeys(orgId);
    let lease = this.leases.get(orgId);
    if (lease && lease.k.period.startMs !== k.period.startMs) {
      // A new period: the old lease serves nothing more and goes back once its operations
      // in flight have finished (they count in the old period, where they were taken).
      lease.closing = true;
      this.closing.add(lease);
      this.leases.delete(orgId);
      lease = undefined;
    }
    if (!lease) {
      lease = new Lease(orgId, k, () => `${this.processId}:${this.generation++}`);
      this.leases.set(orgId, lease);
      this.startTimer();
    }
    // Callers that find the lease empty share one call; one that finds it empty again
    // after another's call (the grant went to the others) asks once more.
    for (let tries = 0; lease.available === 0 && Date.now() >= lease.edgeUntilMs && tries < 3; tries++) {
      if (lease.call) await lease.call.catch(() => undefined);
      else await this.report(lease, { keep: true, want: lease_ops_max });
    }
    if (lease.available > 0) return this.serve(lease);
    return this.owner.reserveOne(orgId, reservationMs);
  }

  private serve(lease: Lease): PlanTicket {
    lease.available--;
    lease.inFlight++;
    lease.lastUsedMs = Date.now();
    if (lease.call === null && !lease.closing && lease.available * 2 <= lease.lastGrant && Date.now() >= lease.edgeUntilMs) {
      // In the background: no request waits for it, so its failure (Redis went away, the
      // generation guard refused it) is nobody's answer. Handled here, or the rejection
      // would end the process (Node's default for an unhandled rejection). The lease starts
      // over (report's catch) and the next operation takes a new one.
      this.report(lease, { keep: true, want: lease_ops_max - lease.available }).catch((err: unknown) => {
        this.logger.warn({ err, orgId: lease.orgId }, 'plan lease top-up failed; the next operation takes a new lease');
      });
    }
    const epoch = lease.epoch;
    let done = false;
    const finish = (applied: boolean) => {
      if (done || epoch !== lease.epoch) return Promise.resolve();
      done = true;
      lease.inFlight--;
      if (applied) lease.consumed++;
      else lease.available++;
      return Promise.resolve();
    };
    return { admitted: true, undecided: false, commit: () => finish(true), release: () => finish(false) };
  }

  /**
   * One call of the lease script for a lease: reports what it consumed, keeps its
   * operations in flight and (with `keep`) its unused ones, and asks for `want` more.
   * Calls of one lease never overlap. A call that fails, unless it provably never
   * reached Redis, leaves the member's state unknown: the lease starts over under a new
   * name, and the old member is counted whole at its deadline (one too many at worst,
   * never too few).
   */
  private report(lease: Lease, opts: { keep: boolean; want: number }): Promise<void> {
    if (lease.call) return lease.call;
    const run = async () => {
      for (let seeded = false; ; seeded = true) {
        const consumed = lease.consumed;
        const inFlight = lease.inFlight;
        const keep = opts.keep ? lease.available : 0;
        const want = lease.closing || this.stopped ? 0 : opts.want;
        const givenBack = lease.available - keep;
        // Operations given back leave the lease before the call, so that none is served
        // from them while it is on its way.
        lease.available = keep;
        let reply: [number, number, number, number, number, number];
        try {
          reply = await this.api.plan_lease(lease.k, {
            nowMs: this.owner.nowMs(), lease: lease.name, weight: lease.weight, consumed, inFlight, keep, want,
            divisor: lease_divisor, grantMin: lease_ops_min, deadlineMs: this.owner.nowMs() + lease_deadline_ms,
          });
        } catch (err) {
          // A call that provably never reached Redis changed nothing there.
          if (provesNothingSent(err)) lease.available += givenBack;
          else this.restart(lease);
          throw err;
        }
        const [status, weight, granted, , , lost] = reply;
        if (status === 2) {
          lease.available += givenBack;
          if (seeded) throw new Error('plan counter could not be seeded');
          await this.owner.seed(lease.orgId, lease.k);
          continue;
        }
        lease.lastReportMs = Date.now();
        if (lost === 1) {
          // Counted whole at its deadline: what it served, holds and kept is counted.
          lease.epoch++;
          lease.consumed = 0;
          lease.inFlight = 0;
          lease.available = granted;
        } else {
          lease.consumed -= consumed;
          lease.available += granted;
        }
        lease.weight = weight;
        if (want > 0) {
          lease.lastGrant = granted;
          if (granted === 0) lease.edgeUntilMs = Date.now() + lease_edge_ms;
        }
        return;
      }
    };
    const call = run().finally(() => {
      lease.call = null;
    });
    lease.call = call;
    return call;
  }

  /** After a failed call: the member may or may not have changed; start over. */
  private restart(lease: Lease): void {
    lease.epoch++;
    lease.weight = 0;
    lease.consumed = 0;
    lease.inFlight = 0;
    lease.available = 0;
    lease.renamed();
  }

  private startTimer(): void {
    if (this.timer || this.stopped) return;
    this.timer = setInterval(() => this.tick(), lease_report_ms);
    this.timer.unref();
  }

  /** Reports, returns and renews leases in the background (see the module comment). */
  private tick(): void {
    const now = Date.now();
    for (const lease of [...this.leases.values(), ...this.closing]) {
      if (lease.call) continue;
      const idle = now - lease.lastUsedMs >= lease_idle_ms;
      const giveBack = lease.closing || (idle && lease.available > 0);
      const due = lease.consumed > 0 || giveBack || (lease.weight > 0 && now - lease.lastReportMs >= lease_renew_ms);
      if (due) {
        this.report(lease, { keep: !giveBack, want: 0 }).catch((err: unknown) => {
          this.logger.warn({ err, orgId: lease.orgId }, 'plan lease report failed; its member counts whole at its deadline');
        });
        continue;
      }
      if (lease.weight === 0 && lease.inFlight === 0 && (lease.closing || idle)) {
        if (lease.closing) this.closing.delete(lease);
        else if (this.leases.get(lease.orgId) === lease) this.leases.delete(lease.orgId);
      }
    }
    if (this.leases.size === 0 && this.closing.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Reports what this process's leases of an organization served (before a read of the count). */
  async flush(orgId: string): Promise<void> {
    for (const lease of [this.leases.get(orgId), ...[...this.closing].filter((l) => l.orgId === orgId)]) {
      if (!lease) continue;
      await lease.call?.catch(() => undefined);
      if (lease.consumed > 0) await this.report(lease, { keep: true, want: 0 });
    }
  }

  /** Gives back the unused operations of an organization's leases (reports them first). */
  async giveBack(orgId: string): Promise<void> {
    for (const lease of [this.leases.get(orgId), ...[...this.closing].filter((l) => l.orgId === orgId)]) {
      if (!lease) continue;
      await lease.call?.catch(() => undefined);
      if (lease.weight > 0 || lease.consumed > 0) await this.report(lease, { keep: false, want: 0 });
      lease.edgeUntilMs = 0;
    }
  }

  /** Stops taking leases and gives back every unused operation (the process stops). */
  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.timer = undefined;
    const orgs = new Set([...this.leases.keys(), ...[...this.closing].map((l) => l.orgId)]);
    // Bounded: with Redis away the leases count whole at their deadlines instead.
    let timeout: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...orgs].map((o) => this.giveBack(o))),
      new Promise((resolve) => {
        timeout = setTimeout(resolve, lease_close_wait_ms);
      }),
    ]);
    clearTimeout(timeout);
  }
}
