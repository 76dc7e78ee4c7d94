/**
 * The process's Prometheus metrics (prom-client), one registry per runtime: the default
 * process metrics, and the service's own instruments under `svc_`. docs/OPERATIONS.md
 * ("Metrics") lists every name and label.
 *
 * Observing costs an addition: every series observed on a request path is made once (per
 * route and status, per operation and outcome, per model) and kept (./series.ts), so no
 * request builds a label object, hashes labels or makes a closure. Label values are
 * bounded: routes are the route table's patterns (never a raw path), outcomes are the
 * error catalogue's codes, models are the models configured on projects, at most
 * metric_models_max of them. No customer id is ever a label.
 *
 * Gauges that read Redis or PostgreSQL are computed when scraped, never on a request
 * (src/metrics/stores.ts).
 */
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { FastCounter, FastHistogram, type CounterSeries, type HistogramSeries } from './series.js';
import { ApiError } from '../errors/catalogue.js';
import { backendFailure } from '../errors/backend.js';

/** Models with series of their own; calls of any model beyond them count under `other`. */
const metric_models_max = 200;
/** The model label of a gateway call refused before its model was found. */
const no_model_label = 'unknown';
/** The route label of a request no route answered (unknown path, refused before its route). */
export const unmatched_route = 'unmatched';
/**
 * What learning the outcome of a money script whose reply was lost found: it had applied
 * (answered with its result), it had not and then applied or was refused when sent again,
 * or Redis did not answer in time (503 outcome_unknown).
 */
const outcome_paths = ['learned_applied', 'learned_not_applied_then_applied', 'learned_not_applied_then_refused', 'unknown'] as const;
export type OutcomePath = (typeof outcome_paths)[number];

/** Seconds; a request of the API takes milliseconds, a streamed gateway call up to minutes. */
const request_buckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const upstream_buckets = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/** Children of one label set, made on first use and kept. */
class Children<C> {
  private readonly made = new Map<string | number, C>();
  constructor(private readonly make: (key: string | number) => C) {}

  get(key: string | number): C {
    let c = this.made.get(key);
    if (c === undefined) this.made.set(key, (c = this.make(key)));
    return c;
  }
}

/**
 * The request duration series of one route (method and pattern): one histogram series per
 * status, made on the first answer with that status.
 */
export class RouteSeries {
  private readonly byStatus: Children<HistogramSeries>;

  constructor(histogram: FastHistogram, method: string, route: string) {
    this.byStatus = new Children((status) => histogram.series(method, route, String(status)));
  }

  observe(status: number, seconds: number): void {
    this.byStatus.get(status).observe(seconds);
  }
}

/** The ledger operations counted by svc_ledger_operations_total. */
export type LedgerOperation = 'deposit' | 'deduct' | 'freeze' | 'consume' | 'unfreeze' | 'expire';

/** One operation's counters: applied, replayed, refused or failed by code. */
class OperationSeries {
  readonly applied: CounterSeries;
  readonly replay: CounterSeries;
  readonly byOutcome: Children<CounterSeries>;

  constructor(counter: FastCounter, operation: string) {
    this.applied = counter.series(operation, 'applied');
    this.replay = counter.series(operation, 'replay');
    this.byOutcome = new Children((outcome) => counter.series(operation, String(outcome)));
  }
}

/**
 * The outcome label of a failed operation or call: its catalogue code, `unavailable` for a
 * store that did not answer (503), `error` for anything else (500).
 */
function failureOutcome(err: unknown): string {
  if (err instanceof ApiError) return err.code;
  return backendFailure(err) !== null ? 'unavailable' : 'error';
}

/** The HTTP status a failure is answered with, as the error middleware answers it (src/http/errors.ts). */
export function failureStatus(err: unknown): number {
  if (err instanceof ApiError) return err.status;
  const status = (err as { status?: unknown; statusCode?: unknown })?.status ?? (err as { statusCode?: unknown })?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return status;
  return backendFailure(err) !== null ? 503 : 500;
}

/** The series of one model: gateway calls, upstream time, tokens, cost, shortfalls. */
export class ModelSeries {
  private readonly calls: Children<CounterSeries>;
  /** Not streamed, streamed. */
  readonly upstream: [HistogramSeries, HistogramSeries];
  readonly inputTokens: CounterSeries;
  readonly outputTokens: CounterSeries;
  readonly cacheReadTokens: CounterSeries;
  readonly cacheWriteTokens: CounterSeries;
  readonly cost: CounterSeries;
  readonly shortfall: CounterSeries;

