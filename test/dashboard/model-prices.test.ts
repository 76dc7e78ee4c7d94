/**
 * The models screen and the price catalogue: a model added from the form with a catalogue
 * entry and one price typed takes the others from the catalogue; its row labels each price
 * `catalogue` or `override` and names the entry; saving its edit form keeps the sources; a
 * hand-priced model carries no label; an unknown catalogue model shows the API's message.
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
const stored = async (id: string) =>
  (await svc.call('GET', `/v1/admin/projects/${fx.org.p.projectId}/models`, { key: fx.org.p.adminKey })).body.data.find((m: { id: string }) => m.id === id);
/** The row of a model on the screen: its price source labels and its catalogue note. */
const row = (html: string, id: string) => {
  const tr = new RegExp(`<tr data-testid="model-row" data-model-id="${id}">([\\s\\S]*?)</tr>`).exec(html)?.[1] ?? '';
  return {
    sources: [...tr.matchAll(/data-testid="price-source">([a-z]+)</g)].map((m) => m[1]),
    catalogue: /data-testid="model-catalogue">([^<]*)</.exec(tr)?.[1],
  };
};
const form = { provider: 'openai', upstream_base_url: '', upstream_model: 'mock-gpt', context_window: '128000', max_output_tokens: '4096', supports_streaming: '1', active: '1' };

describe('models priced from the catalogue', () => {
  it('adds one from the form, labels each price, and its edit form saves it unchanged', async () => {
    const added = await post({ ...form, upstream_base_url: fx.mock.url, model_id: 'cat-4o', catalogue_provider: 'openai', catalogue_model: 'gpt-4o', output_price_per_million_credits: '12000000' });
    expect([added.status, notice(added.text)]).toEqual([200, expect.stringMatching(/^Added model cat-4o/)]);
    const before = await stored('cat-4o');
    expect(before).toMatchObject({ input_price_per_million_credits: 2_500_000, output_price_per_million_credits: 12_000_000, price_catalogue: { provider: 'openai', model: 'gpt-4o' } });

    const screen = await pageCall(svc, owner, 'GET', path());
    expect(row(screen.text, 'cat-4o')).toEqual({ sources: ['catalogue', 'override', 'catalogue', 'catalogue'], catalogue: expect.stringMatching(/^catalogue: openai\/gpt-4o \(genai-prices \d+\.\d+\.\d+\)$/) });

    // The edit form holds every field, the catalogue entry included: saved as is, nothing changes.
    const edit = await pageCall(svc, owner, 'GET', `${path()}?edit=cat-4o`);
    expect(edit.text).toContain('name="catalogue_model" maxlength="256" value="gpt-4o"');
    const values = Object.fromEntries([...edit.text.matchAll(/<input name="([a-z_]+)"[^>]*? value="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    const saved = await post({ ...form, ...values, supports_streaming: '1', active: '1' });
    expect(notice(saved.text)).toMatch(/^Saved model cat-4o/);
    const after = await stored('cat-4o');
    expect(after.price_sources).toEqual(before.price_sources);
    expect(after.input_price_per_million_credits).toBe(before.input_price_per_million_credits);
  });

  it('shows no label on a hand-priced model, and the API message for an unknown catalogue model', async () => {
    const screen = await pageCall(svc, owner, 'GET', path());
    const seededId = /data-model-id="([^"]+)"/.exec(screen.text.replace(/data-model-id="cat-4o"/, ''))?.[1];
    expect(seededId).toBeDefined();
    expect(row(screen.text, seededId!)).toEqual({ sources: [], catalogue: undefined });

    const refused = await post({ ...form, upstream_base_url: fx.mock.url, model_id: 'cat-bad', catalogue_provider: 'openai', catalogue_model: 'gpt-4oo' });
    expect(notice(refused.text)).toMatch(/has no model gpt-4oo for provider openai; did you mean gpt-4o\?/);
    expect(await stored('cat-bad')).toBeUndefined();
  });
});
