/**
 * Webhook endpoints and deliveries against a real service, PostgreSQL, Redis and a
 * receiver on loopback that verifies every signature with `standardwebhooks`: CRUD and
 * validation, delivery, retry then success under the same webhook-id, a timeout, failure
 * after the (shortened) schedule, the disable rule, replay, the test event, the SSRF
 * refusals, and fan-out run twice or cut short between its steps, or its job lost; the
 * push (an event persisted by a service's worker is fanned out by it, not by another
 * service on the same database) and the poll, its safety net, which takes only events
 * older than WEBHOOK_DISPATCH_GRACE_MS.
 */
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertEvents, type StoredEvent } from '../../src/events/store.js';
import { newId } from '../../src/ids.js';
import { deliveryIdOf } from '../../src/webhooks/deliveries.js';
import { dispatchEvents, fanOut, fanOutEvents } from '../../src/webhooks/dispatch.js';
import { webhookUrlRefusal, WebhookSender } from '../../src/webhooks/sender.js';
import { startTestService, waitFor, type Json, type TestProject, type TestService } from '../helpers.js';
import { startReceiver, type Receiver } from './receiver.js';

const timeout_ms = 400;

let svc: TestService;
let receiver: Receiver;

beforeAll(async () => {
  [svc, receiver] = await Promise.all([
    startTestService({
      workers: true,
      config: {
        WEBHOOK_RETRY_SCHEDULE_MS: [100, 100],
        WEBHOOK_TIMEOUT_MS: timeout_ms,
        WEBHOOK_DISPATCH_INTERVAL_MS: 50,
        WEBHOOK_DISABLE_FAILED_DELIVERIES: 2,
        WEBHOOK_DISABLE_FAILING_MS: 0,
      },
    }),
    startReceiver(),
  ]);
});

afterAll(async () => {
  expect(receiver.unverified).toEqual([]);
  await svc?.close();
  await receiver?.close();
});

/** An endpoint on the receiver at `path`, answering `replies`. */
async function endpoint(p: TestProject, path: string, replies: (number | 'hang')[], body: Record<string, unknown> = {}): Promise<Json> {
  const r = await svc.call('POST', '/v1/webhooks', { key: p.projectKey, body: { url: `${receiver.url}${path}`, ...body } });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  receiver.expect(path, r.body.secret, replies);
  return r.body;
}

function event(p: TestProject, type: StoredEvent['type'] = 'deposit.created', data: Record<string, unknown> = { customer_id: 'alice', amount: 100 }): StoredEvent {
  return { id: newId('evt'), type, created_at: new Date().toISOString(), project_id: p.projectId, data };
}

/** Stores events and fans them out as the persist worker does once it has committed them (the push). */
async function stored(...events: StoredEvent[]): Promise<void> {
  await insertEvents(svc.rt.db, events);
  await fanOutEvents(svc.rt.db, svc.rt.webhookQueue, events.map((e) => e.id));
}

async function deliveries(p: TestProject, endpointId: string): Promise<Json[]> {
  const r = await svc.call('GET', `/v1/webhooks/${endpointId}/deliveries`, { key: p.projectKey });
  expect(r.status).toBe(200);
  return r.body.data;
}

/** Waits until the endpoint's delivery of `eventId` is no longer pending, and answers it. */
function finished(p: TestProject, endpointId: string, eventId: string): Promise<Json> {
  return waitFor(async () => (await deliveries(p, endpointId)).find((d) => d.event_id === eventId && d.status !== 'pending'), 10_000, `the delivery of ${eventId}`);
}

