/**
 * The Webhooks, Deliveries and Events screens over plain HTTP, against a receiver on
 * loopback that verifies every signature with `standardwebhooks`: an endpoint created with
 * its secret shown once, a test send delivered and shown in the log, a failure then a
 * replay that succeeds, enable / disable, deletion on a second click, the events list
 * with its filters and pages; bad input, a missing CSRF token and a viewer change nothing.
 */
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertEvents, type StoredEvent } from '../../src/events/store.js';
import { newId } from '../../src/ids.js';
import { addMember } from '../admin/dashboard-support.js';
import { waitFor, type Json, type TestProject } from '../helpers.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { svc, useTestService } from '../support/service.js';
import { pageCall, pageSignIn, type PageSession } from './support.js';

let receiver: Receiver;
let p: TestProject;
let owner: PageSession;
let viewer: PageSession;

// A scheduled retry a minute away: the replay is what makes a failed delivery succeed here.
useTestService({ workers: true, config: { WEBHOOK_RETRY_SCHEDULE_MS: [60_000] }, variants: [] });
beforeAll(async () => {
  receiver = await startReceiver();
  p = await svc.project();
  const plan = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
  expect(plan.status).toBe(200);
  const [o, v] = [await addMember(svc, p, 'owner'), await addMember(svc, p, 'viewer')];
  [owner, viewer] = await Promise.all([pageSignIn(svc, o.email, o.password), pageSignIn(svc, v.email, v.password)]);
}, 60_000);

afterAll(async () => {
  expect(receiver?.unverified ?? []).toEqual([]);
  await receiver?.close();
});

const hooksPath = (...rest: string[]) => ['/dashboard/projects', p.projectId, 'webhooks', ...rest].join('/');
const post = (s: PageSession, path: string, form: Record<string, string | string[]> = {}) => pageCall(svc, s, 'POST', path, { ...form, _csrf: s.csrf });
const get = (path: string, s: PageSession = owner) => pageCall(svc, s, 'GET', path);
const notice = (text: string) => /data-testid="notice-(?:ok|error)">([^<]*)</.exec(text)?.[1];
const endpoints = async (): Promise<Json[]> => (await svc.call('GET', `/v1/admin/projects/${p.projectId}/webhooks`, { key: p.adminKey })).body.data;
const deliveries = async (id: string): Promise<Json[]> => (await svc.call('GET', `/v1/admin/projects/${p.projectId}/webhooks/${id}/deliveries`, { key: p.adminKey })).body.data;
/** The row of a delivery in a page: its status and what its cells say. */
const row = (text: string, deliveryId: string) => new RegExp(`<tr data-testid="delivery-row" data-delivery-id="${deliveryId}" data-status="(\\w+)"[\\s\\S]*?</tr>`).exec(text);

/** Creates an endpoint on the receiver at `path` through the page; answers its id, the secret registered with the receiver. */
async function create(path: string, form: Record<string, string | string[]> = {}): Promise<string> {
  const r = await post(owner, hooksPath(), { url: `${receiver.url}${path}`, ...form });
  expect([r.status, notice(r.text)]).toEqual([200, `Added endpoint ${receiver.url}${path}`]);
  const secret = /data-testid="webhook-secret">(whsec_[^<]+)</.exec(r.text)![1];
  receiver.expect(path, secret, [200]);
  const made = (await endpoints()).find((e) => e.url === `${receiver.url}${path}`)!;
  // Shown once: the list never shows it again.
  expect((await get(hooksPath())).text).not.toContain(secret);
  return made.id;
}

