/**
 * HTTP client for the upstream providers: one undici Pool per upstream origin, its
 * connections kept alive and reused across calls. It builds the request each format
 * expects (the path appended to `upstream_base_url`, the provider's auth header) and
 * classifies network failures by `kind` so the gateway can answer 502 `upstream_error` or
 * 504 `upstream_timeout`. HTTP errors of the upstream are not failures here: they come
 * back with their status, headers and body untouched.
 */
import { lookup as dnsLookup } from 'node:dns';
import type { EventEmitter } from 'node:events';
import type { LookupFunction } from 'node:net';
import type { Readable } from 'node:stream';
import { Pool } from 'undici';
import { formatOf, type WireFormat } from './adapters.js';
import { UpstreamRouter } from './failover.js';
import { literalHostRefusal, private_address_code, publicOnlyLookup, upstreamUrlRefusal } from './private-network.js';

export interface UpstreamTarget {
  format: WireFormat;
  /** Includes the version path, e.g. `https://api.openai.com/v1`. */
  baseUrl: string;
  apiKey: string;
  /** Appended to `baseUrl` instead of the format's path (`/embeddings`). */
  path?: string;
}

/**
 * What aborts a call: an AbortSignal, or an EventEmitter that emits `abort` and says
 * `aborted` (undici takes either; the latter costs far less to make and listen to).
 */
export type UpstreamSignal = AbortSignal | (EventEmitter & { readonly aborted: boolean });

/** A model's own timeouts (docs/API.md, "Upstreams and failover"); absent: the client's. */
export interface UpstreamTimeouts {
  connectMs?: number;
  /** Until the response headers. */
  firstByteMs?: number;
  /** Between two chunks of the body. */
  idleMs?: number;
}

export interface UpstreamResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** Must be read to its end or destroyed, or the connection is not given back to the pool. */
  body: Readable;
}

/**
 * - `unreachable`: the connection failed or was lost (refused, reset, DNS, closed mid-body).
 * - `timeout`: connecting, waiting for the headers, or waiting between body bytes took too long.
 * - `aborted`: the caller's signal aborted the call.
 * - `invalid`: the upstream's answer is not valid HTTP or is larger than the limit.
 * - `refused`: the upstream's address is private (src/gateway/private-network.ts) and
 *   private addresses are not allowed; no connection was made. The message says why.
 */
export type UpstreamErrorKind = 'unreachable' | 'timeout' | 'aborted' | 'invalid' | 'refused';

export class UpstreamError extends Error {
  readonly kind: UpstreamErrorKind;

  constructor(kind: UpstreamErrorKind, cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super(kind === 'refused' ? detail : `upstream ${kind}: ${detail}`, { cause });
    this.name = 'UpstreamError';
    this.kind = kind;
  }
}