describe('webhook endpoints', () => {
  it('are created with a secret shown once, listed, changed and deleted', async () => {
    const p = await svc.project();
    const created = await svc.call('POST', '/v1/webhooks', { key: p.projectKey, body: { url: 'https://example.com/hook', description: 'ops' } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ url: 'https://example.com/hook', events: null, description: 'ops', enabled: true, disabled_reason: null });
    expect(created.body.id).toMatch(/^whk_/);
    expect(created.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);

    const listed = await svc.call('GET', '/v1/webhooks', { key: p.projectKey });
    expect(listed.body.data).toEqual([{ ...created.body, secret: undefined }].map(({ secret: _s, ...e }) => e));

    const patched = await svc.call('PATCH', `/v1/webhooks/${created.body.id}`, { key: p.projectKey, body: { events: ['balance.low', 'balance.low'], enabled: false } });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ events: ['balance.low'], enabled: false });
    expect(patched.body.secret).toBeUndefined();

    const deleted = await svc.call('DELETE', `/v1/webhooks/${created.body.id}`, { key: p.projectKey });
    expect(deleted.body).toMatchObject({ id: created.body.id, deleted: true });
    expect((await svc.call('DELETE', `/v1/webhooks/${created.body.id}`, { key: p.projectKey })).body.error.code).toBe('not_found');
  });

  it('refuses bad input, unknown ids and other projects', async () => {
    const p = await svc.project();
    const other = await svc.project();
    const bad = async (body: unknown, param: string) => {
      const r = await svc.call('POST', '/v1/webhooks', { key: p.projectKey, body });
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', param });
    };
    await bad({ url: 'not a url' }, 'url');
    await bad({ url: 'ftp://example.com/x' }, 'url');
    await bad({ url: 'https://example.com', events: ['deposit.made'] }, 'events.0');
    await bad({ url: 'https://example.com', events: [] }, 'events');
    await bad({ url: 'https://example.com', secret: 'x' }, 'secret');
    const mine = await svc.call('POST', '/v1/webhooks', { key: p.projectKey, body: { url: 'https://example.com' } });
    for (const [method, path] of [
      ['PATCH', `/v1/webhooks/${mine.body.id}`],
      ['POST', `/v1/webhooks/${mine.body.id}/test`],
      ['GET', `/v1/webhooks/${mine.body.id}/deliveries`],
      ['POST', `/v1/webhooks/${mine.body.id}/deliveries/dlv_nope/replay`],
    ]) {
      const r = await svc.call(method, path, { key: other.projectKey, body: method === 'PATCH' ? { description: 'x' } : undefined });
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.code).toBe('not_found');
    }
    const customerKey = await p.customerKey('alice');
    expect((await svc.call('GET', '/v1/webhooks', { key: customerKey })).status).toBe(403);
  });

  it('refuses private addresses when set, and again when delivering', async () => {
    const guarded = await startTestService({ config: { UPSTREAM_ALLOW_PRIVATE: false } });
    try {
      const p = await guarded.project();
      const r = await guarded.call('POST', '/v1/webhooks', { key: p.projectKey, body: { url: 'http://169.254.169.254/latest' } });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({
        code: 'invalid_request',
        param: 'url',
        message: 'url points at 169.254.169.254, a link-local (cloud metadata) address; webhooks go to only public addresses (set UPSTREAM_ALLOW_PRIVATE=1 to allow private ones)',
      });
      const ok = await guarded.call('POST', '/v1/webhooks', { key: p.projectKey, body: { url: 'https://example.com/hook' } });
      const moved = await guarded.call('PATCH', `/v1/webhooks/${ok.body.id}`, { key: p.projectKey, body: { url: 'http://localhost:9/x' } });
      expect(moved.body.error).toMatchObject({ code: 'invalid_request', param: 'url' });
    } finally {
      await guarded.close();
    }
    expect(await webhookUrlRefusal('http://[::1]/x', false)).toMatch(/^url points at ::1, a loopback address/);
    // At delivery time: a name that resolves to loopback now (DNS may have changed since).
    const sender = new WebhookSender({ timeoutMs: 1_000, allowPrivate: false });
    try {
      const e = { id: 'evt_x', type: 'deposit.created' as const, created_at: new Date().toISOString(), project_id: 'p', data: {} };
      const target = { id: 'whk_x', enabled: true, secret: 'whsec_' + Buffer.alloc(24).toString('base64') };
      const literal = await sender.send({ ...target, url: `${receiver.url}/private` }, e, false);
      expect(literal).toMatchObject({ status_code: null, error: expect.stringMatching(/^url points at 127\.0\.0\.1, a loopback address/) });
      const named = await sender.send({ ...target, url: receiver.url.replace('127.0.0.1', 'localhost') + '/private' }, e, false);
      expect(named).toMatchObject({ status_code: null, error: expect.stringMatching(/^url points at localhost \(resolves to .*\), a loopback address/) });
    } finally {
      await sender.close();
    }
    expect(receiver.on('/private')).toEqual([]);
  });
});

