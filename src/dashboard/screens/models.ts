/**
 * Models: the project's models with their prices and upstreams (with their routing state
 * as this API process sees it), and one form to add or edit one. The provider key is
 * write-only: the form never shows it; left empty it keeps the stored one.
 */
import type { Request } from 'express';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { count, usd } from '../format.js';
import { checked, number, optional, queryParam, text } from '../forms.js';
import { html, pagePath, withQuery, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';

interface ModelEntry {
  id: string;
  active: boolean;
  display_name: string;
  description: string | null;
  provider: 'openai' | 'anthropic';
  wire_format: 'chat_completions' | 'responses' | 'messages';
  upstream_base_url: string;
  upstream_model: string;
  has_upstream_key: boolean;
  context_window: number;
  max_output_tokens: number;
  supports_streaming: boolean;
  input_price_per_million_credits: number;
  output_price_per_million_credits: number;
  cache_read_price_per_million_credits: number;
  cache_write_price_per_million_credits: number;
  image_token_bound: number;
  file_token_bound: number;
  price_catalogue: { provider: string; model: string; version: string } | null;
  price_sources: Record<'input' | 'output' | 'cache_read' | 'cache_write', 'catalogue' | 'override'>;
  upstreams: UpstreamEntry[] | null;
}

interface UpstreamEntry {
  id: string;
  base_url: string;
  weight: number;
  has_api_key: boolean;
  state: 'ok' | 'cooling' | 'circuit_open';
  cooling_until: string | null;
}

/** A model's upstreams and their state in this process (each API process keeps its own). */
function upstreamList(m: ModelEntry): Html | '' {
  if (m.upstreams === null) return '';
  const stateOf = (u: UpstreamEntry) => (u.state === 'cooling' ? `cooling down until ${u.cooling_until}` : u.state === 'circuit_open' ? 'circuit open' : 'ok');
  return html`<ul class="upstreams" data-testid="model-upstreams">${m.upstreams.map(
    (u) => html`<li data-upstream-id="${u.id}"><strong>${u.id}</strong> ${u.base_url} · weight ${String(u.weight)} · <span class="status ${u.state === 'ok' ? 'active' : 'inactive'}" data-testid="upstream-state">${stateOf(u)}</span></li>`,
  )}</ul><span class="muted">Upstream states as this process sees them.</span>`;
}

/** The upstream endpoints a model may be served at, with their gateway paths (docs/API.md, "Models"). */
const wire_formats = [
  ['chat_completions', 'Chat completions (/v1/chat/completions)'],
  ['responses', 'Responses API (/v1/responses, OpenAI only)'],
  ['messages', 'Messages (/v1/messages)'],
] as const;

/** Tokens an image or a file part adds to a call's hold (docs/API.md, "What bytes do not bound"); empty: the default. */
const partBounds = [
  ['image_token_bound', 'Each image'],
  ['file_token_bound', 'Each file (PDF)'],
] as const;

/** A model's four prices (credits per million tokens), with their labels: also a receipt's, as billed. */
export const model_prices = [
  ['input_price_per_million_credits', 'Input'],
  ['output_price_per_million_credits', 'Output'],
  ['cache_read_price_per_million_credits', 'Cache read'],
  ['cache_write_price_per_million_credits', 'Cache write'],
] as const;

/** The `price_sources` key of each price field. */
const price_kinds = {
  input_price_per_million_credits: 'input',
  output_price_per_million_credits: 'output',
  cache_read_price_per_million_credits: 'cache_read',
  cache_write_price_per_million_credits: 'cache_write',
} as const;

/** The price catalogue entry a model takes prices from, as the form edits it. */
const catalogueFields = [
  ['catalogue_provider', 'Catalogue provider', 'openai'],
  ['catalogue_model', 'Catalogue model', 'gpt-4o'],
] as const;

export function price(credits: number): Html {
  return html`${count(credits)} <span class="usd">(${usd(credits)})</span>`;
}

/** A small label saying where a price of a catalogue-priced model came from (a hand-priced model has none). */
function priceSource(m: ModelEntry, field: keyof typeof price_kinds): Html | string {
  if (m.price_catalogue === null) return '';
  const source = m.price_sources[price_kinds[field]];
  return html` <span class="source ${source}" data-testid="price-source">${source}</span>`;
}

/** The catalogue entry under a catalogue-priced model's prices. */
function catalogueNote(m: ModelEntry): Html | string {
  const c = m.price_catalogue;
  return c === null ? '' : html`<span class="muted" data-testid="model-catalogue">catalogue: ${c.provider}/${c.model} (genai-prices ${c.version})</span>`;
}

/** The form's values: the model being edited, or what was typed before a refusal. */
type FormValues = Partial<Record<Exclude<keyof ModelEntry, 'price_catalogue' | 'price_sources' | 'upstreams'> | (typeof catalogueFields)[number][0], string | number | boolean | null>>;

/** The form's values of a stored model: its fields, its catalogue entry in two. */
function valuesOfModel(m: ModelEntry): FormValues {
  const { price_catalogue: catalogue, price_sources: _sources, upstreams: _upstreams, ...fields } = m;
  return { ...fields, catalogue_provider: catalogue?.provider ?? null, catalogue_model: catalogue?.model ?? null };
}

function valuesOf(req: Request): FormValues {
  const v: FormValues = {};
  for (const f of ['id', 'display_name', 'description', 'provider', 'wire_format', 'upstream_base_url', 'upstream_model', 'context_window', 'max_output_tokens', ...model_prices.map(([p]) => p), ...partBounds.map(([p]) => p), ...catalogueFields.map(([p]) => p)] as const) {
    v[f] = text(req, f === 'id' ? 'model_id' : f);
  }
  v.supports_streaming = checked(req, 'supports_streaming');
  v.active = checked(req, 'active');
  return v;
}

function modelForm(ctx: PageContext, projectId: string, v: FormValues, editing: ModelEntry | null): Html {
  const val = (f: keyof FormValues) => (v[f] === null || v[f] === undefined ? '' : String(v[f]));
  const isOn = (f: 'active' | 'supports_streaming') => (v[f] === undefined ? true : Boolean(v[f]));
  return html`<form method="post" action="${pagePath('projects', projectId, 'models')}" class="form" data-testid="model-form">
${csrfField(ctx.session)}
<label>Model id <input name="model_id" required maxlength="128" value="${val('id')}"${editing ? html` readonly` : ''} data-testid="model-id"></label>
<label>Display name <input name="display_name" maxlength="256" value="${val('display_name')}"></label>
<label>Description <input name="description" maxlength="4096" value="${val('description')}"></label>
<label>Provider <select name="provider" data-testid="model-provider">
${(['openai', 'anthropic'] as const).map((p) => html`<option value="${p}"${val('provider') === p ? html` selected` : ''}>${p}</option>`)}
</select></label>
<label>Wire format <select name="wire_format" data-testid="model-wire-format">
<option value="">The provider's own</option>
${wire_formats.map(([f, label]) => html`<option value="${f}"${val('wire_format') === f ? html` selected` : ''}>${label}</option>`)}
</select></label>
<label>Upstream base URL <input name="upstream_base_url" required value="${val('upstream_base_url')}" placeholder="https://api.openai.com/v1" data-testid="model-url"></label>
<label>Upstream model <input name="upstream_model" required value="${val('upstream_model')}" data-testid="model-upstream"></label>
<label>Provider API key (write-only${editing?.has_upstream_key ? ': one is stored, leave empty to keep it' : ''})
<input type="password" name="upstream_api_key" autocomplete="off" data-testid="model-key"></label>
${editing?.has_upstream_key ? html`<label class="check"><input type="checkbox" name="clear_upstream_api_key" value="1"> Remove the stored key</label>` : ''}
<label>Context window (tokens) <input name="context_window" inputmode="numeric" required value="${val('context_window')}" data-testid="model-context"></label>
<label>Max output tokens <input name="max_output_tokens" inputmode="numeric" required value="${val('max_output_tokens')}" data-testid="model-max-output"></label>
<fieldset><legend>Prices from the price catalogue (optional: the prices left empty below come from it)</legend>
${catalogueFields.map(([f, label, example]) => html`<label>${label} <input name="${f}" maxlength="256" value="${val(f)}" placeholder="${example}" data-testid="model-${f}"></label>`)}
</fieldset>
<fieldset><legend>Prices, credits per million tokens (1,000,000 credits = $1)</legend>
${model_prices.map(([f, label]) => html`<label>${label} <input name="${f}" inputmode="numeric" value="${val(f)}" data-testid="model-${f}"></label>`)}
</fieldset>
<fieldset><legend>Hold bounds, tokens per part that its bytes do not bound (empty: the default)</legend>
${partBounds.map(([f, label]) => html`<label>${label} <input name="${f}" inputmode="numeric" value="${val(f)}" data-testid="model-${f}"></label>`)}
</fieldset>
<label class="check"><input type="checkbox" name="supports_streaming" value="1"${isOn('supports_streaming') ? html` checked` : ''}> Supports streaming</label>
<label class="check"><input type="checkbox" name="active" value="1"${isOn('active') ? html` checked` : ''} data-testid="model-active"> Active (inactive models answer model_not_found)</label>
<button type="submit" data-testid="model-submit">${editing ? 'Save model' : 'Add model'}</button>
</form>`;
}

async function modelsScreen(ctx: PageContext, req: Request, projectId: string, o: { notice?: Notice; typed?: boolean } = {}): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const cursor = queryParam(req, 'cursor');
  const editId = queryParam(req, 'edit') ?? (o.typed ? text(req, 'model_id') : undefined);
  const { body: models } = await ctx.api<List<ModelEntry>>('GET', '/projects/:project_id/models', { params: { project_id: project.id }, query: { cursor } });
  const path = pagePath('projects', project.id, 'models');
  const editing = editId === undefined ? null : (models.data.find((m) => m.id === editId) ?? null);
  const values: FormValues = o.typed ? valuesOf(req) : editing ? valuesOfModel(editing) : {};
  const body = html`${noticeOf(o.notice ?? null)}
<table class="list" data-testid="model-list">
<thead><tr><th>Model</th><th>Provider</th><th>Prices per million tokens (credits)</th><th>Context</th><th>Key</th><th>Status</th><th></th></tr></thead>
<tbody>
${models.data.map(
  (m) => html`<tr data-testid="model-row" data-model-id="${m.id}">
<td><strong>${m.id}</strong><br><span class="muted">${m.display_name}</span></td>
<td>${m.provider} <span class="muted" data-testid="model-wire-format-shown">(${m.wire_format})</span><br><span class="muted">${m.upstream_model} at ${m.upstream_base_url}</span>${upstreamList(m)}</td>
<td><dl class="prices">${model_prices.map(([f, label]) => html`<dt>${label}</dt><dd>${price(m[f])}${priceSource(m, f)}</dd>`)}</dl>${catalogueNote(m)}</td>
<td>${count(m.context_window)} / ${count(m.max_output_tokens)} out</td>
<td>${m.has_upstream_key ? 'stored' : m.upstreams?.some((u) => u.has_api_key) ? 'on its upstreams' : 'none (BYOK)'}</td>
<td><span class="status ${m.active ? 'active' : 'inactive'}">${m.active ? 'active' : 'inactive'}</span></td>
<td><a href="${withQuery(path, { edit: m.id, cursor })}" data-testid="model-edit">Edit</a>
<form method="post" action="${path}/delete" class="inline">${csrfField(ctx.session)}<input type="hidden" name="model_id" value="${m.id}"><button type="submit" class="danger" data-testid="model-delete">Delete</button></form></td>
</tr>`,
)}
</tbody>
</table>
${models.data.length === 0 ? html`<p class="muted">No models yet.</p>` : ''}
${pager(path, {}, models, cursor !== undefined)}
<h2>${editing ? html`Edit ${editing.id}` : 'Add a model'}</h2>
${editing ? html`<p><a href="${path}">Add a new model instead</a></p>` : ''}
${modelForm(ctx, project.id, values, editing)}`;
  return shell({ session: ctx.session, title: `Models · ${project.name}`, screen: 'models', body, project: choice });
}

