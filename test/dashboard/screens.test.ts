/**
 * The dashboard's forms and lists over plain HTTP, checked against the management API:
 * each action does what its screen says, with the API's message when refused.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { csvField } from '../../src/dashboard/screens/usage.js';
import { customerKeys } from '../../src/redis/keys.js';
import { addMember } from '../admin/dashboard-support.js';
import { waitFor } from '../helpers.js';
import { pageCall, pageSignIn, type PageSession, useSeededDashboard } from './support.js';
import { expectError } from '../support/errors.js';
import { svc } from '../support/service.js';

const fx = useSeededDashboard();
let owner: PageSession;
beforeAll(async () => {
  owner = await pageSignIn(svc, fx.org.owner.email, fx.org.owner.password);
});

const admin = async (path: string) => (await svc.call('GET', `/v1/admin${path}`, { key: fx.org.p.adminKey })).body;
const post = (path: string, form: Record<string, string | string[]>) => pageCall(svc, owner, 'POST', path, { ...form, _csrf: owner.csrf });
const notice = (text: string) => /data-testid="notice-(?:ok|error)">([^<]*)</.exec(text)?.[1];

describe('projects', () => {
  it('creates a project, and shows the API\'s message for a bad one', async () => {
    const made = await post('/dashboard/projects', { name: 'Second project', contract: 'A', rate_limit_per_minute: '600' });
    expect([made.status, notice(made.text)]).toEqual([200, expect.stringMatching(/^Created project Second project \(proj_/)]);
    const listed = (await admin('/projects')).data.find((p: { name: string }) => p.name === 'Second project');
    expect(listed).toMatchObject({ contract: 'A', rate_limit_per_minute: 600 });
    const bad = await post('/dashboard/projects', { name: '   ' });
    expect([bad.status, notice(bad.text)]).toEqual([400, 'name: String must contain at least 1 character(s)']);
  });
});

describe('keys', () => {
  it('refuses a customer key without its customer, keeping the form open with what was typed', async () => {
    const r = await post(`/dashboard/projects/${fx.org.p.projectId}/keys`, { kind: 'customer', name: 'mobile app', customer_id: '' });
    expect([r.status, notice(r.text)]).toEqual([400, 'customer_id is required for customer keys']);
    expect(r.text).toMatch(/<details class="form" open>/);
    expect(r.text).toContain('value="mobile app"');
  });
});

describe('models', () => {
  const path = () => `/dashboard/projects/${fx.org.p.projectId}/models`;
  const model = () => ({ model_id: 'openai/gpt-x', provider: 'openai', upstream_base_url: fx.mock.url, upstream_model: 'mock-gpt', context_window: '8000',
    max_output_tokens: '1000', input_price_per_million_credits: '1,500,000', output_price_per_million_credits: '3000000', supports_streaming: '1', active: '1' });

  it('adds a model with a provider key that no page ever shows again', async () => {
    const r = await post(path(), { ...model(), upstream_api_key: 'sk-very-secret-upstream' });
    expect([r.status, notice(r.text)]).toEqual([200, 'Added model openai/gpt-x']);
    const m = (await admin(`/projects/${fx.org.p.projectId}/models`)).data.find((x: { id: string }) => x.id === 'openai/gpt-x');
    expect(m).toMatchObject({ has_upstream_key: true, input_price_per_million_credits: 1_500_000, active: true, supports_streaming: true });
    const edit = await pageCall(svc, owner, 'GET', `${path()}?edit=${encodeURIComponent('openai/gpt-x')}`);
    expect(edit.status).toBe(200);
    expect(edit.text).not.toContain('sk-very-secret');
    expect(edit.text).toContain('value="openai/gpt-x" readonly');
  });

  it('sets the hold bounds per part; an empty field is the default', async () => {
    const listed = async () => (await admin(`/projects/${fx.org.p.projectId}/models`)).data.find((x: { id: string }) => x.id === 'openai/gpt-bounds');
    await post(path(), { ...model(), model_id: 'openai/gpt-bounds', image_token_bound: '2,000', file_token_bound: '0' });
    expect(await listed()).toMatchObject({ image_token_bound: 2_000, file_token_bound: 0 });
    await post(path(), { ...model(), model_id: 'openai/gpt-bounds', image_token_bound: '', file_token_bound: '' });
    expect(await listed()).toMatchObject({ image_token_bound: 4_784, file_token_bound: 778_400 });
    await post(path(), { ...model(), model_id: 'openai/gpt-bounds', image_token_bound: '1,000' });
    const edit = await pageCall(svc, owner, 'GET', `${path()}?edit=${encodeURIComponent('openai/gpt-bounds')}`);
    expect(edit.text).toContain('name="image_token_bound" inputmode="numeric" value="1000"');
  });

  it('edits it: an empty key field keeps the key, the box removes it; inactive; the API\'s refusal shown', async () => {
    const listed = async () => (await admin(`/projects/${fx.org.p.projectId}/models`)).data.find((x: { id: string }) => x.id === 'openai/gpt-x');
    // Unchecked boxes are absent from a form: active and streaming off.
    const { active: _a, supports_streaming: _s, ...off } = model();
    const saved = await post(path(), { ...off, output_price_per_million_credits: '4000000' });
    expect([saved.status, notice(saved.text)]).toEqual([200, expect.stringMatching(/^Saved model openai\/gpt-x\. Note: the model is inactive: /)]);
    expect(await listed()).toMatchObject({ has_upstream_key: true, active: false, supports_streaming: false, output_price_per_million_credits: 4_000_000 });
    await post(path(), { ...model(), clear_upstream_api_key: '1' });
    expect(await listed()).toMatchObject({ has_upstream_key: false, active: true });
    const bad = await post(path(), { ...model(), max_output_tokens: '9000' });
    expect([bad.status, notice(bad.text)]).toEqual([400, 'max_output_tokens (9000) may not exceed context_window (8000)']);
    expect(bad.text).toContain('value="9000"');
  });

  it('says when a saved model has no provider key (every call would be 402 byok_key_required)', async () => {
    const r = await post(path(), { ...model(), model_id: 'keyless' });
    expect([r.status, notice(r.text)]).toEqual([200, expect.stringMatching(/^Added model keyless\. Note: the model has no upstream_api_key: .*402 byok_key_required/)]);
  });

  it('deletes a model from its row', async () => {
    expect((await post(path(), { ...model(), model_id: 'doomed/x', upstream_api_key: 'sk-x' })).status).toBe(200);
    const page = await pageCall(svc, owner, 'GET', path());
    expect(page.text).toContain('name="model_id" value="doomed/x"');
    const r = await post(`${path()}/delete`, { model_id: 'doomed/x' });
    expect([r.status, notice(r.text)]).toEqual([200, 'Deleted model doomed/x; the receipts of its calls stay']);
    expect((await admin(`/projects/${fx.org.p.projectId}/models`)).data.map((m: { id: string }) => m.id)).not.toContain('doomed/x');
    const again = await post(`${path()}/delete`, { model_id: 'doomed/x' });
    expect([again.status, notice(again.text)]).toEqual([404, 'model doomed/x not found']);
  });
});

describe('deactivating a project', () => {
  it('deactivates from the projects list: keys revoked, shown as deactivated, no button any more', async () => {
    const made = await post('/dashboard/projects', { name: 'Short-lived' });
    const id = /\((proj_[A-Za-z0-9_-]+)\)/.exec(notice(made.text)!)![1];
    const key = await svc.call('POST', `/v1/admin/projects/${id}/keys`, { key: fx.org.p.adminKey, body: { type: 'project' } });
    const r = await post(`/dashboard/projects/${id}/deactivate`, {});
    expect([r.status, notice(r.text)]).toEqual([200, 'Deactivated project Short-lived: 1 key(s) revoked; its records stay readable']);
    expect((await admin(`/projects/${id}`)).active).toBe(false);
    expectError(await svc.call('GET', '/v1/customers/x/balance', { key: key.body.key }), 401, 'api_key_revoked');
    const row = new RegExp(`data-project-id="${id}"[\\s\\S]*?</tr>`).exec((await pageCall(svc, owner, 'GET', '/dashboard/projects')).text)![0];
    expect(row).toContain('deactivated');
    expect(row).not.toContain('project-deactivate');
  });
});

describe('plan', () => {
  it('previews a downgrade and an upgrade, then upgrades with the charge shown', async () => {
    const down = await pageCall(svc, owner, 'GET', '/dashboard/billing?plan=free');
    expect(down.text).toContain('takes effect at the end of this period');
    const up = await pageCall(svc, owner, 'GET', '/dashboard/billing?plan=pro_2m');
    const preview = (await svc.call('GET', '/v1/admin/organization/plan/preview?plan=pro_2m', { key: fx.org.p.adminKey })).body;
    expect(up.text).toContain(`data-testid="plan-charge">$${preview.prorated_charge_usd}<`);
    const done = await post('/dashboard/billing/plan', { plan: 'pro_2m' });
    expect([done.status, notice(done.text)]).toEqual([200, expect.stringMatching(/^Upgraded to pro_2m; charged \$(\d+\.\d{2}) for the rest of the period, on the upcoming invoice below \(billed when the period closes on .+\)$/)]);
    expect((await admin('/organization')).plan).toBe('pro_2m');
    // The charge is on the upcoming invoice the answer shows.
    const charged = /charged \$(\d+\.\d{2})/.exec(notice(done.text)!)![1];
    expect(done.text).toMatch(new RegExp(`data-testid="upcoming-line" data-line-type="upgrade"><td>Upgrade from pro_500k to pro_2m on [^<]*, pro rata: [\\d,]+ of [\\d,]+ minutes left</td><td>\\$${charged.replace('.', '\\.')}</td>`));
  });
});

describe('team', () => {
  it('invites with a password shown once, changes a role, removes; the last owner stays', async () => {
    const invited = await post('/dashboard/team', { email: 'new.person@example.com', role: 'viewer' });
    expect([invited.status, notice(invited.text)]).toEqual([200, 'Invited new.person@example.com as viewer']);
    const password = /data-testid="member-password">([^<]+)</.exec(invited.text)![1];
    const member = (await admin('/members')).data.find((m: { email: string }) => m.email === 'new.person@example.com');
    expect((await svc.call('POST', '/dashboard/api/session', { body: { email: 'new.person@example.com', password } })).status).toBe(201);
    expect((await pageCall(svc, owner, 'GET', '/dashboard/team')).text).not.toContain(password);

    const promoted = await post(`/dashboard/team/${member.id}/role`, { role: 'admin' });
    expect(notice(promoted.text)).toBe('new.person@example.com is now an admin');
    expect((await admin(`/members/${member.id}`)).role).toBe('admin');
    const removed = await post(`/dashboard/team/${member.id}/remove`, {});
    expect(notice(removed.text)).toBe('Removed new.person@example.com');
    expect((await svc.call('GET', `/v1/admin/members/${member.id}`, { key: fx.org.p.adminKey })).status).toBe(404);

    const last = await post(`/dashboard/team/${fx.org.owner.id}/role`, { role: 'viewer' });
    expect([last.status, (await admin(`/members/${fx.org.owner.id}`)).role]).toEqual([409, 'owner']);
  });
});

describe('customers', () => {
  it('pages the ledger 25 entries at a time, without overlap', async () => {
    for (let i = 0; i < 30; i++) {
      expect((await svc.call('POST', '/v1/billing/deduct', { key: fx.org.p.projectKey, body: { customer_id: 'globex', transaction_id: `g-${i}`, amount: 1 } })).status).toBe(200);
    }
    const path = `/dashboard/projects/${fx.org.p.projectId}/customers/globex`;
    const first = await pageCall(svc, owner, 'GET', path);
    const rows = (text: string) => [...text.matchAll(/<code>(g-\d+|[^<]+)<\/code><\/td>\s*<td>/g)].map((m) => m[1]);
    const next = /href="([^"]+)" data-testid="page-next"/.exec(first.text)![1].replace(/&amp;/g, '&');
    const second = await pageCall(svc, owner, 'GET', next);
    const [a, b] = [rows(first.text), rows(second.text)];
    expect([a.length, b.length]).toEqual([25, 6]);
    expect(new Set([...a, ...b]).size).toBe(31);
  });
});

describe('usage', () => {
  it('exports the search as CSV, formulas defused', async () => {
    const chat = await svc.call('POST', '/v1/chat/completions', {
      key: fx.org.p.projectKey,
      headers: { 'x-service-customer': fx.org.customerId, 'x-service-trace-id': '=HYPERLINK("http://x")' },
      body: { model: fx.org.modelId, messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(chat.status).toBe(200);
    await svc.drained();
    const r = await pageCall(svc, owner, 'GET', `/dashboard/projects/${fx.org.p.projectId}/usage.csv?customer_id=${fx.org.customerId}`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(r.headers.get('content-disposition')).toBe(`attachment; filename="usage-${fx.org.p.projectId}.csv"`);
    const lines = r.text.trimEnd().split('\r\n');
    expect(lines[0]).toBe('created_at,transaction_id,trace_id,customer_id,wallet,model,endpoint,stream,status,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,usage_estimated,cost_credits,cost_usd,uncovered_credits,latency_ms');
    expect(lines).toHaveLength(3);
    expect(lines[1]).toContain(`,"'=HYPERLINK(""http://x"")",${fx.org.customerId},`);
    expect(lines[2]).toContain(',trace-hello,');
    expect([csvField('a,b'), csvField('-1'), csvField(-1), csvField(null), csvField('plain')]).toEqual(['"a,b"', "'-1", '-1', '', 'plain']);
  });

  it('shows the uncovered credits: their total, and a marker on the calls that had some', async () => {
    // globex has 4,000,000 credits; 2,000,000 input tokens at 2.5 credits cost more (a new customer would change the reconcile counts below).
    const short = await svc.call('POST', '/v1/chat/completions', {
      key: fx.org.p.projectKey,
      headers: { 'x-service-customer': 'globex' },
      body: { model: fx.org.modelId, messages: [{ role: 'user', content: `hi ${mockDirective({ input_tokens: 2_000_000, output_tokens: 1 })}` }], max_tokens: 1 },
    });
    expect(short.status, JSON.stringify(short.body)).toBe(200);
    const txid = short.headers.get('x-service-transaction-id');
    await svc.drained();
    const receipt = await svc.call('GET', `/v1/billing/receipts/${txid}`, { key: fx.org.p.projectKey });
    const uncovered = receipt.body.uncovered_credits as number;
    expect(uncovered).toBeGreaterThan(0);
    const page = await pageCall(svc, owner, 'GET', `/dashboard/projects/${fx.org.p.projectId}/usage?customer_id=globex`);
    expect(page.status).toBe(200);
    expect(page.text).toMatch(new RegExp(`data-testid="usage-uncovered-total">Uncovered: <span class="amount">${uncovered.toLocaleString('en-US')} credits`));
    expect(page.text).toMatch(new RegExp(`data-transaction-id="${txid}">[^]*?data-testid="usage-uncovered"[^>]*>\\+ ${uncovered.toLocaleString('en-US')} uncovered`));
    const shown = await pageCall(svc, owner, 'GET', `/dashboard/projects/${fx.org.p.projectId}/receipts/${txid}`);
    expect(shown.text).toContain(`data-testid="receipt-uncovered"><span class="amount">${uncovered.toLocaleString('en-US')} credits`);
    // A customer billed in full: no total, no marker.
    const full = await pageCall(svc, owner, 'GET', `/dashboard/projects/${fx.org.p.projectId}/usage?customer_id=${fx.org.customerId}`);
    expect(full.text).toContain('data-testid="usage-row"');
    expect(full.text).not.toContain('usage-uncovered');
  });
});

describe('reconcile', () => {
  const path = () => `/dashboard/projects/${fx.org.p.projectId}/reconcile`;
  const meta = () => customerKeys(svc.rt.config.REDIS_PREFIX, fx.org.p.projectId, 'globex').meta;
  const driftRows = (text: string) => [...text.matchAll(/data-testid="drift-row" data-customer-id="([^"]+)" data-field="([^"]+)"/g)].map((m) => [m[1], m[2]]);

  /** The job an answer shows, followed as htmx does (its panel alone, every poll) until it has finished. */
  const finishedPanel = async (answer: { text: string; headers: Headers }) => {
    const id = /data-testid="reconcile-job" data-job-id="([^"]+)"/.exec(answer.text)![1];
    const url = `${path()}/jobs/${id}`;
    expect(answer.headers.get('hx-push-url')).toBe(url);
    const panel = await waitFor(async () => {
      const r = await pageCall(svc, owner, 'GET', url, undefined, { 'hx-request': 'true', 'hx-target': 'reconcile-job' });
      expect([r.status, r.text.startsWith('<section id="reconcile-job"')]).toEqual([200, true]);
      if (/data-status="(queued|running)"/.test(r.text)) {
        // Unfinished: the panel asks for itself again.
        expect(r.text).toContain(`hx-get="${url}" hx-trigger="every 1s" hx-swap="outerHTML"`);
        return null;
      }
      return r.text;
    }, 60_000, 'the reconcile job to finish');
    expect(panel).toContain('data-status="completed"');
    expect(panel).not.toContain('hx-trigger');
    return { id, url, panel };
  };

  it('checks the project in the background, follows the job to the drift per customer, and repairs it on a second click', async () => {
    await svc.drained();
    await svc.rt.redis.hset(meta(), 'name', 'Tampered <b>');
    const checked = await post(path(), {});
    expect(checked.status).toBe(200);
    expect(notice(checked.text)).toMatch(/^(Check started|A check of this project was already under way); this page follows it$/);
    const check = await finishedPanel(checked);
    expect(check.panel).toContain('data-testid="reconcile-outcome"><strong>Checked 2 customers: 1 with drift</strong>');
    expect(check.panel).toContain('data-testid="customers-checked">2<');
    expect(driftRows(check.panel)).toEqual([['globex', 'meta.name']]);
    // Redis's value and the ledger's, escaped.
    expect(check.panel).toContain('<code>&quot;Tampered &lt;b&gt;&quot;</code></td>\n<td><code>&quot;Globex&quot;</code>');
    expect(await svc.rt.redis.hget(meta(), 'name')).toBe('Tampered <b>');
    // The job's address, opened (or reloaded) in full, shows the screen with the same report.
    const page = await pageCall(svc, owner, 'GET', check.url);
    expect([page.status, page.text.includes('<html'), driftRows(page.text)]).toEqual([200, true, [['globex', 'meta.name']]]);

    const asked = await pageCall(svc, owner, 'GET', `${path()}/repair`);
    expect(asked.text).toContain('data-testid="reconcile-repair-confirm"');
    const repaired = await post(`${path()}/repair`, {});
    expect(notice(repaired.text)).toMatch(/^(Repair started|A repair of this project was already under way); this page follows it$/);
    const repair = await finishedPanel(repaired);
    expect(repair.panel).toContain('<strong>Repaired 1 of 1 customers with drift</strong>');
    expect(await svc.rt.redis.hget(meta(), 'name')).toBe('Globex');
    const again = await finishedPanel(await post(path(), {}));
    expect([/<strong>(Checked[^<]*)</.exec(again.panel)![1], driftRows(again.panel)]).toEqual(['Checked 2 customers: 0 with drift', []]);
    expect(again.panel).toContain('data-testid="drift-none"');
  }, 180_000);

  it('answers an unknown job as not found', async () => {
    const r = await pageCall(svc, owner, 'GET', `${path()}/jobs/rcj_AAAAAAAAAAAAAAAA`);
    expect([r.status, r.text.includes('reconcile job not found')]).toEqual([404, true]);
  });

  it("refuses a viewer's check and repair with the API's message, and offers a viewer no repair", async () => {
    const viewer = await pageSignIn(svc, fx.org.viewer.email, fx.org.viewer.password);
    await svc.rt.redis.hset(meta(), 'name', 'Tampered again');
    try {
      for (const action of [path(), `${path()}/repair`]) {
        const r = await pageCall(svc, viewer, 'POST', action, { _csrf: viewer.csrf });
        expect([action, r.status, notice(r.text)]).toEqual([action, 403, 'this needs the admin role or higher; you are a viewer']);
        expect(driftRows(r.text)).toEqual([]);
      }
      expect(await svc.rt.redis.hget(meta(), 'name')).toBe('Tampered again');
      const screen = await pageCall(svc, viewer, 'GET', path());
      expect([screen.status, screen.text.includes('reconcile-repair'), screen.text.includes('data-testid="nav-reconcile"')]).toEqual([200, false, true]);
    } finally {
      await svc.rt.redis.hset(meta(), 'name', 'Globex');
    }
  });
});