describe('deliveries', () => {
  it('deliver a matching event, signed, once; and not the types the endpoint did not ask for', async () => {
    const p = await svc.project();
    const all = await endpoint(p, '/all', [200]);
    const low = await endpoint(p, '/low', [200], { events: ['balance.low'] });
    const e = event(p);
    await stored(e);
    const d = await finished(p, all.id, e.id);
    expect(d).toMatchObject({ id: deliveryIdOf(e.id, all.id), event_type: 'deposit.created', status: 'succeeded', next_attempt_at: null });
    expect(d.attempts).toHaveLength(1);
    expect(d.attempts[0]).toMatchObject({ manual: false, status_code: 200, error: null });
    expect(d.attempts[0].response_excerpt).toHaveLength(1024);
    expect(typeof d.attempts[0].latency_ms).toBe('number');
    const got = receiver.on('/all');
    expect(got).toHaveLength(1);
    expect(got[0].headers['webhook-id']).toBe(e.id);
    expect(got[0].headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/=]+$/);
    expect(got[0].event).toEqual(e);
    expect(await deliveries(p, low.id)).toEqual([]);
  });

  it('retry a 500 and then succeed, under the same webhook-id; a timeout counts as a failure', async () => {
    const p = await svc.project();
    const flaky = await endpoint(p, '/flaky', [500, 200]);
    const slow = await endpoint(p, '/slow', ['hang', 200]);
    const e = event(p);
    await stored(e);
    const d = await finished(p, flaky.id, e.id);
    expect(d.status).toBe('succeeded');
    expect(d.attempts.map((a: Json) => a.status_code)).toEqual([500, 200]);
    expect(receiver.on('/flaky').map((r) => r.headers['webhook-id'])).toEqual([e.id, e.id]);
    const s = await finished(p, slow.id, e.id);
    expect(s.status).toBe('succeeded');
    expect(s.attempts[0]).toMatchObject({ status_code: null, error: `timeout: no answer within ${timeout_ms} ms` });
    expect(s.attempts[0].latency_ms).toBeGreaterThanOrEqual(timeout_ms - 50);
  });

  it('fail after the schedule; an endpoint whose deliveries keep failing is disabled and gets no more; a replay tries again', async () => {
    const p = await svc.project();
    const down = await endpoint(p, '/down', [503]);
    const [e1, e2] = [event(p), event(p, 'balance.low', { customer_id: 'bob', available: 5 })];
    await stored(e1);
    const d1 = await finished(p, down.id, e1.id);
    // The first attempt and the schedule's two retries.
    expect(d1).toMatchObject({ status: 'failed', next_attempt_at: null });
    expect(d1.attempts.map((a: Json) => a.status_code)).toEqual([503, 503, 503]);
    let listed = (await svc.call('GET', '/v1/webhooks', { key: p.projectKey })).body.data[0];
    expect(listed.enabled).toBe(true);

    await stored(e2);
    await finished(p, down.id, e2.id);
    listed = (await svc.call('GET', '/v1/webhooks', { key: p.projectKey })).body.data[0];
    expect(listed).toMatchObject({ enabled: false, disabled_reason: 'its last 2 deliveries failed every retry' });
    expect(Date.parse(listed.disabled_at)).toBeGreaterThan(0);

    const e3 = event(p);
    await stored(e3);
    expect((await deliveries(p, down.id)).map((d) => d.event_id)).not.toContain(e3.id);

    // Replay: one attempt more of the same event, manual, and it succeeds.
    receiver.reply('/down', [200]);
    const replay = await svc.call('POST', `/v1/webhooks/${down.id}/deliveries/${d1.id}/replay`, { key: p.projectKey });
    expect(replay.status).toBe(202);
    expect(replay.body.id).toBe(d1.id);
    const replayed = await waitFor(async () => (await deliveries(p, down.id)).find((d) => d.id === d1.id && d.status === 'succeeded'), 10_000, 'the replay');
    expect(replayed.attempts).toHaveLength(4);
    expect(replayed.attempts[3]).toMatchObject({ manual: true, status_code: 200 });
    expect(receiver.on('/down').filter((r) => r.headers['webhook-id'] === e1.id)).toHaveLength(4);

    // A test send reaches it while disabled; new events do not.
    const probe = await svc.call('POST', `/v1/webhooks/${down.id}/test`, { key: p.projectKey });
    expect((await finished(p, down.id, probe.body.event_id)).status).toBe('succeeded');

    // Enabled again by its owner: the reason goes.
    const again = await svc.call('PATCH', `/v1/webhooks/${down.id}`, { key: p.projectKey, body: { enabled: true } });
    expect(again.body).toMatchObject({ enabled: true, disabled_reason: null, disabled_at: null });
  });

  it('send a test event to one endpoint', async () => {
    const p = await svc.project();
    const a = await endpoint(p, '/test-a', [200], { events: ['balance.low'] });
    const b = await endpoint(p, '/test-b', [200]);
    const r = await svc.call('POST', `/v1/webhooks/${a.id}/test`, { key: p.projectKey });
    expect(r.status).toBe(202);
    expect(r.body).toMatchObject({ endpoint_id: a.id, event_type: 'webhook.test', status: 'pending', attempts: [] });
    const d = await finished(p, a.id, r.body.event_id);
    expect(d.status).toBe('succeeded');
    expect(receiver.on('/test-a').map((x) => x.event.type)).toEqual(['webhook.test']);
    expect(receiver.on('/test-a')[0].event).toMatchObject({ project_id: p.projectId, data: { endpoint_id: a.id } });
    expect(await deliveries(p, b.id)).toEqual([]);
    // Not an event of the project's history.
    expect((await svc.call('GET', '/v1/events', { key: p.projectKey })).body.data).toEqual([]);
  });
});

