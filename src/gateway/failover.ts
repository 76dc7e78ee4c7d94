/**
 * Resilient routing (docs/API.md, "Upstreams and failover"): a call goes to one of its
 * model's upstreams, picked at random by weight among those not cooling down (a 429 with
 * `retry-after`) and whose circuit is not open; when that upstream fails before anything
 * reached the client (no connection, a timeout, a 429 or a 5xx), the next one is tried,
 * each upstream once per call, after a short exponential backoff (cockatiel's retry).
 * Each upstream has a circuit breaker (cockatiel, consecutive failures, half-open after a
 * pause). This state is the process's own: another API process learns on its own.
 *
 * A model with one upstream takes none of this: its call is sent as before, its attempt
 * recorded, and its failures relayed as they come (there is nothing to fail over to).
 */
import {
  BrokenCircuitError,
  circuitBreaker,
  CircuitState,
  ConsecutiveBreaker,
  ExponentialBackoff,
  handleWhen,
  retry,
  type CircuitBreakerPolicy,
} from 'cockatiel';
import { ApiError } from '../errors/catalogue.js';
import type { Metrics, UpstreamSeries } from '../metrics/metrics.js';

/** One upstream of a model as the gateway calls it. */
export interface GatewayUpstream {
  id: string;
  baseUrl: string;
  apiKey: string;
  upstreamModel: string;
  weight: number;
}

/** One attempt of a call, as its usage record keeps it. */
export interface Attempt {
  upstream: string;
  /**
   * The upstream's HTTP status, or the error kind (unreachable, timeout, ...); an upstream
   * skipped without a try (0 ms) is `circuit_open` or `cooling_down`.
   */
  outcome: number | string;
  ms: number;
}

/**
 * An upstream's answer that the next upstream may take over (a 429 or a 5xx): thrown by
 * an attempt so that the routing sees a failure, and relayed as it came when it was the
 * last attempt.
 */
export class FailedAnswer extends Error {
  constructor(
    readonly status: number,
    readonly headers: Record<string, string | string[] | undefined>,
    readonly bytes: Buffer,
  ) {
    super(`upstream answered ${status}`);
    this.name = 'FailedAnswer';
  }
}

/** Whether an upstream answer's status may be failed over: rate limited or a server error. */
export function failsOver(status: number): boolean {
  return status === 429 || status >= 500;
}

/** Whether the next upstream may take over after `err`. */
function retryable(err: unknown): boolean {
  if (err instanceof FailedAnswer || err instanceof BrokenCircuitError) return true;
  // An UpstreamError, or an error of the response body that UpstreamClient gave a kind.
  const kind = (err as { kind?: unknown } | null)?.kind;
  return kind === 'unreachable' || kind === 'timeout';
}

/** Whether `err` counts against an upstream's circuit: it is down, not rate limited. */
function breaks(err: unknown): boolean {
  return err instanceof FailedAnswer ? err.status >= 500 : retryable(err);
}

/** The outcome of an attempt that answered: its HTTP status. */
function statusOf(value: unknown): string | number {
  const status = (value as { status?: unknown }).status;
  return typeof status === 'number' ? status : 'ok';
}

function outcomeOf(err: unknown): string | number {
  if (err instanceof FailedAnswer) return err.status;
  if (err instanceof BrokenCircuitError) return 'circuit_open';
  const kind = (err as { kind?: unknown })?.kind;
  return typeof kind === 'string' ? kind : 'error';
}

/** When a `retry-after` (seconds or an HTTP date) says to come back, as epoch ms; 0 for none. */
export function retryAfterMs(header: string | string[] | undefined, now = Date.now()): number {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || value.trim() === '') return 0;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds > 0 ? now + seconds * 1000 : 0;
  const at = Date.parse(value);
  return Number.isNaN(at) ? 0 : at;
}

/** The outcomes of an upstream skipped, not tried (each recorded with 0 ms). */
const skipped_outcomes: ReadonlySet<string | number> = new Set(['circuit_open', 'cooling_down']);

/** The attempts actually sent, skipped ones left out. */
export function triedAttempts(attempts: readonly Attempt[]): Attempt[] {
  return attempts.filter((a) => !skipped_outcomes.has(a.outcome));
}

/** The upstreams a call tried, for an error's message: `a (503), b (unreachable)`. */
export function triedList(attempts: readonly Attempt[]): string {
  return triedAttempts(attempts)
    .map((a) => `${a.upstream} (${a.outcome})`)
    .join(', ');
}

