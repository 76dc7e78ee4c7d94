/**
 * The management operations (src/admin/operations/) behind their two authentications:
 *
 * - `/v1/admin/...` for an organization admin key (`svc_admin_...`), which acts as an
 *   owner. Project and customer-scoped keys get 403 permission_denied there, on unknown
 *   paths too.
 * - `/dashboard/api/...` for a member signed in to the dashboard: the same operations at
 *   the same paths below the prefix, authenticated by the session cookie, with the CSRF
 *   token on every change, within the member's role. Sign-in and sign-out live here too.
 *   No API key is accepted there, and none is needed: the browser never holds one.
 */
import type { Request, Response, Router } from 'express';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { requireKeyType } from '../http/auth.js';
import { exactRouter } from '../http/router.js';
import { strictBody } from '../http/validate.js';
import { hashPassword, password_chars_max, password_chars_min, verifyPassword } from '../members/passwords.js';
import { matchingMemberships, sessionAuth, sessionIdHash, sessionOf, SessionStore, SignInLimiter, type Session } from '../members/sessions.js';
import { createMemberQueries, memberEntry, memberSchema, sign_in_candidates_max, type MemberQueries, type SignInCandidate } from '../members/store.js';
import { admin_prefix, dashboard_api_prefix, describeRoute } from '../openapi/registry.js';
import { extended, timestamp } from '../schema/zod.js';
import type { DatabasePool } from 'slonik';
import type { Logger } from 'pino';
import type { Config } from '../config/index.js';
import type { RedisClient } from '../redis/client.js';
import { actorFromAdminKey, requireRole } from './actor.js';
import { email_chars_max } from './operations/members.js';
import type { Operation } from './operations/shared.js';

;

function register(r: Router, prefix: string, ops: readonly Operation[]): void {
  for (const o of ops) {
    const method = o.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete';
    r[method](`${prefix}${o.path}`, requireRole(o.role), o.handler);
  }
}

/** The operations for an organization admin key. */
export function adminRoutes(ops: readonly Operation[]): Router {
  const r = exactRouter();
  r.use(admin_prefix, requireKeyType('admin'), actorFromAdminKey);
  register(r, admin_prefix, ops);
  return r;
}

const signInSchema = z.object({
  email: z.string().trim().min(1).max(email_chars_max),
  password: z.string().min(1).max(password_chars_max),
  /** Which organization, for an email that is a member of several. */
  organization_id: z.string().min(1).max(256).optional(),
});

const passwordChangeSchema = z.object({
  current_password: z.string().min(1).max(password_chars_max),
  new_password: z.string().min(password_chars_min).max(password_chars_max),
});

// The documented session routes (src/openapi/).
const organizationRef = z.object({ id: z.string(), name: z.string() }).strict();
const sessionSchema = z
  .object({
    member: memberSchema,
    organization: organizationRef,
    csrf_token: z.string().openapi({ description: 'Send as `X-CSRF-Token` on every change.' }),
    expires_at: timestamp,
  })
  .strict()
  .openapi('Session');
const sessionDoc = { tag: 'Dashboard sessions', errors: [] } as const;
describeRoute({
  ...sessionDoc,
  method: 'POST',
  path: `${dashboard_api_prefix}/session`,
  callers: ['public'],
  summary: 'Sign in to the dashboard',
  description:
    `Sets the session cookie (\`svc_session\`, Path=/dashboard, HttpOnly, SameSite=Strict). An email that is a member of several organizations signs in to the one \`organization_id\` names, else to the oldest membership the password opens. Without \`organization_id\` at most the oldest ${sign_in_candidates_max} memberships of the email are checked: when none opens and the email has more, the answer is 401 \`organization_required\` (param \`organization_id\`), whatever the password; send it again naming the organization. The body must be JSON.`,
  body: signInSchema.strict(),
  responses: {
    201: {
      description: 'Signed in',
      schema: extended(sessionSchema, { other_organizations: z.array(organizationRef) }),
      headers: { 'Set-Cookie': { description: 'The session cookie.', required: true } },
    },
  },
  errors: ['invalid_credentials', 'organization_required', 'rate_limited', 'invalid_json', 'invalid_request', 'payload_too_large'],
});
describeRoute({ ...sessionDoc, method: 'GET', path: `${dashboard_api_prefix}/session`, callers: ['session'], summary: 'The signed-in member, organization and CSRF token', responses: { 200: { description: 'The session', schema: sessionSchema } } });
describeRoute({
  ...sessionDoc,
  method: 'DELETE',
  path: `${dashboard_api_prefix}/session`,
  callers: ['session'],
  summary: 'Sign out',
  responses: { 200: { description: 'Signed out; the cookie is cleared', schema: z.object({ signed_out: z.literal(true) }).strict() } },
});
describeRoute({
  ...sessionDoc,
  method: 'PUT',
  path: `${dashboard_api_prefix}/session/password`,
  callers: ['session'],
  summary: "Change the member's own password",
  body: passwordChangeSchema.strict(),
  responses: { 200: { description: 'The member', schema: memberSchema } },
  errors: ['invalid_credentials'],
});