describe('fan-out', () => {
  it('cut short after making the deliveries, then run twice: one delivery per endpoint, delivered once', async () => {
    const p = await svc.project();
    const a = await endpoint(p, '/fan-a', [200]);
    const b = await endpoint(p, '/fan-b', [200]);
    const e = event(p);
    // A pass that made the delivery rows and died before queueing and marking: the event
    // is stored in the same transaction as those rows, so no other pass sees it first.
    await svc.rt.db.transaction(async (tx) => {
      await insertEvents(tx, [e]);
      await fanOut(tx, [e.id]);
    });
    await Promise.all([fanOutEvents(svc.rt.db, svc.rt.webhookQueue, [e.id]), fanOutEvents(svc.rt.db, svc.rt.webhookQueue, [e.id])]);
    await fanOutEvents(svc.rt.db, svc.rt.webhookQueue, [e.id]);
    for (const w of [a, b]) {
      const d = await finished(p, w.id, e.id);
      expect(d).toMatchObject({ id: deliveryIdOf(e.id, w.id), status: 'succeeded' });
      expect(await deliveries(p, w.id)).toHaveLength(1);
    }
    // The same event stored again (the persist worker copying it twice) changes nothing.
    await stored(e);
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.on('/fan-a').map((r) => r.headers['webhook-id'])).toEqual([e.id]);
    expect(receiver.on('/fan-b').map((r) => r.headers['webhook-id'])).toEqual([e.id]);
  });

  it('queues again a pending delivery whose job was lost', async () => {
    const p = await svc.project();
    const w = await endpoint(p, '/lost', [200]);
    const e = event(p);
    // Fanned out, and its job gone with a Redis that came back empty: only the row says it is due.
    await svc.rt.db.transaction(async (tx) => {
      await insertEvents(tx, [e]);
      await fanOut(tx, [e.id]);
      await tx.query(sql.unsafe`UPDATE events SET fanned_out_at = now() WHERE id = ${e.id}`);
      await tx.query(sql.unsafe`UPDATE webhook_deliveries SET next_attempt_at = now() - interval '2 minutes' WHERE event_id = ${e.id}`);
    });
    await dispatchEvents(svc.rt.db, svc.rt.webhookQueue, { graceMs: 60_000, staleGraceMs: 60_000 });
    expect(await finished(p, w.id, e.id)).toMatchObject({ id: deliveryIdOf(e.id, w.id), status: 'succeeded' });
    expect(receiver.on('/lost').map((r) => r.headers['webhook-id'])).toEqual([e.id]);
  });
});