/** The longest a retry-after is obeyed: a provider's one-day pause is not this process's. */
const cooldown_ms_max = 3_600_000;

export interface RouterOptions {
  /** Consecutive failures (no connection, timeouts, 5xx) that open an upstream's circuit. */
  breakerFailures?: number;
  /** How long an open circuit stays open before one call may try it again (half-open). */
  halfOpenAfterMs?: number;
  /** First pause between two attempts of a call; it doubles, up to backoffMaxMs. */
  backoffMs?: number;
  backoffMaxMs?: number;
  metrics?: Metrics;
}

/** The per-process state of one upstream of one model. */
class UpstreamState {
  /** Epoch ms until which the upstream is skipped (its 429's retry-after); 0 for none. */
  coolingUntil = 0;
  /** Epoch ms at which the circuit last opened: it lets one call through halfOpenAfterMs later. */
  openedAt = 0;
  readonly breaker: CircuitBreakerPolicy;

  constructor(
    readonly series: UpstreamSeries | null,
    opts: Required<Omit<RouterOptions, 'metrics'>>,
  ) {
    this.breaker = circuitBreaker(handleWhen(breaks), { halfOpenAfter: opts.halfOpenAfterMs, breaker: new ConsecutiveBreaker(opts.breakerFailures) });
    this.breaker.onStateChange((state) => {
      if (state === CircuitState.Open) this.openedAt = Date.now();
      series?.circuitOpen(state === CircuitState.Open);
    });
  }

  get open(): boolean {
    return this.breaker.state === CircuitState.Open;
  }
}

/** What the dashboard shows of an upstream: `ok`, `cooling` (until `until`) or `circuit_open`. */
export interface UpstreamStatus {
  state: 'ok' | 'cooling' | 'circuit_open';
  until: number | null;
}

/** Who a call is routed for: the project and its model, with the model's upstreams. */
export interface Routed {
  projectId: string;
  modelId: string;
  upstreams: readonly GatewayUpstream[];
}

export class UpstreamRouter {
  /** Picks among the eligible upstreams; tests make it deterministic. */
  random: () => number = Math.random;
  private readonly opts: Required<Omit<RouterOptions, 'metrics'>>;
  private readonly states = new Map<string, UpstreamState>();
  private readonly byUpstream = new WeakMap<GatewayUpstream, UpstreamState>();

  constructor(private readonly options: RouterOptions = {}) {
    this.opts = {
      breakerFailures: options.breakerFailures ?? 5,
      halfOpenAfterMs: options.halfOpenAfterMs ?? 30_000,
      backoffMs: options.backoffMs ?? 20,
      backoffMaxMs: options.backoffMaxMs ?? 200,
    };
  }

  private state(r: Routed, u: GatewayUpstream): UpstreamState {
    // The model cache keeps its upstream objects for seconds: found by identity, no key built.
    const known = this.byUpstream.get(u);
    if (known !== undefined) return known;
    const key = `${r.projectId}\n${r.modelId}\n${u.id}`;
    let s = this.states.get(key);
    if (s === undefined) {
      if (this.states.size >= 10_000) this.states.clear();
      this.states.set(key, (s = new UpstreamState(this.options.metrics?.upstream(r.modelId, u.id) ?? null, this.opts)));
    }
    this.byUpstream.set(u, s);
    return s;
  }

  /** This process's view of an upstream (the dashboard's model screen). */
  status(projectId: string, modelId: string, upstreamId: string, now = Date.now()): UpstreamStatus {
    const s = this.states.get(`${projectId}\n${modelId}\n${upstreamId}`);
    if (s?.open) return { state: 'circuit_open', until: null };
    if (s !== undefined && s.coolingUntil > now) return { state: 'cooling', until: s.coolingUntil };
    return { state: 'ok', until: null };
  }

  /**
   * Runs `attempt` on the call's upstreams until one answers (what it resolves with is
   * the call's), recording each in `attempts`. `canFailOver` says whether the next one may
   * still take over (false once the client left). Rejects with the last attempt's error.
   */
  route<T>(r: Routed, attempt: (u: GatewayUpstream) => Promise<T>, attempts: Attempt[], canFailOver: () => boolean): Promise<{ value: T; upstream: GatewayUpstream }> {
    if (r.upstreams.length === 1) return this.single(r, r.upstreams[0]!, attempt, attempts);
    return this.failover(r, attempt, attempts, canFailOver);
  }

