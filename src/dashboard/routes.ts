/**
 * The dashboard page at /dashboard, served by the API process on the API's origin:
 * server-rendered screens (src/dashboard/screens/) over the management operations, called
 * in-process as the signed-in member (./operations.ts), so a screen can show or change
 * exactly what /dashboard/api would let that member read or change.
 *
 * - Sign-in is a form posting email and password (and the organization when asked for:
 *   an email in more organizations than a sign-in checks without one); it shares the session store, the
 *   password check and the sign-in limit with POST /dashboard/api/session. A
 *   cross-site form cannot sign a victim in to another account: the form carries a token
 *   that must match a SameSite=Strict cookie set with the form.
 * - Every other screen needs the session cookie; every POST carries the session's CSRF
 *   token (a form field, or X-CSRF-Token from htmx).
 * - A POST answers with its screen: what was done, or the API's message for why not
 *   (with the API's status), never a redirect that would drop a secret shown once.
 * - helmet sets the security headers, with a CSP that allows only this origin: no inline
 *   script or style anywhere on the page.
 */
import { pageSecurity } from '../http/page-security.js';
import { apiErrorOf } from '../http/errors.js';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import express, { type Request, type RequestHandler, type Response, type Router } from 'express';
import { actorOf } from '../admin/actor.js';
import type { Operation } from '../admin/operations/shared.js';
import { clientAddress, type DashboardSessions } from '../admin/routes.js';
import { ApiError } from '../errors/catalogue.js';
import { exactRouter } from '../http/router.js';
import { csrf_header, session_cookie_path, sessionAuth, sessionOf } from '../members/sessions.js';
import { sign_in_candidates_max } from '../members/store.js';
import type { HealthDeps } from '../health.js';
import type { PlanService } from '../plans/service.js';
import type { Logger } from 'pino';
import type { Metrics } from '../metrics/metrics.js';
import { assetRoutes } from './assets.js';
import { projectsOf, type PageContext } from './context.js';
import { optional, queryParam, text } from './forms.js';
import { pagePath } from './html.js';
import { errorPage, project_screens, signInPage, type Screen, type Standing } from './layout.js';
import { sendPage, type PageHandler, type PageRouter } from './respond.js';
import { operationsOf } from './operations.js';
import { billingRoutes } from './screens/billing.js';
import { customerRoutes } from './screens/customers.js';
import { deliveryRoutes } from './screens/deliveries.js';
import { eventRoutes } from './screens/events.js';
import { keyRoutes } from './screens/keys.js';
import { modelRoutes } from './screens/models.js';
import { overviewScreen } from './screens/overview.js';
import { projectRoutes } from './screens/projects.js';
import { queueRoutes } from './screens/queues.js';
import { reconcileRoutes } from './screens/reconcile.js';
import { teamRoutes } from './screens/team.js';
import { usageRoutes } from './screens/usage.js';
import { webhookRoutes } from './screens/webhooks.js';

/** The sign-in form's token cookie (double submit): only a page of this origin can post the form. */
const signin_cookie = 'svc_signin';
const csrf_page_message = 'the CSRF token is missing or does not match this session: reload the page and try again';

/** The project the project-scoped screens last showed, so that the navigation returns to it. */
const project_cookie = 'svc_project';

/** A cookie's value, or null (a value that does not decode is none). */
function cookieValue(req: Request, name: string): string | null {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0 || part.slice(0, eq).trim() !== name) continue;
    try {
      return decodeURIComponent(part.slice(eq + 1).trim());
    } catch {
      return null;
    }
  }
  return null;
}