describe('queues', () => {
  const delayedOf = (text: string) => Number(/data-queue="ledger">[\s\S]*?data-state="delayed">([\d,]+)</.exec(text)![1].replace(/,/g, ''));

  it("counts the ledger queue's jobs by state for an owner, with nothing from another origin", async () => {
    const before = await pageCall(svc, owner, 'GET', '/dashboard/queues');
    expect(before.status).toBe(200);
    expect(before.text).toContain('data-testid="nav-queues"');
    // No CDN, no web fonts: the page loads nothing but this origin's own assets.
    expect(before.text).not.toMatch(/https?:\/\/|\/\/[a-z0-9.-]+\.[a-z]{2,}\//i);
    expect([...before.text.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]).filter((u) => !u.startsWith('/dashboard/') && u !== 'data:,')).toEqual([]);
    // A job delayed by a day stays delayed while the page counts it.
    const job = await svc.rt.ledgerQueue.add('dashboard-count-probe' as never, {} as never, { delay: 86_400_000 });
    try {
      const after = await pageCall(svc, owner, 'GET', '/dashboard/queues');
      expect(delayedOf(after.text)).toBe(delayedOf(before.text) + 1);
      // The same operation over the management API (the admin key acts as an owner): counts only.
      const api = await admin('/queues');
      expect(api.data.map((q: { name: string }) => q.name)).toEqual(['ledger', 'reconcile', 'webhooks']);
      expect(api.data[0].counts.delayed).toBeGreaterThanOrEqual(1);
      expect(JSON.stringify(api)).not.toContain('dashboard-count-probe');
    } finally {
      await job.remove();
    }
  });

  it('refuses an admin and a viewer with 403 naming their role', async () => {
    const admin = await addMember(svc, fx.org.p, 'admin');
    for (const [member, role] of [[admin, 'an admin'], [fx.org.viewer, 'a viewer']] as const) {
      const s = await pageSignIn(svc, member.email, member.password);
      const r = await pageCall(svc, s, 'GET', '/dashboard/queues');
      expect([r.status, notice(r.text)]).toEqual([403, `this needs the owner role; you are ${role}`]);
      expect(r.text).not.toContain('queue-row');
      expect(r.text).not.toContain('data-testid="nav-queues"');
    }
  });
});