  /** The one upstream of a model: one attempt, recorded, without a promise more than it needs (the hot path). */
  private single<T>(r: Routed, u: GatewayUpstream, attempt: (u: GatewayUpstream) => Promise<T>, attempts: Attempt[]): Promise<{ value: T; upstream: GatewayUpstream }> {
    const s = this.state(r, u);
    const started = performance.now();
    return attempt(u).then(
      (value) => {
        this.record(s, u, statusOf(value), started, attempts);
        return { value, upstream: u };
      },
      (err: unknown) => {
        this.record(s, u, outcomeOf(err), started, attempts);
        throw err;
      },
    );
  }

  private async failover<T>(r: Routed, attempt: (u: GatewayUpstream) => Promise<T>, attempts: Attempt[], canFailOver: () => boolean): Promise<{ value: T; upstream: GatewayUpstream }> {
    const tried = new Set<string>();
    let last: UpstreamState | null = null;
    let exhausted = false;
    const policy = retry(
      handleWhen((err) => !exhausted && retryable(err) && canFailOver()),
      { maxAttempts: r.upstreams.length - 1, backoff: new ExponentialBackoff({ initialDelay: this.opts.backoffMs, maxDelay: this.opts.backoffMaxMs }) },
    );
    let lastError: unknown = null;
    return policy.execute(async () => {
      const u = this.pick(r, tried, tried.size === 0 ? attempts : null);
      if (u === null) {
        exhausted = true;
        throw lastError ?? this.noneFree(r);
      }
      last?.series?.failovers.inc();
      tried.add(u.id);
      const s = this.state(r, u);
      last = s;
      try {
        return { value: await this.once(r, u, s, (x) => s.breaker.execute(() => attempt(x)), attempts), upstream: u };
      } catch (err) {
        lastError = err;
        throw err;
      }
    });
  }

  /** One attempt on `u` among several, recorded; a 429 with retry-after cools `u` down. */
  private async once<T>(r: Routed, u: GatewayUpstream, s: UpstreamState, attempt: (u: GatewayUpstream) => Promise<T>, attempts: Attempt[]): Promise<T> {
    const started = performance.now();
    try {
      const value = await attempt(u);
      this.record(s, u, statusOf(value), started, attempts);
      return value;
    } catch (err) {
      this.record(s, u, outcomeOf(err), started, attempts);
      if (err instanceof FailedAnswer && err.status === 429) {
        const until = retryAfterMs(err.headers['retry-after']);
        if (until > 0) s.coolingUntil = Math.min(until, Date.now() + cooldown_ms_max);
      }
      throw err;
    }
  }

  /**
   * The 502 of a call none of whose upstreams may be tried, with `Retry-After`: the
   * seconds (rounded up) until the first of them is free again, its cooldown over or its
   * circuit half-open.
   */
  private noneFree(r: Routed): ApiError {
    const now = Date.now();
    let free = Infinity;
    for (const u of r.upstreams) {
      const s = this.state(r, u);
      const at = s.open ? s.openedAt + this.opts.halfOpenAfterMs : s.coolingUntil;
      if (at > now) free = Math.min(free, at);
    }
    const headers = free === Infinity ? undefined : { 'Retry-After': String(Math.ceil((free - now) / 1000)) };
    return new ApiError('upstream_error', { message: `every upstream of model ${r.modelId} is cooling down (a 429's retry-after) or has its circuit open: retry later`, headers });
  }

  private record(s: UpstreamState, u: GatewayUpstream, outcome: string | number, started: number, attempts: Attempt[]): void {
    attempts.push({ upstream: u.id, outcome, ms: Math.round(performance.now() - started) });
    s.series?.attempt(outcome);
  }

  /**
   * A random upstream by weight among those not tried, not cooling down, not open; null
   * when none. With `skips` (the call's first pick) each upstream skipped is recorded
   * there as an attempt of 0 ms, so that the call's record says why it was not tried.
   */
  private pick(r: Routed, tried: Set<string>, skips: Attempt[] | null): GatewayUpstream | null {
    const now = Date.now();
    const eligible: GatewayUpstream[] = [];
    let total = 0;
    for (const u of r.upstreams) {
      if (tried.has(u.id)) continue;
      const s = this.state(r, u);
      if (s.open || s.coolingUntil > now) {
        skips?.push({ upstream: u.id, outcome: s.open ? 'circuit_open' : 'cooling_down', ms: 0 });
        continue;
      }
      eligible.push(u);
      total += u.weight;
    }
    let x = this.random() * total;
    for (const u of eligible) {
      x -= u.weight;
      if (x < 0) return u;
    }
    return eligible.at(-1) ?? null;
  }
}