/** The PUT body: every field of the form; the key only when typed (or cleared on purpose). */
function modelBody(req: Request): Record<string, unknown> {
  const body: Record<string, unknown> = {
    provider: text(req, 'provider'),
    upstream_base_url: text(req, 'upstream_base_url'),
    upstream_model: text(req, 'upstream_model'),
    display_name: optional(req, 'display_name') ?? null,
    description: optional(req, 'description') ?? null,
    context_window: number(req, 'context_window'),
    max_output_tokens: number(req, 'max_output_tokens'),
    supports_streaming: checked(req, 'supports_streaming'),
    active: checked(req, 'active'),
  };
  for (const [f] of model_prices) {
    const v = number(req, f);
    if (v !== undefined) body[f] = v;
  }
  for (const [f] of partBounds) body[f] = number(req, f) ?? null;
  const catalogueProvider = optional(req, 'catalogue_provider');
  const catalogueModel = optional(req, 'catalogue_model');
  // Both empty: priced by hand; one alone is sent as is, so that the API names what is missing.
  if (catalogueProvider !== undefined || catalogueModel !== undefined) body.price_catalogue = { provider: catalogueProvider ?? '', model: catalogueModel ?? '' };
  // Empty: the provider's default.
  const wireFormat = optional(req, 'wire_format');
  if (wireFormat !== undefined) body.wire_format = wireFormat;
  const key = optional(req, 'upstream_api_key');
  if (key !== undefined) body.upstream_api_key = key;
  else if (checked(req, 'clear_upstream_api_key')) body.upstream_api_key = null;
  return body;
}