/** The session's answer: who is signed in, where, until when, and the CSRF token for changes. */
function sessionEntry(s: Session) {
  return {
    member: memberEntry(s.member),
    organization: { id: s.member.organization_id, name: s.organizationName },
    csrf_token: s.csrfToken,
    expires_at: new Date(s.expiresAtMs).toISOString(),
  };
}

/** The client's address for the sign-in limit (Express's req.ip: the socket's, unless `trust proxy` is set). */
export function clientAddress(req: Request): string {
  return req.ip ?? req.socket.remoteAddress ?? 'unknown';
}

/**
 * Dashboard sign-in, shared by the JSON API (/dashboard/api/session) and the page's form
 * (src/dashboard/): one session store, one sign-in limit, one password check.
 */
export interface DashboardSessions {
  store: SessionStore;
  members: MemberQueries;
  /** Signs in within the limit, or throws rate_limited, invalid_credentials or organization_required. */
  signIn(email: string, password: string, organizationId: string | null, ip: string): Promise<{ session: Session; others: SignInCandidate[] }>;
}

export function dashboardSessions(rt: { config: Config; db: DatabasePool; redis: RedisClient; logger: Logger }): DashboardSessions {
  const { config } = rt;
  const store = new SessionStore(rt.db, {
    ttlMs: config.SESSION_TTL_SECONDS * 1000,
    idleMs: config.SESSION_IDLE_SECONDS * 1000,
    secureCookie: config.SESSION_COOKIE_SECURE ?? config.NODE_ENV === 'production',
  });
  const limiter = new SignInLimiter(
    rt.redis,
    config.REDIS_PREFIX,
    { emailAttempts: config.SIGNIN_EMAIL_ATTEMPTS, ipAttempts: config.SIGNIN_IP_ATTEMPTS, windowSeconds: config.SIGNIN_WINDOW_SECONDS },
    rt.logger,
  );
  const members = createMemberQueries(rt.db);
  return {
    store,
    members,
    async signIn(email, password, organizationId, ip) {
      await limiter.take(email, ip);
      const found = await matchingMemberships(members, email, password, organizationId);
      // A refusal keeps its limiter point: asking for the organization checked passwords too.
      if (found.opened === null) throw found.organizationRequired ? new ApiError('organization_required', { param: 'organization_id' }) : new ApiError('invalid_credentials');
      await limiter.succeeded(email, ip);
      const { password_hash: _hash, organization_name, ...member } = found.opened;
      return { session: await store.create(member, organization_name), others: found.others };
    },
  };
}

/** The operations for a member's session, with sign-in, sign-out and the member's own password. */
export function dashboardApiRoutes(sessions: DashboardSessions, ops: readonly Operation[]): Router {
  const { store, members } = sessions;
  const r = exactRouter();
  const noStore = (_req: Request, res: Response, next: () => void) => {
    // Answers carry the CSRF token and the organization's data: no cache keeps them.
    res.setHeader('Cache-Control', 'no-store');
    next();
  };
  r.use(dashboard_api_prefix, noStore);

  // Sign-in is the one route without a session. A cross-site form cannot forge it: the
  // body must be JSON (anything else is invalid_json), which a page of another origin can
  // only send after a CORS preflight this service never answers.
  r.post(`${dashboard_api_prefix}/session`, async (req, res) => {
    const body = strictBody(req, signInSchema);
    const { session, others } = await sessions.signIn(body.email, body.password, body.organization_id ?? null, clientAddress(req));
    res.append('Set-Cookie', store.cookie(session.token));
    res.status(201).json({
      ...sessionEntry(session),
      other_organizations: others.map((o) => ({ id: o.organization_id, name: o.organization_name })),
    });
  });

  r.use(dashboard_api_prefix, sessionAuth(store));

  r.get(`${dashboard_api_prefix}/session`, (req, res) => {
    res.json(sessionEntry(sessionOf(res)));
  });

  r.delete(`${dashboard_api_prefix}/session`, async (_req, res) => {
    await store.destroy(sessionOf(res).token);
    res.append('Set-Cookie', store.cookie(null));
    res.json({ signed_out: true });
  });

  r.put(`${dashboard_api_prefix}/session/password`, async (req, res) => {
    const body = strictBody(req, passwordChangeSchema);
    const { member, token } = sessionOf(res);
    const stored = await members.passwordHashOf(member.id);
    if (stored === null || !(await verifyPassword(body.current_password, stored))) {
      throw new ApiError('invalid_credentials', { param: 'current_password', message: 'current_password is incorrect' });
    }
    // The member's other sessions end; this one goes on.
    await members.setPassword(member.id, await hashPassword(body.new_password), sessionIdHash(token));
    res.json(memberEntry(member));
  });

  register(r, dashboard_api_prefix, ops);
  return r;
}