  constructor(m: GatewayInstruments, model: string) {
    // Key: status * 2 + stream.
    this.calls = new Children((key) => m.calls.series(model, String(Math.floor(Number(key) / 2)), Number(key) % 2 === 1 ? 'true' : 'false'));
    // All at 0 from the model's first call: a rate is defined before the first token or shortfall.
    this.upstream = [m.upstream.series(model, 'false'), m.upstream.series(model, 'true')];
    this.inputTokens = m.tokens.series(model, 'input');
    this.outputTokens = m.tokens.series(model, 'output');
    this.cacheReadTokens = m.tokens.series(model, 'cache_read');
    this.cacheWriteTokens = m.tokens.series(model, 'cache_write');
    this.cost = m.cost.series(model);
    this.shortfall = m.shortfall.series(model);
  }

  call(status: number, stream: boolean): void {
    this.calls.get(status * 2 + (stream ? 1 : 0)).inc();
  }
}

interface GatewayInstruments {
  calls: FastCounter;
  upstream: FastHistogram;
  tokens: FastCounter;
  cost: FastCounter;
  shortfall: FastCounter;
  attempts: FastCounter;
  failovers: FastCounter;
}

/**
 * The series of one upstream of a model (src/gateway/failover.ts): its attempts by outcome
 * (made on first use, then kept), its failovers, and whether its circuit is open.
 */
export class UpstreamSeries {
  private readonly byOutcome: Children<CounterSeries>;
  readonly failovers: CounterSeries;

  constructor(
    m: GatewayInstruments,
    private readonly circuit: Gauge<'model' | 'upstream'>,
    private readonly labels: { model: string; upstream: string },
  ) {
    this.byOutcome = new Children((outcome) => m.attempts.series(labels.model, labels.upstream, String(outcome)));
    this.failovers = m.failovers.series(labels.model, labels.upstream);
  }

  attempt(outcome: string | number): void {
    this.byOutcome.get(outcome).inc();
  }

  circuitOpen(open: boolean): void {
    this.circuit.set(this.labels, open ? 1 : 0);
  }
}