describe('the webhooks screen', () => {
  it('opens from the navigation on the project, with every event type to choose', async () => {
    const nav = await get('/dashboard/webhooks');
    expect([nav.status, nav.headers.get('location')]).toEqual([303, hooksPath()]);
    const r = await get(hooksPath());
    expect(r.status).toBe(200);
    expect(r.text).toContain('data-testid="nav-webhooks"');
    expect(r.text.match(/data-testid="webhook-event"/g)).toHaveLength(9);
    expect(r.text).toContain('No endpoints yet');
  });

  it('creates an endpoint for some event types, its secret shown once; a bad URL is refused with the API\'s message and nothing made', async () => {
    const bad = await post(owner, hooksPath(), { url: 'ftp://example.com/x', description: 'typed', events: ['deposit.created'] });
    expect([bad.status, notice(bad.text)]).toEqual([400, 'url: url must be an http(s) URL without credentials or fragment']);
    expect(bad.text).toMatch(/<details class="form" open>/);
    expect(bad.text).toContain('value="typed"');
    expect(bad.text).toMatch(/value="deposit.created" checked/);
    expect(await endpoints()).toEqual([]);

    const id = await create('/typed', { events: ['deposit.created', 'balance.low'], description: 'billing sync' });
    const [made] = await endpoints();
    expect(made).toMatchObject({ id, events: ['deposit.created', 'balance.low'], description: 'billing sync', enabled: true });
    const list = await get(hooksPath());
    expect(list.text).toMatch(new RegExp(`data-webhook-id="${id}" data-enabled="true"[\\s\\S]*?deposit.created, balance.low`));
  });

  it('disables and enables an endpoint, and shows why the service disabled one', async () => {
    const id = await create('/toggle');
    const off = await post(owner, hooksPath(id, 'disable'));
    expect([off.status, notice(off.text)]).toEqual([200, `Disabled ${receiver.url}/toggle: no events are delivered to it`]);
    expect(off.text).toMatch(new RegExp(`data-webhook-id="${id}" data-enabled="false"[\\s\\S]*?turned off by a member`));
    const on = await post(owner, hooksPath(id, 'enable'));
    expect(notice(on.text)).toBe(`Enabled ${receiver.url}/toggle: new events are delivered to it again`);
    expect((await endpoints()).find((e) => e.id === id)).toMatchObject({ enabled: true, disabled_reason: null });
    await svc.rt.db.query(
      sql.unsafe`UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'its last 5 deliveries failed every retry', disabled_at = '2026-01-02T03:04:00Z' WHERE id = ${id}`,
    );
    expect((await get(hooksPath())).text).toContain('its last 5 deliveries failed every retry, since 2026-01-02 03:04 UTC');
  });

  it('deletes an endpoint on a second click only', async () => {
    const id = await create('/doomed');
    const ask = await get(hooksPath(id, 'delete'));
    expect(ask.text).toContain('data-testid="webhook-delete-confirm"');
    expect((await endpoints()).some((e) => e.id === id)).toBe(true);
    const done = await post(owner, hooksPath(id, 'delete'));
    expect([done.status, notice(done.text)]).toEqual([200, `Deleted endpoint ${receiver.url}/doomed and its delivery log`]);
    expect((await endpoints()).some((e) => e.id === id)).toBe(false);
    expect((await post(owner, hooksPath(id, 'delete'))).status).toBe(404);
  });
});

describe('the deliveries screen', () => {
  it('shows a test send delivered; a failure with its attempt; a replay after the fix succeeds', async () => {
    const id = await create('/log');
    const sent = await post(owner, hooksPath(id, 'test'));
    expect([sent.status, notice(sent.text)]).toEqual([200, expect.stringMatching(/^Sent a test event \(evt_[\w-]+\): its delivery is queued$/)]);
    expect(sent.headers.get('hx-push-url')).toBe(hooksPath(id, 'deliveries'));
    // The answer is the log, with the new delivery (pending, or already delivered).
    expect(sent.text).toMatch(/data-testid="delivery-row"[^>]*data-status="(pending|succeeded)"[^>]*>\n<td><code>evt_[\s\S]*?webhook\.test/);
    const [first] = await waitFor(async () => ((await deliveries(id))[0]?.status === 'succeeded' ? deliveries(id) : undefined), 10_000, 'the test delivery');
    const ok = await get(hooksPath(id, 'deliveries'));
    expect(row(ok.text, first.id)?.[1]).toBe('succeeded');
    expect(row(ok.text, first.id)?.[0]).toMatch(/webhook\.test[\s\S]*HTTP 200[\s\S]*answer 200/);
    expect(ok.text).toContain('data-polling="false"');
    expect(receiver.on('/log')).toHaveLength(1);

    receiver.reply('/log', [500]);
    await post(owner, hooksPath(id, 'test'));
    const failing = await waitFor(async () => (await deliveries(id)).find((d) => d.id !== first.id && d.attempts.length === 1), 10_000, 'the failed attempt');
    const bad = await get(hooksPath(id, 'deliveries'));
    const failedRow = row(bad.text, failing.id)!;
    expect(failedRow[1]).toBe('pending');
    expect(failedRow[0]).toMatch(/data-testid="delivery-last-code">HTTP 500</);
    expect(failedRow[0]).toContain(`${failing.next_attempt_at.slice(0, 10)} ${failing.next_attempt_at.slice(11, 16)} UTC`);
    expect(failedRow[0]).toMatch(/data-testid="delivery-attempt" data-status-code="500"/);
    // While a pending delivery's attempt is due soon, htmx asks for the log again; not for one hours away.
    expect(bad.text).toMatch(/data-polling="true">\n<span hidden data-testid="delivery-poll" hx-get="[^"]+\/deliveries" hx-trigger="every 2s" hx-target="#delivery-log" hx-select="#delivery-log"/);
    await svc.rt.db.query(sql.unsafe`UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 hour' WHERE id = ${failing.id}`);
    expect((await get(hooksPath(id, 'deliveries'))).text).toContain('data-polling="false"');

    receiver.reply('/log', [200]);
    const replay = await post(owner, hooksPath(id, 'deliveries', failing.id, 'replay'));
    expect([replay.status, notice(replay.text)]).toEqual([200, `Replaying the delivery of ${failing.event_id}: one attempt more, queued`]);
    await waitFor(async () => (await deliveries(id)).find((d) => d.id === failing.id && d.status === 'succeeded'), 10_000, 'the replay');
    const fixed = row((await get(hooksPath(id, 'deliveries'))).text, failing.id)!;
    expect(fixed[1]).toBe('succeeded');
    expect(fixed[0]).toMatch(/scheduled · HTTP 500[\s\S]*replay · HTTP 200/);
    // The same event, under the same webhook-id, both times.
    expect(receiver.on('/log').slice(1).map((r) => r.headers['webhook-id'])).toEqual([failing.event_id, failing.event_id]);
  });

  it('is a 404 page for an endpoint the project does not have', async () => {
    const r = await get(hooksPath('whk_nope', 'deliveries'));
    expect([r.status, notice(r.text)]).toEqual([404, 'webhook endpoint not found']);
  });
});