describe('push and poll', () => {
  it('an event persisted by service A is fanned out by A\'s worker at once, not by B\'s on the same database', async () => {
    // A polls once a minute: only its push delivers within seconds. B polls every 50 ms and
    // retries after 30 s: had B taken the event (within its grace) the retry would not come in time.
    const [a, b] = await Promise.all([
      startTestService({ workers: true, config: { WEBHOOK_DISPATCH_INTERVAL_MS: 60_000, WEBHOOK_RETRY_SCHEDULE_MS: [100] } }),
      startTestService({ workers: true, config: { WEBHOOK_DISPATCH_INTERVAL_MS: 50, WEBHOOK_RETRY_SCHEDULE_MS: [30_000] } }),
    ]);
    try {
      expect(a.rt.config.QUEUE_PREFIX).not.toBe(b.rt.config.QUEUE_PREFIX);
      const p = await a.project();
      const created = await a.call('POST', '/v1/webhooks', { key: p.projectKey, body: { url: `${receiver.url}/push`, events: ['deposit.created'] } });
      expect(created.status).toBe(201);
      receiver.expect('/push', created.body.secret, [500, 200]);
      const started = Date.now();
      const r = await a.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'pushed', amount: 100, wallet: 'credits', idempotency_key: 'push-1' } });
      expect(r.status).toBe(200);
      const d = await waitFor(async () => {
        const list = await a.call('GET', `/v1/webhooks/${created.body.id}/deliveries`, { key: p.projectKey });
        return list.body.data.find((x: Json) => x.status !== 'pending');
      }, 8_000, 'the delivery of the deposit');
      expect(Date.now() - started).toBeLessThan(8_000);
      expect(d).toMatchObject({ event_type: 'deposit.created', status: 'succeeded' });
      expect(d.attempts.map((x: Json) => x.status_code)).toEqual([500, 200]);
      const got = receiver.on('/push');
      expect(got.map((x) => x.event.data.idempotency_key)).toEqual(['push-1', 'push-1']);
      expect(got[1].headers['webhook-id']).toBe(d.event_id);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('the poll fans out an event whose push never came once it is older than the grace, and leaves a fresh one', async () => {
    const p = await svc.project();
    const w = await endpoint(p, '/poll', [200, 200]);
    // The endpoint existed before both events (it gets only later events).
    await svc.rt.db.query(sql.unsafe`UPDATE webhook_endpoints SET created_at = now() - interval '10 minutes' WHERE id = ${w.id}`);
    const graceMs = svc.rt.config.WEBHOOK_DISPATCH_GRACE_MS;
    const old = { ...event(p), created_at: new Date(Date.now() - graceMs - 60_000).toISOString() };
    const fresh = event(p);
    // Committed by a persist worker killed before its push.
    await insertEvents(svc.rt.db, [old, fresh]);
    expect(await finished(p, w.id, old.id)).toMatchObject({ id: deliveryIdOf(old.id, w.id), status: 'succeeded' });
    // Many polls later (every 50 ms), the fresh one is still left to its push.
    await new Promise((r) => setTimeout(r, 500));
    expect(Date.now() - Date.parse(fresh.created_at)).toBeLessThan(graceMs);
    const unfanned = await svc.rt.db.oneFirst(sql.unsafe`SELECT fanned_out_at IS NULL FROM events WHERE id = ${fresh.id}`);
    expect(unfanned).toBe(true);
    expect((await deliveries(p, w.id)).map((d) => d.event_id)).toEqual([old.id]);
    // Its push, late, delivers it.
    await fanOutEvents(svc.rt.db, svc.rt.webhookQueue, [fresh.id]);
    expect((await finished(p, w.id, fresh.id)).status).toBe('succeeded');
    expect(receiver.on('/poll').map((r) => r.headers['webhook-id'])).toEqual([old.id, fresh.id]);
  });
});