export class Metrics {
  readonly registry = new Registry();
  private readonly requestDuration: FastHistogram;
  private readonly routes = new Map<string, RouteSeries>();
  private readonly operations = new Map<string, OperationSeries>();
  private readonly ledgerOperations: FastCounter;
  private readonly gateway: GatewayInstruments;
  private readonly models = new Map<string, ModelSeries>();
  private readonly circuitOpen: Gauge<'model' | 'upstream'>;
  private readonly upstreams = new Map<string, UpstreamSeries>();
  readonly redisErrors: Counter<'kind'>;
  readonly postgresErrors: Counter<'kind'>;
  /** A gauge computed on scrape that could not be read in time (src/metrics/stores.ts). */
  readonly collectErrors: Counter<'gauge'>;
  /**
   * Gateway calls whose cost their wallet could not pay in full, and the credits not paid
   * (`uncovered_credits` of their receipts): no labels, a shortfall of any tenant counts.
   */
  readonly uncoveredCalls: Counter;
  readonly uncoveredCredits: Counter;
  /** Money scripts whose reply was lost, by what learning their outcome found (src/ledger/service.ts). */
  readonly outcomeLearning: Counter<'path'>;

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry });
    const registers = [this.registry];
    const r = this.registry;
    this.requestDuration = new FastHistogram(
      'svc_http_request_duration_seconds',
      'Time from a request\'s arrival to its answer\'s end (or its client leaving), by method, route pattern and status',
      ['method', 'route', 'status'],
      request_buckets,
      r,
    );
    this.ledgerOperations = new FastCounter('svc_ledger_operations_total', 'Ledger operations by operation and outcome (applied, replay, or the error code)', ['operation', 'outcome'], r);
    this.gateway = {
      calls: new FastCounter('svc_gateway_calls_total', 'Gateway calls by model, answered status and stream', ['model', 'status', 'stream'], r),
      upstream: new FastHistogram(
        'svc_gateway_upstream_duration_seconds',
        'Time from sending a call upstream to the end of its answer (a stream\'s last event), by model and stream',
        ['model', 'stream'],
        upstream_buckets,
        r,
      ),
      tokens: new FastCounter('svc_gateway_tokens_total', 'Tokens billed by settled gateway calls, by model and kind (input, output, cache_read, cache_write)', ['model', 'kind'], r),
      cost: new FastCounter('svc_gateway_cost_credits_total', 'Credits charged by settled gateway calls, by model', ['model'], r),
      shortfall: new FastCounter(
        'svc_gateway_settlement_shortfall_credits_total',
        'Credits a settled gateway call cost beyond what its wallet had (charged down to zero, not collected), by model',
        ['model'],
        r,
      ),
      attempts: new FastCounter('svc_gateway_upstream_attempts_total', 'Gateway calls sent to an upstream, by model, upstream id and outcome (its HTTP status, or the error kind: unreachable, timeout, circuit_open, ...)', ['model', 'upstream', 'outcome'], r),
      failovers: new FastCounter('svc_gateway_failovers_total', 'Gateway calls that an upstream failed before any byte reached the client and that went on to the next upstream, by model and the upstream that failed', ['model', 'upstream'], r),
    };
    this.circuitOpen = new Gauge({
      name: 'svc_gateway_upstream_circuit_open',
      help: "1 while an upstream's circuit breaker is open in this process (calls skip it), else 0, by model and upstream id",
      labelNames: ['model', 'upstream'],
      registers,
    });
    this.redisErrors = new Counter({
      name: 'svc_redis_errors_total',
      help: 'Redis errors: connection (a connection\'s error event) and request (a request answered 503 for a Redis failure)',
      labelNames: ['kind'],
      registers,
    });
    this.postgresErrors = new Counter({
      name: 'svc_postgres_errors_total',
      help: 'PostgreSQL errors: query (a query that failed, whatever the cause) and request (a request answered 503 for a PostgreSQL failure)',
      labelNames: ['kind'],
      registers,
    });
    this.collectErrors = new Counter({
      name: 'svc_metrics_collect_errors_total',
      help: 'Gauges read from Redis or PostgreSQL on a scrape that failed or timed out (they read NaN)',
      labelNames: ['gauge'],
      registers,
    });
    this.uncoveredCalls = new Counter({
      name: 'svc_gateway_uncovered_calls_total',
      help: 'Settled gateway calls that cost more than their hold and their wallet\'s available credits together (receipts with uncovered_credits > 0)',
      registers,
    });
    this.uncoveredCredits = new Counter({
      name: 'svc_gateway_uncovered_credits_total',
      help: 'Credits of settled gateway calls that their wallets could not pay (the sum of uncovered_credits): recorded, not collected',
      registers,
    });
    this.outcomeLearning = new Counter({
      name: 'svc_outcome_learning_total',
      help: 'Money scripts whose Redis reply was lost, by what the service learned before answering: learned_applied, learned_not_applied_then_applied, learned_not_applied_then_refused, unknown (answered 503 outcome_unknown)',
      labelNames: ['path'],
      registers,
    });
    for (const path of outcome_paths) this.outcomeLearning.inc({ path }, 0);
    // Every series from the start, at 0: a rate is defined before the first error.
    for (const kind of ['connection', 'request']) this.redisErrors.inc({ kind }, 0);
    for (const kind of ['query', 'request']) this.postgresErrors.inc({ kind }, 0);
  }

  /** The request duration series of a route pattern (`method` and `route` bounded by the caller). */
  route(method: string, route: string): RouteSeries {
    const key = `${method} ${route}`;
    let s = this.routes.get(key);
    if (s === undefined) this.routes.set(key, (s = new RouteSeries(this.requestDuration, method, route)));
    return s;
  }

  private operation(op: LedgerOperation): OperationSeries {
    let s = this.operations.get(op);
    if (s === undefined) this.operations.set(op, (s = new OperationSeries(this.ledgerOperations, op)));
    return s;
  }

  /** A ledger operation answered: applied now, or a replay of an earlier one. */
  ledgerDone(op: LedgerOperation, replay: boolean): void {
    const s = this.operation(op);
    (replay ? s.replay : s.applied).inc();
  }

  /** A ledger operation failed or was refused. */
  ledgerFailed(op: LedgerOperation, err: unknown): void {
    this.operation(op).byOutcome.get(failureOutcome(err)).inc();
  }

  /**
   * The series of a configured model (its id in the project's model table). Past
   * metric_models_max models, the others share `other`.
   */
  model(modelId: string): ModelSeries {
    let s = this.models.get(modelId);
    if (s === undefined) {
      const label = this.models.size < metric_models_max ? modelId : 'other';
      s = label === modelId ? new ModelSeries(this.gateway, label) : this.model('other');
      this.models.set(modelId, s);
    }
    return s;
  }

  /** The series of one upstream of a model, bounded as the model's (metric_models_max). */
  upstream(modelId: string, upstreamId: string): UpstreamSeries {
    const model = this.models.size < metric_models_max || this.models.has(modelId) ? modelId : 'other';
    const key = `${model}\n${upstreamId}`;
    let s = this.upstreams.get(key);
    if (s === undefined) this.upstreams.set(key, (s = new UpstreamSeries(this.gateway, this.circuitOpen, { model, upstream: upstreamId })));
    return s;
  }

  /** Gateway calls refused before a configured model was found. */
  get noModel(): ModelSeries {
    return this.model(no_model_label);
  }

  /** The registry's text exposition and its content type. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

