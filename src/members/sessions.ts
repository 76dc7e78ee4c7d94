/**
 * Dashboard sessions. Signing in creates a server-side session in PostgreSQL: the cookie
 * carries a random 256-bit id and the table only its SHA-256, with an absolute expiry,
 * an idle expiry (last seen) and a CSRF token (synchronizer token pattern). Every request
 * the cookie authenticates reads the session and its member again, so a removed member or
 * a changed role takes effect on the next request.
 *
 * The cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page
 * sends it), scoped to /dashboard (never sent to the API under /v1), and Secure when
 * configured. A request that changes something must also carry the session's CSRF token
 * in X-CSRF-Token: a page of another origin cannot read it.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Request, RequestHandler, Response } from 'express';
import type { Logger } from 'pino';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import type { Actor } from './actor.js';
import { ApiError } from '../errors/catalogue.js';
import type { RedisClient } from '../redis/client.js';
import { verifyPassword, unknown_member_hash } from './passwords.js';
import { memberRow, type MemberQueries, type MemberRow, type SignInCandidate } from './store.js';

const session_cookie = 'svc_session';
export const session_cookie_path = '/dashboard';
export const csrf_header = 'x-csrf-token';
/** last_seen_at is written at most this often per session: a read per request, not a write. */
const last_seen_write_ms = 60_000;

export interface SessionSettings {
  ttlMs: number;
  idleMs: number;
  secureCookie: boolean;
}

const sessionRow = memberRow.extend({
  csrf_token: z.string(),
  expires_at: z.number(),
  last_seen_at: z.number(),
  organization_name: z.string(),
});

export interface Session {
  member: MemberRow;
  organizationName: string;
  csrfToken: string;
  expiresAtMs: number;
  /** The cookie's value: only the SHA-256 of it is stored. */
  token: string;
}

const hashOf = (token: string) => createHash('sha256').update(token).digest();

/** The stored id of a session (its token's SHA-256), for MemberQueries.setPassword. */
export const sessionIdHash = hashOf;

export class SessionStore {
  constructor(
    private readonly db: DatabasePool,
    private readonly settings: SessionSettings,
  ) {}

  /** A new session of `member`; its token goes in the cookie and nowhere else. */
  async create(member: MemberRow, organizationName: string): Promise<Session> {
    const token = randomBytes(32).toString('base64url');
    const csrfToken = randomBytes(32).toString('base64url');
    const expiresAtMs = Date.now() + this.settings.ttlMs;
    // Sessions of this member that ended are not kept: a member who signs in cleans up.
    await this.db.query(sql.unsafe`DELETE FROM member_sessions WHERE member_id = ${member.id} AND expires_at <= now()`);
    await this.db.query(sql.unsafe`
      INSERT INTO member_sessions (id_hash, member_id, csrf_token, expires_at)
      VALUES (${sql.binary(hashOf(token))}, ${member.id}, ${csrfToken}, ${sql.timestamp(new Date(expiresAtMs))})`);
    return { member, organizationName, csrfToken, expiresAtMs, token };
  }

  /** The session of a cookie's token, or null when unknown, expired or idle too long. */
  async lookup(token: string): Promise<Session | null> {
    const hash = hashOf(token);
    const row = await this.db.maybeOne(sql.type(sessionRow)`
      SELECT m.id, m.organization_id, m.email, m.role, m.created_at, m.updated_at,
             s.csrf_token, s.expires_at, s.last_seen_at, o.name AS organization_name
      FROM member_sessions s JOIN members m ON m.id = s.member_id JOIN organizations o ON o.id = m.organization_id
      WHERE s.id_hash = ${sql.binary(hash)}`);
    if (!row) return null;
    const now = Date.now();
    if (row.expires_at <= now || row.last_seen_at + this.settings.idleMs <= now) {
      await this.db.query(sql.unsafe`DELETE FROM member_sessions WHERE id_hash = ${sql.binary(hash)}`);
      return null;
    }
    if (now - row.last_seen_at >= last_seen_write_ms) {
      await this.db.query(sql.unsafe`UPDATE member_sessions SET last_seen_at = now() WHERE id_hash = ${sql.binary(hash)}`);
    }
    const { csrf_token, expires_at, last_seen_at: _seen, organization_name, ...member } = row;
    return { member, organizationName: organization_name, csrfToken: csrf_token, expiresAtMs: expires_at, token };
  }

  async destroy(token: string): Promise<void> {
    await this.db.query(sql.unsafe`DELETE FROM member_sessions WHERE id_hash = ${sql.binary(hashOf(token))}`);
  }

  /** The Set-Cookie value that stores `token` in the browser (or, with null, clears it). */
  cookie(token: string | null): string {
    const attributes = [`Path=${session_cookie_path}`, 'HttpOnly', 'SameSite=Strict', `Max-Age=${token === null ? 0 : Math.floor(this.settings.ttlMs / 1000)}`];
    if (this.settings.secureCookie) attributes.push('Secure');
    return [`${session_cookie}=${token ?? ''}`, ...attributes].join('; ');
  }
}

/** The session cookie's value in a request, or null. */
function sessionToken(req: Request): string | null {
  const header = req.headers.cookie;
  if (!header) return null;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === session_cookie) {
      const value = part.slice(eq + 1).trim();
      return /^[A-Za-z0-9_-]{43}$/.test(value) ? value : null;
    }
  }
  return null;
}

export function sessionOf(res: Response): Session {
  return res.locals.session as Session;
}

const safe_methods = new Set(['GET', 'HEAD', 'OPTIONS']);

