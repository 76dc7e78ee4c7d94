/**
 * Per-key request rate limits, counted in Redis (rate-limiter-flexible) so that every API
 * process shares one budget. The limit is the project's `rate_limit_per_minute`, or the
 * service default. Over it: 429 rate_limited with Retry-After (seconds).
 */
import type { RequestHandler } from 'express';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { ApiError } from '../errors/catalogue.js';
import { authOf } from '../http/auth.js';

export const rate_limit_window_seconds = 60;

export function rateLimit(redis: Redis, prefix: string, defaultPerMinute: number, logger: Logger): RequestHandler {
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

  return async (_req, res, next) => {
    const { key } = authOf(res);
    const perMinute = key.rate_limit_per_minute ?? defaultPerMinute;
    try {
      const r = await limiterFor(perMinute).consume(key.id);
      res.setHeader('X-RateLimit-Limit', perMinute);
      res.setHeader('X-RateLimit-Remaining', r.remainingPoints);
    } catch (err) {
      if (err instanceof RateLimiterRes) {
        const retryAfter = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
        throw new ApiError('rate_limited', {
          headers: { 'Retry-After': String(retryAfter), 'X-RateLimit-Limit': String(perMinute), 'X-RateLimit-Remaining': '0' },
        });
      }
      // The limiter's store failing must not refuse money operations that Redis may
      // still serve; the operation itself reports a Redis outage.
      logger.warn({ err }, 'rate limiter unavailable; request let through');
    }
    next();
  };
}
