/**
 * The customer forms: a new customer (id, name, email, metadata) on the customers list,
 * and on a customer's page its profile (name, email, metadata: the PATCH of the
 * customer, as PATCH /v1/customers/{id}) and a deposit in credits or USD. Each form is
 * shown again with what was typed when the API (or the page, for JSON that does not
 * parse or USD that is not whole credits) refuses it; each reads its fields into the
 * API's body here.
 */
import type { Request } from 'express';
import { credits_per_usd } from '../../admin/models.js';
import { count } from '../format.js';
import { amount_units, creditsAmount, jsonField, optional, text, unitOf, utc_time_pattern, utcTime } from '../forms.js';
import { html, type Html } from '../html.js';

/** What the customer's page shows of its profile and the form fills in. */
export interface ProfileView {
  name: string | null;
  email: string | null;
  metadata: Record<string, unknown> | null;
}

const metadata_hint = 'JSON object, optional: {"plan": "pro"}';

/** Metadata as the form writes it: indented JSON, nothing for none. */
function metadataText(m: Record<string, unknown> | null): string {
  return m === null || Object.keys(m).length === 0 ? '' : JSON.stringify(m, null, 2);
}

/** The creation form on the customers list; `typed`: a refused creation, open with what was typed. */
export function createCustomerForm(req: Request, action: string, csrf: Html, typed: boolean): Html {
  const v = (f: string) => (typed ? text(req, f) : '');
  return html`<details class="form"${typed ? html` open` : ''}>
<summary class="button" data-testid="customer-create">New customer</summary>
<form method="post" action="${action}" data-testid="customer-create-form">
${csrf}
<label>Customer id <input name="customer_id" maxlength="256" required value="${v('customer_id')}" data-testid="customer-new-id"></label>
<label>Name (optional) <input name="name" maxlength="256" value="${v('name')}" data-testid="customer-new-name"></label>
<label>Email (optional) <input type="email" name="email" maxlength="320" value="${v('email')}" data-testid="customer-new-email"></label>
<label>Metadata (${metadata_hint}) <textarea name="metadata" rows="3" data-testid="customer-new-metadata">${v('metadata')}</textarea></label>
<button type="submit" data-testid="customer-new-submit">Create customer</button>
</form>
</details>`;
}

/** POST /projects/{id}/customers's body: empty fields are left out. */
export function createCustomerBody(req: Request): Record<string, unknown> {
  const body: Record<string, unknown> = { customer_id: text(req, 'customer_id') };
  for (const f of ['name', 'email'] as const) {
    const v = optional(req, f);
    if (v !== undefined) body[f] = v;
  }
  const metadata = jsonField(req, 'metadata', 'absent');
  if (metadata !== undefined) body.metadata = metadata;
  return body;
}

/** The profile form of a customer's page, filled with the profile, or with what was typed after a refusal. */
export function profileForm(req: Request, action: string, csrf: Html, p: ProfileView, typed: boolean): Html {
  const v = (f: 'name' | 'email') => (typed ? text(req, f) : (p[f] ?? ''));
  return html`<details class="form"${typed ? html` open` : ''}>
<summary class="button" data-testid="profile-edit">Edit profile</summary>
<form method="post" action="${action}" data-testid="profile-form">
${csrf}
<label>Name <input name="name" maxlength="256" value="${v('name')}" data-testid="profile-name"></label>
<label>Email <input type="email" name="email" maxlength="320" value="${v('email')}" data-testid="profile-email"></label>
<label>Metadata (JSON object; empty: none) <textarea name="metadata" rows="4" data-testid="profile-metadata">${typed ? text(req, 'metadata') : metadataText(p.metadata)}</textarea></label>
<p class="muted">An empty field clears it.</p>
<button type="submit" data-testid="profile-submit">Save profile</button>
</form>
</details>`;
}

/** The PATCH of the profile form: every field given, an empty one as null (cleared). */
export function profilePatch(req: Request): Record<string, unknown> {
  return { name: optional(req, 'name') ?? null, email: optional(req, 'email') ?? null, metadata: jsonField(req, 'metadata', 'null') };
}

/** The deposit form; `typed`: a refused deposit, shown with what was typed. */
export function depositForm(req: Request, action: string, csrf: Html, defaultWallet: string, typed: boolean): Html {
  const v = (f: string) => (typed ? text(req, f) : '');
  const unit = typed ? unitOf(req, 'unit') : 'credits';
  const labels: Record<(typeof amount_units)[number], string> = { credits: 'credits', usd: 'USD' };
  return html`<form method="post" action="${action}" class="form" data-testid="deposit-form">
${csrf}
<label>Amount <input name="amount" inputmode="decimal" required value="${v('amount')}" data-testid="deposit-amount"></label>
<label>Unit <select name="unit" data-testid="deposit-unit">
${amount_units.map((u) => html`<option value="${u}"${u === unit ? html` selected` : ''}>${labels[u]}</option>`)}
</select></label>
<p class="muted">1 USD = ${count(credits_per_usd)} credits; a USD amount must be whole credits (at most 6 decimal places).</p>
<label>Wallet (optional) <input name="wallet" maxlength="64" value="${v('wallet')}" placeholder="${defaultWallet}"></label>
<label>Source label (optional) <input name="source" maxlength="128" value="${v('source')}" data-testid="deposit-source"></label>
<label>Starts (optional) <span class="utc-field"><input name="starts_at" placeholder="YYYY-MM-DD HH:MM" pattern="${utc_time_pattern}" title="a day and a time in UTC: YYYY-MM-DD HH:MM" value="${v('starts_at')}" data-testid="deposit-starts"> UTC</span></label>
<label>Expires (optional) <span class="utc-field"><input name="expires_at" placeholder="YYYY-MM-DD HH:MM" pattern="${utc_time_pattern}" title="a day and a time in UTC: YYYY-MM-DD HH:MM" value="${v('expires_at')}" data-testid="deposit-expires"> UTC</span></label>
<button type="submit" data-testid="deposit-submit">Deposit</button>
</form>`;
}

/** The deposit's API body: the amount in integer credits (USD converted exactly), the optional fields given. */
export function depositBody(req: Request): Record<string, unknown> {
  const body: Record<string, unknown> = { amount: creditsAmount(req, 'amount', 'unit') };
  for (const f of ['wallet', 'source'] as const) {
    const v = optional(req, f);
    if (v !== undefined) body[f] = v;
  }
  for (const f of ['starts_at', 'expires_at'] as const) {
    const v = utcTime(req, f);
    if (v !== undefined) body[f] = v;
  }
  return body;
}
