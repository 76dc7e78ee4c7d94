/** The page's shell: head, navigation, project picker, the demo banner and notices; the sign-in screen. */
import { ApiError } from '../errors/catalogue.js';
import type { Session } from '../members/sessions.js';
import type { Limits, PlanId } from '../plans/catalogue.js';
import { limitText } from './format.js';
import { html, pagePath, type Html } from './html.js';

export const asset_path = '/dashboard/assets';

/**
 * htmx settings: every answer is swapped in, errors included (they are whole screens with
 * the API's message); nothing is kept in localStorage (a page may show a secret once); no
 * eval and no inline style, as the CSP allows neither.
 */
const htmx_config = JSON.stringify({
  includeIndicatorStyles: false,
  allowEval: false,
  allowScriptTags: false,
  historyCacheSize: 0,
  refreshOnHistoryMiss: true,
  responseHandling: [{ code: '204', swap: false }, { code: '...', swap: true }],
});

function head(title: string): Html {
  return html`<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · Billing dashboard</title>
<link rel="icon" href="data:,">
<meta name="htmx-config" content="${htmx_config}">
<link rel="stylesheet" href="${asset_path}/dashboard.css">
<script src="${asset_path}/htmx.min.js" defer></script>
<script src="${asset_path}/dashboard.js" defer></script>`;
}

export type Screen = 'overview' | 'projects' | 'keys' | 'models' | 'customers' | 'usage' | 'reconcile' | 'webhooks' | 'events' | 'billing' | 'team' | 'queues';

const nav: [Screen, string][] = [
  ['overview', 'Overview'],
  ['projects', 'Projects'],
  ['keys', 'Keys'],
  ['models', 'Models'],
  ['customers', 'Customers'],
  ['usage', 'Usage'],
  ['reconcile', 'Reconcile'],
  ['webhooks', 'Webhooks'],
  ['events', 'Events'],
  ['billing', 'Plan & invoices'],
  ['team', 'Team'],
  ['queues', 'Queues'],
];

/** Screens of the plans, gone under PLANS=off (a single-tenant install). */
const plan_screens: readonly Screen[] = ['billing'];

/** Screens only an owner may open (GET /queues needs the owner role): the others do not see the link. */
const owner_screens: readonly Screen[] = ['queues'];

/** The project-scoped screens, which open on a project. */
export const project_screens: readonly Screen[] = ['keys', 'models', 'customers', 'usage', 'reconcile', 'webhooks', 'events'];

export interface ProjectChoice {
  current: { id: string; name: string };
  all: readonly { id: string; name: string }[];
}

/**
 * The organization's plan as every page reads it (PlanService.standing), so that the
 * banner and the team's limit say the plan in force now; `plans` is the install's PLANS.
 */
export interface Standing {
  plans: 'on' | 'off';
  plan: PlanId;
  demoAllowance: boolean;
  limits: Limits;
}

/** A session with its organization's standing, once the page has read it. */
export type PageSession = Session & { standing?: Standing };

export interface ShellInput {
  session: PageSession;
  title: string;
  /** The screen whose link is marked current; null for a page of none (an error page). */
  screen: Screen | null;
  body: Html;
  /** The project a project-scoped screen shows, with the others to pick from. */
  project?: ProjectChoice;
}

/** The CSRF token as a form field: every form that changes something carries it. */
export function csrfField(session: Session): Html {
  return html`<input type="hidden" name="_csrf" value="${session.csrfToken}">`;
}

function projectPicker(screen: Screen, p: ProjectChoice): Html {
  return html`<form class="picker" method="get" action="/dashboard/pick">
<input type="hidden" name="screen" value="${screen}">
<label>Project <select name="project_id" data-autosubmit data-testid="project-picker">
${p.all.map((o) => html`<option value="${o.id}"${o.id === p.current.id ? html` selected` : ''}>${o.name}</option>`)}
</select></label>
<noscript><button type="submit">Open</button></noscript>
</form>`;
}

/**
 * The demo organization's banner (`npm start`): the plan in force now, and what the demo
 * allowance lets it have; under PLANS=off no plan, since there is none.
 */
function demoBanner(standing: Standing | undefined): Html {
  if (!standing?.demoAllowance) return html``;
  if (standing.plans === 'off') return html`<p class="notice info" data-testid="demo-banner">Demo organization: try anything here.</p>`;
  const l = standing.limits;
  return html`<p class="notice info" data-testid="demo-banner">Demo organization, on the <strong data-testid="demo-plan">${standing.plan}</strong> plan with the demo allowance:
${limitText(l.projectsMax, 'project', 'projects')}, ${limitText(l.keysPerProjectMax, 'key', 'keys')} per project, ${limitText(l.membersMax, 'member', 'members')}.</p>`;
}

