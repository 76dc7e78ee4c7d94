/**
 * The graceful stop of a process on SIGTERM (or SIGINT), docs/OPERATIONS.md "Stopping a
 * process". A web process (src/web.ts, and src/main.ts which also runs the workers):
 * 1. answers 503 to GET /health/ready and stops listening (new connections are refused);
 * 2. lets the requests and streams in flight finish, for up to SHUTDOWN_GRACE_MS, closing
 *    each keep-alive connection once it has no request in progress;
 * 3. once the grace is over, cuts the connections still open: the gateway settles those
 *    calls as it settles a client that left (the input, and the output already relayed);
 * 4. waits until every gateway call is settled or released (and the settlements sent
 *    again in the background, for settle_after_grace_ms at most past the grace);
 * 5. closes Redis and PostgreSQL, and exits 0.
 * A worker (workers/main.ts) stops taking jobs, finishes the persist pass in progress,
 * closes, and exits 0.
 */
import type { Logger } from 'pino';
import type { Runtime } from './runtime.js';
import type { Drain, RunningServer } from './server.js';

/**
 * How long past the grace a stopping web process waits for the calls it cut to be
 * settled (a Redis round trip each) and for settlements retried in the background.
 */
const settle_after_grace_ms = 5_000;

/** Steps 1 to 4 of a web process's stop (the module's comment). */
export class WebDrain {
  private drain: Drain | null = null;

  constructor(
    private readonly rt: Runtime,
    private readonly server: RunningServer,
    private readonly graceMs: number,
  ) {}

  async run(): Promise<void> {
    const { rt, graceMs } = this;
    const startedAt = Date.now();
    rt.lifecycle.stopping = true;
    rt.logger.info({ graceMs, gatewayCalls: rt.gateway.inFlight.count }, 'stopping: no new connections; requests and streams in flight finish');
    this.drain = this.server.drain(graceMs);
    const { cut } = await this.drain.done;
    if (cut) rt.logger.warn({ graceMs }, 'stopping: the grace is over; the connections still open were cut, and their gateway calls are settled as a client that left');
    const waitMs = Math.max(0, graceMs - (Date.now() - startedAt)) + settle_after_grace_ms;
    if (!(await rt.gateway.inFlight.idle(waitMs))) {
      rt.logger.error({ gatewayCalls: rt.gateway.inFlight.count }, 'stopping: gateway calls still unsettled; their holds wait for their TTL');
    }
    rt.logger.info({ ms: Date.now() - startedAt, cut }, 'stopping: every request finished and every call settled');
  }

  /** Cuts what is still open now (a second signal), without waiting for the rest of the grace. */
  cut(): void {
    this.drain?.cut();
  }
}

/**
 * Runs `stop` on the first SIGTERM or SIGINT, then exits 0 (1 when `stop` failed). A
 * second signal calls `again` (a web process cuts what is still open) instead of
 * killing the process half-stopped.
 */
export function stopOnSignals(logger: Logger, stop: (signal: NodeJS.Signals) => Promise<void>, again: () => void = () => undefined): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'stopping already; a second signal cuts what is still in flight');
      again();
      return;
    }
    stopping = true;
    logger.info({ signal }, 'stopping');
    stop(signal).then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'stopping failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
