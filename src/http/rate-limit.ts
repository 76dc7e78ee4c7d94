/**
 * Per-key request rate limits, counted in Redis (rate-limiter-flexible) so that every API
 * process shares one budget. The limit is the project's `rate_limit_per_minute`, or the
 * service default. Over it: 429 rate_limited with Retry-After (seconds).
 *
 * A process takes its budget from Redis in chunks (rate_limit_chunk_of): one Redis script
 * admits that many requests of the key, served from memory until they are used or the
 * window ends, so a busy key costs a Redis call every few requests instead of every one.
 * Exact at the edge of the budget: a chunk that passes the limit still grants the tokens
 * that were left under it. The cost is that tokens a process took and did not use by the
 * end of the window are lost: at most chunk - 1 per process and window, which is why the
 * chunk is 1 for small limits.
 */
import type { RequestHandler, Response } from 'express';
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { ApiError } from '../errors/catalogue.js';
import { authOf } from './auth.js';

const rate_limit_window_seconds = 60;
const rate_limit_chunk_max = 10;
/** The chunk is at most this fraction of the limit: under 1% of the budget per process. */
const rate_limit_chunk_divisor = 100;

function rate_limit_chunk_of(perMinute: number): number {
  return Math.max(1, Math.min(rate_limit_chunk_max, Math.floor(perMinute / rate_limit_chunk_divisor)));
}

/** Tokens of one key that this process took from Redis and has not used yet. */
interface HeldTokens {
  perMinute: number;
  tokens: number;
  /** Redis's remaining budget when they were taken. */
  remaining: number;
  untilMs: number;
}

export function rateLimit(redis: RedisClient, prefix: string, defaultPerMinute: number, logger: Logger): RequestHandler {
  const limiters = new Map<number, RateLimiterRedis>();
  const limiterFor = (points: number) => {
    let l = limiters.get(points);
    if (!l) {
      l = new RateLimiterRedis({
        storeClient: redis,
        keyPrefix: `${prefix}rl:${points}`,
        points,
        duration: rate_limit_window_seconds,
        // Once a key is over its limit, refuse in memory until the window ends: an
        // abusive client then costs no Redis round trip.
        inMemoryBlockOnConsumed: points,
        inMemoryBlockDuration: 0,
      });
      limiters.set(points, l);
    }
    return l;
  };
  // rate-limiter-flexible defines its script (ioredis defineCommand) on the connection
  // whenever a limiter is created. An auto-pipeline that exists before the first
  // definition lacks the command (ioredis issue #1931); pipelines made after it copy it,
  // and later definitions repeat the same script. So the first limiter is made now,
  // before this connection carries any request, and every limiter can share the
  // connection's auto-pipeline.
  limiterFor(defaultPerMinute);

  const held = new Map<string, HeldTokens>();
  const admit = (res: Response, h: HeldTokens) => {
    h.tokens--;
    res.setHeader('X-RateLimit-Limit', h.perMinute);
    res.setHeader('X-RateLimit-Remaining', Math.max(0, h.remaining + h.tokens));
  };

  return async (_req, res, next) => {
    const { key } = authOf(res);
    const perMinute = key.rate_limit_per_minute ?? defaultPerMinute;
    const h = held.get(key.id);
    if (h && h.tokens > 0 && h.perMinute === perMinute && h.untilMs > Date.now()) {
      admit(res, h);
      next();
      return;
    }
    const chunk = rate_limit_chunk_of(perMinute);
    let granted: number;
    let r: RateLimiterRes;
    try {
      r = await limiterFor(perMinute).consume(key.id, chunk);
      granted = chunk;
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) {
        // The limiter's store failing must not refuse money operations that Redis may
        // still serve; the operation itself reports a Redis outage.
        logger.warn({ err }, 'rate limiter unavailable; request let through');
        next();
        return;
      }
      // The counter went up by the whole chunk: what was left under the limit is ours. A
      // refusal from the limiter's in-memory block (consumedPoints 0) grants nothing.
      r = err;
      granted = err.consumedPoints > 0 ? Math.min(chunk, Math.max(0, perMinute - (err.consumedPoints - chunk))) : 0;
      if (granted === 0) {
        held.delete(key.id);
        const retryAfter = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
        throw new ApiError('rate_limited', {
          headers: { 'Retry-After': String(retryAfter), 'X-RateLimit-Limit': String(perMinute), 'X-RateLimit-Remaining': '0' },
        });
      }
    }
    // Concurrent requests of the key may each have taken a chunk: the tokens add up.
    const untilMs = Date.now() + r.msBeforeNext;
    const prior = held.get(key.id);
    const carried = prior && prior.perMinute === perMinute && prior.untilMs > Date.now() ? prior.tokens : 0;
    const taken: HeldTokens = { perMinute, tokens: granted + carried, remaining: Math.max(0, r.remainingPoints), untilMs };
    if (held.size > held_keys_max) held.clear();
    held.set(key.id, taken);
    admit(res, taken);
    next();
  };
}

/** Keys whose tokens a process keeps; past it, it forgets them all (they are few per key). */
const held_keys_max = 100_000;
