/**
 * The models screen and a model's wire format: the form sets it (empty: the provider's),
 * the row shows it, the edit form selects the stored one, and the API's refusal of the
 * Responses API for an Anthropic model is shown.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { pageCall, pageSignIn, type PageSession, useSeededDashboard } from './support.js';
import { svc } from '../support/service.js';

const fx = useSeededDashboard();
let owner: PageSession;
beforeAll(async () => {
  owner = await pageSignIn(svc, fx.org.owner.email, fx.org.owner.password);
});

const path = () => `/dashboard/projects/${fx.org.p.projectId}/models`;
const post = (form: Record<string, string>) => pageCall(svc, owner, 'POST', path(), { ...form, _csrf: owner.csrf });
const notice = (text: string) => /data-testid="notice-(?:ok|error)">([^<]*)</.exec(text)?.[1];
const shown = (html: string, id: string) => {
  const tr = new RegExp(`<tr data-testid="model-row" data-model-id="${id}">([\\s\\S]*?)</tr>`).exec(html)?.[1] ?? '';
  return /data-testid="model-wire-format-shown">\(([a-z_]+)\)</.exec(tr)?.[1];
};
const form = () => ({
  upstream_base_url: fx.mock.url, upstream_model: 'mock-gpt', context_window: '128000', max_output_tokens: '4096', supports_streaming: '1', active: '1',
  input_price_per_million_credits: '1000', output_price_per_million_credits: '2000',
});

describe('a model wire format on the models screen', () => {
  it('is set by the form or defaults from the provider, shown on the row and selected when editing', async () => {
    expect(notice((await post({ ...form(), provider: 'openai', model_id: 'wf-responses', wire_format: 'responses' })).text)).toMatch(/^Added model wf-responses/);
    expect(notice((await post({ ...form(), provider: 'anthropic', model_id: 'wf-claude', wire_format: '' })).text)).toMatch(/^Added model wf-claude/);
    const screen = await pageCall(svc, owner, 'GET', path());
    expect([shown(screen.text, 'wf-responses'), shown(screen.text, 'wf-claude')]).toEqual(['responses', 'messages']);
    const edit = await pageCall(svc, owner, 'GET', `${path()}?edit=wf-responses`);
    expect(edit.text).toContain('<option value="responses" selected>');
  });

  it("shows the API's refusal of the Responses API for an Anthropic model", async () => {
    const refused = await post({ ...form(), provider: 'anthropic', model_id: 'wf-bad', wire_format: 'responses' });
    expect(notice(refused.text)).toMatch(/wire_format responses .* needs provider openai/);
  });
});