export function shell(s: ShellInput): Html {
  const { member, standing } = s.session;
  const shown = (screen: Screen) => (member.role === 'owner' || !owner_screens.includes(screen)) && (standing?.plans !== 'off' || !plan_screens.includes(screen));
  // hx-headers: every htmx request carries the CSRF token too; boosted forms also send it as a field.
  const headers = JSON.stringify({ 'X-CSRF-Token': s.session.csrfToken });
  return html`<!doctype html>
<html lang="en">
<head>
${head(s.title)}
</head>
<body hx-boost="true" hx-headers="${headers}">
<header class="top">
<strong class="brand" title="${s.session.organizationName}">${s.session.organizationName}</strong>
<nav aria-label="Screens">
${nav.filter(([screen]) => shown(screen)).map(([screen, label]) => html`<a href="${pagePath(screen)}" data-testid="nav-${screen}"${screen === s.screen ? html` aria-current="page"` : ''}>${label}</a>`)}
</nav>
<form class="who" method="post" action="/dashboard/sign-out" hx-boost="false">
${csrfField(s.session)}
<span data-testid="signed-in-as" title="${member.email} (${member.role})">${member.email} (${member.role})</span>
<button type="submit" data-testid="sign-out">Sign out</button>
</form>
</header>
<main id="main">
${demoBanner(standing)}
${s.project && s.screen ? projectPicker(s.screen, s.project) : ''}
<h1>${s.title}</h1>
${member.role === 'viewer' ? html`<p class="notice info">You are a viewer: you can read everything, and every change is refused.</p>` : ''}
${s.body}
</main>
</body>
</html>`;
}

export type Notice = { kind: 'ok' | 'error'; message: string } | null;

/** What an action did, or the API's message for why it did not. */
export function noticeOf(n: Notice): Html {
  if (n === null) return html``;
  return html`<p class="notice ${n.kind}" role="${n.kind === 'error' ? 'alert' : 'status'}" data-testid="notice-${n.kind}">${n.message}</p>`;
}

export function errorNotice(err: ApiError): Notice {
  return { kind: 'error', message: err.message };
}

export interface SignInForm {
  formToken: string;
  email?: string;
  /** The organization to sign in to: with one, or when asked for, the form has its field. */
  organizationId?: string;
  /** The last attempt was answered organization_required: the field is asked for and focused. */
  askOrganization?: boolean;
  error?: string | null;
}

/**
 * The sign-in screen. Its organization field shows only when needed (an email in more
 * organizations than a sign-in checks without one) or when the link names one; it comes
 * before the password, which the member types again.
 */
export function signInPage(o: SignInForm): Html {
  const ask = o.askOrganization === true;
  const organizationField = ask || o.organizationId !== undefined
    ? html`<label>Organization id <input type="text" name="organization_id" autocomplete="organization" spellcheck="false" placeholder="org_..." value="${o.organizationId ?? ''}"${ask ? html` required autofocus` : ''} data-testid="login-organization"></label>`
    : '';
  return html`<!doctype html>
<html lang="en">
<head>
${head('Sign in')}
</head>
<body class="signin">
<main>
<h1>Sign in</h1>
${o.error ? html`<p class="notice ${ask ? 'info' : 'error'}" role="alert" data-testid="${ask ? 'notice-organization' : 'notice-error'}">${o.error}</p>` : ''}
<form method="post" action="/dashboard/sign-in">
<input type="hidden" name="_csrf" value="${o.formToken}">
<label>Email <input type="email" name="email" autocomplete="username" required value="${o.email ?? ''}" data-testid="login-email"></label>
${organizationField}
<label>Password <input type="password" name="password" autocomplete="current-password" required data-testid="login-password"></label>
<button type="submit" data-testid="login-submit">Sign in</button>
</form>
</main>
</body>
</html>`;
}

/**
 * A screen that could not be shown: the API's message (a 404 of another organization's
 * project reads as any 404), inside the navigation when a member is signed in.
 */
export function errorPage(session: PageSession | null, err: ApiError): Html {
  const body = html`<p class="notice error" role="alert" data-testid="notice-error">${err.message}</p><p><a href="/dashboard/overview">Back to the overview</a></p>`;
  const title = err.status === 404 ? 'Not found' : err.status === 403 ? 'Not allowed' : 'Error';
  if (session === null) return html`<!doctype html><html lang="en"><head>${head(title)}</head><body><main><h1>${title}</h1>${body}</main></body></html>`;
  return shell({ session, title, screen: null, body });
}