export { ANTHROPIC_VERSION_DEFAULT } from './wire/anthropic.js';

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);
const INVALID_CODES = new Set(['UND_ERR_RES_EXCEEDED_MAX_SIZE', 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH', 'UND_ERR_INFO']);

/**
 * The kind of a failure of an upstream call, whether `send` threw it or the response
 * body emitted it. Anything from the network layer that is not recognised counts as
 * `unreachable`, so it becomes a 502 rather than a crash.
 */
function upstreamErrorKind(err: unknown): UpstreamErrorKind {
  if (err instanceof UpstreamError) return err.kind;
  const e = err as { code?: unknown; name?: unknown; errors?: unknown } | null;
  // Node reports a failed connect to every address of a name as an AggregateError.
  const code = typeof e?.code === 'string' ? e.code : Array.isArray(e?.errors) ? (e.errors[0] as { code?: unknown })?.code : undefined;
  if (typeof code === 'string') {
    if (code === private_address_code) return 'refused';
    if (TIMEOUT_CODES.has(code)) return 'timeout';
    if (code === 'UND_ERR_ABORTED' || code === 'ABORT_ERR') return 'aborted';
    if (INVALID_CODES.has(code) || code.startsWith('HPE_')) return 'invalid';
  }
  if (e?.name === 'AbortError') return 'aborted';
  return 'unreachable';
}

export interface UpstreamClientOptions {
  connectTimeoutMs?: number;
  /** Until the response headers; for a whole (non-streamed) answer that is the whole generation. */
  headersTimeoutMs?: number;
  /** Between two chunks of the body. */
  bodyTimeoutMs?: number;
  /**
   * Connections per upstream origin; calls beyond it wait for a free one. A streamed call
   * holds its connection until its last event, so this is the most streams in flight per
   * upstream (`UPSTREAM_CONNECTIONS`).
   */
  connections?: number;
  /** Largest response body accepted, in bytes. */
  responseBytesMax?: number;
  /**
   * Allows upstreams on loopback, private and link-local addresses
   * (`UPSTREAM_ALLOW_PRIVATE`): the demo's and the tests' mock upstream. Off, such an
   * upstream is refused before any connection, after DNS resolution.
   */
  allowPrivate?: boolean;
  /** Resolves upstream host names (dns.lookup); tests pass their own. */
  lookup?: LookupFunction;
  /** Routes calls among a model's upstreams; the runtime's counts its metrics. */
  router?: UpstreamRouter;
}

const DEFAULTS = {
  connectTimeoutMs: 10_000,
  headersTimeoutMs: 300_000,
  bodyTimeoutMs: 300_000,
  connections: 4_096,
  responseBytesMax: 64 * 1024 * 1024,
  allowPrivate: false,
  lookup: dnsLookup,
} satisfies Required<Omit<UpstreamClientOptions, 'router'>>;

interface Destination {
  origin: string;
  path: string;
  refused: string | null;
}

/** Upstream URLs whose parse is kept (one per model's base URL and format, in practice). */
const destinations_remembered = 1_024;

export class UpstreamClient {
  private readonly opts: Required<Omit<UpstreamClientOptions, 'router'>>;
  /** This process's routing state: cooldowns and circuit breakers per upstream (src/gateway/failover.ts). */
  readonly router: UpstreamRouter;
  private readonly pools = new Map<string, Pool>();
  private readonly destinations = new Map<string, Destination>();
  private closed = false;

  constructor(opts: UpstreamClientOptions = {}) {
    const { router, ...rest } = opts;
    this.opts = { ...DEFAULTS, ...rest };
    this.router = router ?? new UpstreamRouter();
  }

  /**
   * Why a model may not have this `upstream_base_url` (a private address, or a name that
   * resolves to one), or null when it may. Checked when a model is created or changed;
   * `send` checks again at every connection.
   */
  async baseUrlRefusal(baseUrl: string): Promise<string | null> {
    return this.opts.allowPrivate ? null : upstreamUrlRefusal(baseUrl, this.opts.lookup);
  }

  /**
   * Sends one call upstream. Resolves once the response headers arrive, whatever the
   * status; rejects with an UpstreamError when there is no response. An error later on
   * the body stream (connection lost, body timeout, abort) carries the same `kind`.
   */
  async send(
    target: UpstreamTarget,
    body: Record<string, unknown>,
    opts: { stream: boolean; signal?: UpstreamSignal; anthropicVersion?: string; extraHeaders?: Record<string, string>; timeouts?: UpstreamTimeouts },
  ): Promise<UpstreamResponse> {
    if (this.closed) throw new Error('UpstreamClient is closed');
    const wire = formatOf(target.format);
    const dest = this.destination(target.baseUrl, target.path ?? wire.upstreamPath);
    const headers: Record<string, string> = {
      ...opts.extraHeaders,
      'content-type': 'application/json',
      accept: opts.stream ? 'text/event-stream' : 'application/json',
      ...wire.upstreamHeaders(target.apiKey, opts.anthropicVersion),
    };
    if (dest.refused !== null) throw new UpstreamError('refused', Object.assign(new Error(dest.refused), { code: private_address_code }));
    try {
      const t = opts.timeouts;
      const res = await this.pool(dest.origin, t?.connectMs).request({
        method: 'POST',
        path: dest.path,
        headers,
        body: JSON.stringify(body),
        signal: opts.signal,
        // undici takes these per request; the connect timeout is the pool's (one pool per origin and connect timeout).
        headersTimeout: t?.firstByteMs,
        bodyTimeout: t?.idleMs,
      });
      // Annotates before any listener of the caller sees it, so the same check serves both.
      res.body.prependListener('error', (err: Error) => {
        if (!('kind' in err)) Object.assign(err, { kind: opts.signal?.aborted ? 'aborted' : upstreamErrorKind(err) });
      });
      return { status: res.statusCode, headers: res.headers, body: res.body };
    } catch (err) {
      // An abort with a reason of the caller's rejects with that reason, whatever it is.
      throw new UpstreamError(opts.signal?.aborted ? 'aborted' : upstreamErrorKind(err), err);
    }
  }

  /**
   * Where a call to `baseUrl` + `upstreamPath` goes, parsed once per distinct URL instead
   * of on every call: its origin (the pool), its path, and why it is refused (a literal
   * private address: a connection to one makes no lookup, so the lookup's check cannot
   * see it), or null.
   */
  private destination(baseUrl: string, upstreamPath: string): Destination {
    const key = baseUrl + upstreamPath;
    let dest = this.destinations.get(key);
    if (dest === undefined) {
      const url = new URL(baseUrl.replace(/\/+$/, '') + upstreamPath);
      dest = { origin: url.origin, path: url.pathname + url.search, refused: this.opts.allowPrivate ? null : literalHostRefusal(url) };
      if (this.destinations.size >= destinations_remembered) this.destinations.clear();
      this.destinations.set(key, dest);
    }
    return dest;
  }

  /** Waits for calls in flight, then closes every connection. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.pools.values()].map((p) => p.close()));
    this.pools.clear();
  }

  private pool(origin: string, connectMs?: number): Pool {
    const key = connectMs === undefined ? origin : `${origin} ${connectMs}`;
    let pool = this.pools.get(key);
    if (!pool) {
      pool = new Pool(origin, {
        connections: this.opts.connections,
        connect: {
          timeout: connectMs ?? this.opts.connectTimeoutMs,
          lookup: this.opts.allowPrivate ? this.opts.lookup : publicOnlyLookup(this.opts.lookup),
        },
        headersTimeout: this.opts.headersTimeoutMs,
        bodyTimeout: this.opts.bodyTimeoutMs,
        maxResponseSize: this.opts.responseBytesMax,
      });
      this.pools.set(key, pool);
    }
    return pool;
  }
}