describe('refusals change nothing', () => {
  it('without the CSRF token: 403, no endpoint made, no test sent', async () => {
    const before = await endpoints();
    const log = await deliveries(before[0].id);
    const r = await pageCall(svc, owner, 'POST', hooksPath(), { url: `${receiver.url}/csrf` });
    expect([r.status, notice(r.text)]).toEqual([403, expect.stringMatching(/CSRF token is missing/)]);
    const t = await pageCall(svc, owner, 'POST', hooksPath(before[0].id, 'test'), { _csrf: viewer.csrf });
    expect(t.status).toBe(403);
    expect(await endpoints()).toEqual(before);
    expect(await deliveries(before[0].id)).toEqual(log);
  });

  it('a viewer reads the screens, and creating, testing, disabling, deleting and replaying are refused', async () => {
    const before = await endpoints();
    const id = before.find((e) => e.url.endsWith('/log'))!.id;
    const log = await deliveries(id);
    expect((await get(hooksPath(), viewer)).status).toBe(200);
    expect((await get(hooksPath(id, 'deliveries'), viewer)).text).toContain('data-testid="delivery-replay"');
    const refused = 'this needs the admin role or higher; you are a viewer';
    for (const [path, form] of [
      [hooksPath(), { url: `${receiver.url}/viewer` }],
      [hooksPath(id, 'test'), {}],
      [hooksPath(id, 'disable'), {}],
      [hooksPath(id, 'delete'), {}],
      [hooksPath(id, 'deliveries', log[0].id, 'replay'), {}],
    ] as const) {
      const r = await post(viewer, path, form);
      expect([path, r.status, notice(r.text)]).toEqual([path, 403, refused]);
    }
    expect(await endpoints()).toEqual(before);
    expect(await deliveries(id)).toEqual(log);
  });
});

describe('the events screen', () => {
  it('lists the events newest first, filters by type and customer, and pages', async () => {
    const at = Date.now() - 60_000;
    const events: StoredEvent[] = Array.from({ length: 53 }, (_, i) => ({
      id: newId('evt'),
      type: i % 2 === 0 ? 'deposit.created' : 'balance.low',
      created_at: new Date(at + i * 100).toISOString(),
      project_id: p.projectId,
      data: { customer_id: i === 52 ? 'zed' : 'acme', amount: i },
    }));
    await insertEvents(svc.rt.db, events);
    const path = `/dashboard/projects/${p.projectId}/events`;
    const first = await get(path);
    expect(first.text.match(/data-testid="event-row"/g)).toHaveLength(50);
    expect(first.text.indexOf(events[52].id)).toBeLessThan(first.text.indexOf(events[51].id));
    const next = /href="([^"]+)" data-testid="page-next"/.exec(first.text)![1].replace(/&amp;/g, '&');
    const second = await get(next);
    expect(second.text.match(/data-testid="event-row"/g)).toHaveLength(3);
    expect(second.text).toContain(events[0].id);
    const lows = await get(`${path}?type=balance.low`);
    expect(lows.text.match(/data-event-type="balance.low"/g)).toHaveLength(26);
    expect(lows.text).not.toContain('data-event-type="deposit.created"');
    const zed = await get(`${path}?customer_id=zed`);
    expect(zed.text.match(/data-testid="event-row"/g)).toHaveLength(1);
    const bad = await get(`${path}?type=nope`);
    expect(bad.status).toBe(400);
  });
});