export function modelRoutes(pages: PageRouter): void {
  pages.get('/dashboard/projects/:project_id/models', async (req, res, ctx) => {
    sendPage(res, await modelsScreen(ctx, req, String(req.params.project_id)));
  });

  pages.post('/dashboard/projects/:project_id/models', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    await answerAction(
      res,
      async () => {
        const modelId = text(req, 'model_id');
        const { status, body } = await ctx.api<{ warnings: { message: string }[] }>('PUT', '/projects/:project_id/models/*model_id', {
          params: { project_id: projectId, model_id: modelId },
          body: modelBody(req),
        });
        // What the saved model will do that may not be meant (no provider key, inactive).
        const notes = body.warnings.map((w) => ` Note: ${w.message}`).join('');
        return { kind: 'ok', message: `${status === 201 ? 'Added' : 'Saved'} model ${modelId}${notes === '' ? '' : `.${notes}`}` };
      },
      (notice, failed) => modelsScreen(ctx, req, projectId, { notice, typed: failed }),
      pagePath('projects', projectId, 'models'),
    );
  });

  pages.post('/dashboard/projects/:project_id/models/delete', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    await answerAction(
      res,
      async () => {
        const modelId = text(req, 'model_id');
        await ctx.api('DELETE', '/projects/:project_id/models/*model_id', { params: { project_id: projectId, model_id: modelId } });
        return { kind: 'ok', message: `Deleted model ${modelId}; the receipts of its calls stay` };
      },
      (notice) => modelsScreen(ctx, req, projectId, { notice }),
      pagePath('projects', projectId, 'models'),
    );
  });
}