function sameToken(sent: string, expected: string): boolean {
  const a = Buffer.from(sent);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Authenticates the session cookie (401 not_signed_in without a valid one), checks the
 * CSRF token of every request that may change something (403 csrf_token_invalid), and
 * puts the member's Actor on res.locals. The token is read from X-CSRF-Token unless
 * `csrfOf` says where else (the page's forms also carry it as a field).
 */
export function sessionAuth(store: SessionStore, csrfOf: (req: Request) => unknown = (req) => req.headers[csrf_header]): RequestHandler {
  return async (req, res, next) => {
    const token = sessionToken(req);
    const session = token === null ? null : await store.lookup(token);
    if (!session) {
      if (token !== null) res.append('Set-Cookie', store.cookie(null));
      throw new ApiError('not_signed_in', { message: token === null ? 'sign in first: no session cookie' : 'the session has ended: sign in again' });
    }
    if (!safe_methods.has(req.method)) {
      const sent = csrfOf(req);
      if (typeof sent !== 'string' || !sameToken(sent, session.csrfToken)) throw new ApiError('csrf_token_invalid');
    }
    const actor: Actor = { organizationId: session.member.organization_id, role: session.member.role, via: 'session', memberId: session.member.id };
    res.locals.actor = actor;
    res.locals.session = session;
    next();
  };
}

export interface SignInLimits {
  emailAttempts: number;
  ipAttempts: number;
  windowSeconds: number;
}

/**
 * Slows down password guessing: every sign-in attempt takes a point from its email's
 * budget and its client address's budget in Redis (shared by every API process) before
 * the password is checked, and a success gives back its own point, so only failures add
 * up. An exhausted budget answers 429 rate_limited with Retry-After until its window
 * ends, whether or not the password would have been right. Taking the point first means
 * concurrent guesses cannot all pass a check made before any of them failed.
 *
 * The email's budget counts failures across every organization the email is a member
 * of, and a success clears none of them: one membership's password (an attacker's own
 * account under the same email) must not reset the count of guesses at another's.
 */
export class SignInLimiter {
  private readonly byEmail: RateLimiterRedis;
  private readonly byIp: RateLimiterRedis;

  constructor(redis: RedisClient, prefix: string, limits: SignInLimits, private readonly logger: Logger) {
    const common = { storeClient: redis, duration: limits.windowSeconds };
    this.byEmail = new RateLimiterRedis({ ...common, keyPrefix: `${prefix}signin:email`, points: limits.emailAttempts });
    this.byIp = new RateLimiterRedis({ ...common, keyPrefix: `${prefix}signin:ip`, points: limits.ipAttempts });
  }

  /** Emails are keyed by a hash of their lowercase form: no address is written to Redis. */
  private static emailKey(email: string): string {
    return createHash('sha256').update(email.toLowerCase()).digest('hex').slice(0, 32);
  }

  async take(email: string, ip: string): Promise<void> {
    const results = await Promise.allSettled([this.byEmail.consume(SignInLimiter.emailKey(email)), this.byIp.consume(ip)]);
    let retryAfterMs = 0;
    for (const r of results) {
      if (r.status === 'fulfilled') continue;
      if (!(r.reason instanceof RateLimiterRes)) {
        // A Redis that fails must not lock members out; the password check still stands.
        this.logger.warn({ err: r.reason }, 'sign-in limiter unavailable; attempt let through');
        continue;
      }
      retryAfterMs = Math.max(retryAfterMs, r.reason.msBeforeNext);
    }
    if (retryAfterMs > 0) {
      const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
      throw new ApiError('rate_limited', {
        message: `too many failed sign-ins for this email or from this address; retry in ${seconds} s`,
        headers: { 'Retry-After': String(seconds) },
      });
    }
  }

  /** A successful sign-in gives back what its own attempt took, and nothing more. */
  async succeeded(email: string, ip: string): Promise<void> {
    await Promise.all([this.byEmail.reward(SignInLimiter.emailKey(email), 1), this.byIp.reward(ip, 1)]).catch((err: unknown) => {
      this.logger.warn({ err }, 'sign-in limiter not reset after a success');
    });
  }
}

/** What a sign-in's password opens: a membership (and the others it opens too), or why none. */
export type SignInMatch =
  | { opened: SignInCandidate; others: SignInCandidate[] }
  | { opened: null; organizationRequired: boolean };

/**
 * The membership `password` opens among an email's memberships (several organizations
 * may have the same email, each with its own password): the one of `organizationId`
 * when given, else the oldest that matches, with the other matching ones so that the
 * dashboard can offer to switch. Every candidate's password is checked, and one hash
 * when there is none, so the time taken does not tell whether the email is known.
 *
 * Without an organization at most sign_in_candidates_max memberships are checked (a
 * bound on scrypt work per attempt). When none of them opens and the email has more,
 * the answer is `organizationRequired`: the password may open one past the bound, which
 * only naming it can tell. That answer says that the email holds more memberships than
 * the bound whatever the password, as the time of checking that many already does; an
 * unknown email and one with fewer memberships answer alike, as before.
 */
export async function matchingMemberships(
  members: MemberQueries,
  email: string,
  password: string,
  organizationId: string | null,
): Promise<SignInMatch> {
  const { candidates, more } = await members.signInCandidates(email, organizationId);
  if (candidates.length === 0) {
    await verifyPassword(password, unknown_member_hash);
    return { opened: null, organizationRequired: more };
  }
  const verdicts = await Promise.all(candidates.map((c) => verifyPassword(password, c.password_hash)));
  const matching = candidates.filter((_, i) => verdicts[i]);
  if (matching.length === 0) return { opened: null, organizationRequired: more };
  return { opened: matching[0], others: matching.slice(1) };
}