function cookie(name: string, value: string | null, secure: boolean): string {
  const attributes = [`Path=${session_cookie_path}`, 'HttpOnly', 'SameSite=Strict', ...(value === null ? ['Max-Age=0'] : []), ...(secure ? ['Secure'] : [])];
  return [`${name}=${encodeURIComponent(value ?? '')}`, ...attributes].join('; ');
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** An address of the dashboard's JSON API (req.path under the /dashboard mount). */
function isApiPath(req: Request): boolean {
  return req.path === '/api' || req.path.startsWith('/api/');
}

/**
 * What the pages need of the runtime beside the operations: the overview's health summary,
 * the plan of the organization now, and where a screen's failure is logged and counted.
 */
export type PageRuntime = HealthDeps & { plans: Pick<PlanService, 'standing' | 'mode'>; logger: Logger; metrics: Metrics };

export function dashboardPages(rt: PageRuntime, sessions: DashboardSessions, ops: readonly Operation[]): Router {
  const { store } = sessions;
  const secure = rt.config.SESSION_COOKIE_SECURE ?? rt.config.NODE_ENV === 'production';
  const operationsFor = operationsOf(ops);
  const r = exactRouter();

  r.use(
    '/dashboard',
    pageSecurity({ strictTransportSecurity: secure }),
    (_req: Request, res: Response, next: () => void) => {
      // Screens carry the CSRF token, and may carry a secret shown once: nothing keeps them.
      res.setHeader('Cache-Control', 'no-store');
      next();
    },
  );
  for (const route of assetRoutes()) r.get(route.path, route.handler);

  const forms = express.urlencoded({ extended: false, limit: '64kb', parameterLimit: 1000 });
  const authenticate = sessionAuth(store, (req) => req.headers[csrf_header] ?? (req.body as Record<string, unknown> | undefined)?._csrf);

  r.get('/dashboard', (_req, res) => res.redirect(303, '/dashboard/overview'));

  r.get('/dashboard/sign-in', (req, res) => {
    const formToken = randomBytes(32).toString('base64url');
    res.append('Set-Cookie', cookie(signin_cookie, formToken, secure));
    sendPage(res, signInPage({ formToken, email: queryParam(req, 'email'), organizationId: queryParam(req, 'organization_id') }));
  });

  r.post('/dashboard/sign-in', forms, async (req, res) => {
    const sent = text(req, '_csrf');
    const expected = cookieValue(req, signin_cookie);
    const formToken = randomBytes(32).toString('base64url');
    res.append('Set-Cookie', cookie(signin_cookie, formToken, secure));
    const email = text(req, 'email');
    const organizationId = optional(req, 'organization_id');
    try {
      if (expected === null || sent === '' || !sameText(sent, expected)) throw new ApiError('csrf_token_invalid', { message: 'the sign-in form expired or came from another site: sign in again' });
      const { session } = await sessions.signIn(email, text(req, 'password'), organizationId ?? null, clientAddress(req));
      res.append('Set-Cookie', store.cookie(session.token));
      res.append('Set-Cookie', cookie(signin_cookie, null, secure));
      res.redirect(303, '/dashboard/overview');
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (err.headers) res.set(err.headers);
      if (err.code === 'organization_required') {
        const error = `This email is a member of more than ${sign_in_candidates_max} organizations: enter the id of the one to sign in to (org_..., printed by npm run bootstrap) and the password again.`;
        return sendPage(res, signInPage({ formToken, email, organizationId, askOrganization: true, error }), err.status);
      }
      sendPage(res, signInPage({ formToken, email, organizationId, error: err.message }), err.status);
    }
  });

  r.post('/dashboard/sign-out', forms, authenticate, async (_req, res) => {
    await store.destroy(sessionOf(res).token);
    res.append('Set-Cookie', store.cookie(null));
    res.redirect(303, '/dashboard/sign-in');
  });

  /** The session and its organization's standing, read per page (kept for the error page too). */
  const contextOf = async (res: Response): Promise<PageContext> => {
    const session = sessionOf(res);
    const standing: Standing = { plans: rt.plans.mode, ...(await rt.plans.standing(session.member.organization_id)) };
    res.locals.standing = standing;
    return { rt, session: { ...session, standing }, api: operationsFor(actorOf(res)) };
  };
  const page = (handler: PageHandler): RequestHandler => async (req, res) => handler(req, res, await contextOf(res));
  const pages: PageRouter = {
    get: (path, handler) => r.get(path, authenticate, page(handler)),
    post: (path, handler) => r.post(path, forms, authenticate, page(handler)),
  };

  pages.get('/dashboard/overview', async (_req, res, ctx) => sendPage(res, await overviewScreen(ctx)));

  /**
   * The project-scoped screens open on the project last shown, while it is still one of
   * this organization's, else on the organization's first (oldest) project.
   */
  const openOnProject = (screen: Screen) =>
    pages.get(pagePath(screen), async (req, res, ctx) => {
      const all = await projectsOf(ctx);
      if (all.length === 0) return res.redirect(303, '/dashboard/projects');
      const last = cookieValue(req, project_cookie);
      const project = all.find((p) => p.id === last) ?? all[all.length - 1];
      res.redirect(303, pagePath('projects', project.id, screen));
    });
  for (const screen of project_screens) openOnProject(screen);

  pages.get('/dashboard/pick', async (req, res) => {
    const screen = (queryParam(req, 'screen') ?? 'keys') as Screen;
    const projectId = queryParam(req, 'project_id');
    if (!project_screens.includes(screen) || projectId === undefined) return res.redirect(303, '/dashboard/projects');
    res.redirect(303, pagePath('projects', projectId, screen));
  });

  // Remembers the project of a project-scoped screen (the screen itself checks it is the member's).
  r.use('/dashboard/projects/:project_id', (req, res, next) => {
    if (req.method === 'GET') res.append('Set-Cookie', cookie(project_cookie, String(req.params.project_id), secure));
    next();
  });

  projectRoutes(pages);
  keyRoutes(pages);
  modelRoutes(pages);
  customerRoutes(pages);
  usageRoutes(pages);
  reconcileRoutes(pages);
  webhookRoutes(pages);
  deliveryRoutes(pages);
  eventRoutes(pages);
  // Under PLANS=off there is no plan screen: /dashboard/billing is a 404 page.
  if (rt.plans.mode === 'on') billingRoutes(pages);
  teamRoutes(pages);
  queueRoutes(pages);

  // Any other page is a 404 page, in the navigation of a member signed in (none is
  // needed); unknown /dashboard/api paths stay the API's (JSON) 404.
  r.use('/dashboard', async (req, res, next) => {
    if (isApiPath(req)) return next();
    await sessionIfAny(req, res);
    throw new ApiError('not_found', { message: `no page at ${req.originalUrl.split('?')[0]}` });
  });

  /** Puts the member's session on res.locals when the request has a valid one; never refuses. */
  async function sessionIfAny(req: Request, res: Response): Promise<void> {
    try {
      await authenticate(req, res, () => undefined);
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
    }
  }

  // Every failure of a screen is a page: the API's refusals with their message, anything
  // else as apiErrorOf makes it (a 500 logged), all inside the navigation when signed in.
  r.use('/dashboard', ((thrown, req, res, next) => {
    if (res.headersSent || isApiPath(req)) return next(thrown);
    const err = apiErrorOf(thrown, req, rt.logger, rt.metrics);
    if (err.code === 'not_signed_in') {
      if (err.status === 401 && req.headers.cookie?.includes('svc_session=')) res.append('Set-Cookie', store.cookie(null));
      // htmx follows HX-Redirect with a full load; a plain request follows the 303.
      res.setHeader('HX-Redirect', '/dashboard/sign-in');
      return res.redirect(303, '/dashboard/sign-in');
    }
    if (err.headers) res.set(err.headers);
    const session = res.locals.session ? { ...sessionOf(res), standing: res.locals.standing as Standing | undefined } : null;
    // The API's message names its header; a form sends the token as a field.
    const shown = err.code === 'csrf_token_invalid' ? new ApiError('csrf_token_invalid', { message: csrf_page_message }) : err;
    sendPage(res, errorPage(session, shown), err.status);
  }) as express.ErrorRequestHandler);
  return r;
}
