/**
 * Reconcile as a background job over the management API: POST answers 202 with the job
 * and its Location, GET there follows it to `completed` with the drift found; a repair
 * job rewrites Redis; one job per project and kind at a time; viewers, project and
 * customer keys are refused; another organization's job reads as not found; and a web
 * process that did not start the job (a restarted one) answers its status all the same.
 */
import { sql } from 'slonik';
import { beforeAll, describe, expect, it } from 'vitest';
import { startWorkers } from '../../workers/index.js';
import { customerKeys } from '../../src/redis/keys.js';
import { startTestService, waitFor, type ApiResponse, type TestProject } from '../helpers.js';
import { addMember, dash, signIn } from './dashboard-support.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

/** A job scans the whole Redis for customers only it holds: on a shared, loaded Redis that takes a while. */
const job_wait_ms = 60_000;
const test_timeout_ms = 180_000;

let other: TestProject;

const jobs = () => `/v1/admin/projects/${p.projectId}/reconcile`;
const meta = (customerId: string) => customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customerId).meta;

/** Follows a job until it has finished, and answers its last status. */
async function finished(url: string, key = p.adminKey, on = svc, waitMs = job_wait_ms): Promise<ApiResponse> {
  let last: unknown = null;
  return waitFor(async () => {
    const r = await on.call('GET', url, { key });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    last = r.body;
    return ['completed', 'failed'].includes(r.body.status) ? r : null;
  }, waitMs, 'the reconcile job to finish').catch((err: Error) => {
    throw new Error(`${err.message}; last: ${JSON.stringify(last)}`);
  });
}

useTestService({ workers: true });
beforeAll(async () => {
  other = await svc.project('B');
  for (const [id, name] of [['rj1', 'One'], ['rj2', 'Two']]) {
    const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: id, amount: 100, name } });
    expect(r.status).toBe(200);
  }
  await svc.drained();
});

describe('POST /projects/:project_id/reconcile and GET .../reconcile/:job_id', () => {
  it('answers 202 with the job and its Location, which reaches completed with exactly the drift, and a repair job rewrites it', async () => {
    await svc.rt.redis.hset(meta('rj2'), 'name', 'Tampered');
    const started = await svc.call('POST', jobs(), { key: p.adminKey, body: { repair: false } });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    // The job as queued: what running it writes is read at its Location.
    expect(Object.keys(started.body).sort()).toEqual(['created_at', 'id', 'object', 'project_id', 'repair', 'status']);
    expect(started.body).toMatchObject({ object: 'reconcile_job', project_id: p.projectId, repair: false });
    expect(started.body.id).toMatch(/^rcj_[A-Za-z0-9_-]{16}$/);
    expect(['queued', 'running', 'completed']).toContain(started.body.status);
    const location = started.headers.get('location');
    expect(location).toBe(`${jobs()}/${started.body.id}`);

    const done = await finished(location!);
    expect(done.body).toMatchObject({
      id: started.body.id, status: 'completed', error: null,
      progress: { customers_done: 2, customers_total: 2, customers_with_drift: 1, drift_total: 1, errors_total: 0 },
    });
    for (const t of ['created_at', 'started_at', 'finished_at']) expect([t, Date.parse(done.body[t])], JSON.stringify(done.body)).not.toEqual([t, NaN]);
    expect(done.body.result).toEqual({
      customers_checked: 2, customers_with_drift: 1, customers_repaired: 0,
      drift_total: 1, drift: [{ project_id: p.projectId, customer_id: 'rj2', field: 'meta.name', redis: 'Tampered', expected: 'Two' }],
      errors_total: 0, errors: [], anomalies_total: 0, anomalies: [], quarantined_total: 0, quarantined: [], items_max: 1000,
    });
    // A check changes nothing.
    expect(await svc.rt.redis.hget(meta('rj2'), 'name')).toBe('Tampered');

    const repair = await svc.call('POST', jobs(), { key: p.adminKey, body: { repair: true } });
    expect([repair.status, repair.body.repair]).toEqual([202, true]);
    expect(repair.body.id).not.toBe(started.body.id);
    const repaired = await finished(repair.headers.get('location')!);
    expect(repaired.body.result).toMatchObject({ customers_checked: 2, customers_with_drift: 1, customers_repaired: 1 });
    expect(await svc.rt.redis.hget(meta('rj2'), 'name')).toBe('Two');
    // The first job's answer is still there, unchanged.
    expect((await svc.call('GET', location!, { key: p.adminKey })).body).toEqual(done.body);
  }, test_timeout_ms);

  it('answers the job already queued for the project instead of queueing a second, and shows it queued', async () => {
    const worker = svc.workers!.reconcileWorker;
    await worker.pause();
    try {
      const first = await svc.call('POST', jobs(), { key: p.adminKey });
      const second = await svc.call('POST', jobs(), { key: p.adminKey, body: {} });
      const repair = await svc.call('POST', jobs(), { key: p.adminKey, body: { repair: true } });
      expect([first.status, second.status, repair.status]).toEqual([202, 202, 202]);
      expect(second.body.id).toBe(first.body.id);
      expect(repair.body.id).not.toBe(first.body.id);
      const queued = await svc.call('GET', `${jobs()}/${first.body.id}`, { key: p.adminKey });
      expect(queued.body).toMatchObject({ status: 'queued', started_at: null, finished_at: null, result: null, progress: { customers_done: 0, customers_total: null } });
    } finally {
      worker.resume();
    }
  }, test_timeout_ms);

  it('refuses viewers, project and customer keys, and bad input, and starts nothing', async () => {
    const job = await finished(`${jobs()}/${(await svc.call('POST', jobs(), { key: p.adminKey })).body.id}`);
    // Every state: jobs of other tests may move between them meanwhile, not appear.
    const states = ['waiting', 'prioritized', 'delayed', 'paused', 'active', 'completed', 'failed'] as const;
    const total = async () => Object.values(await svc.rt.reconcileQueue.getJobCounts(...states)).reduce((a, b) => a + b, 0);
    const before = await total();
    const customerKey = await p.customerKey('rj1');
    for (const key of [p.projectKey, customerKey]) {
      expectError(await svc.call('POST', jobs(), { key, body: {} }), 403, 'permission_denied');
      expectError(await svc.call('GET', `${jobs()}/${job.body.id}`, { key }), 403, 'permission_denied');
    }
    expect((await svc.call('GET', `${jobs()}/${job.body.id}`)).status).toBe(401);
    const member = await addMember(svc, p, 'viewer');
    const v = await signIn(svc, member.email, member.password);
    const path = `/projects/${p.projectId}/reconcile`;
    for (const [method, url, body] of [['POST', path, {}], ['GET', `${path}/${job.body.id}`, undefined]] as const) {
      const r = await dash(svc, v, method, url, { body });
      expectError(r, 403, 'permission_denied', { fields: { role_required: 'admin' }, label: method });
    }
    for (const [body, param] of [[{ repair: 'yes' }, 'repair'], [{ repiar: true }, 'repiar']] as const) {
      const bad = await svc.call('POST', jobs(), { key: p.adminKey, body });
      expectError(bad, 400, 'invalid_request', { param });
    }
    expect((await svc.call('GET', `${jobs()}/${job.body.id}?x=1`, { key: p.adminKey })).status).toBe(400);
    expect(await total()).toBe(before);
  }, test_timeout_ms);

  it("answers another organization's job, an unknown id and a malformed one as not found", async () => {
    const mine = await svc.call('POST', jobs(), { key: p.adminKey });
    await finished(`${jobs()}/${mine.body.id}`);
    const cases: [string, string][] = [
      // The other organization's admin key, under its own project and under ours.
      [other.adminKey, `/v1/admin/projects/${other.projectId}/reconcile/${mine.body.id}`],
      [other.adminKey, `${jobs()}/${mine.body.id}`],
      [p.adminKey, `${jobs()}/rcj_AAAAAAAAAAAAAAAA`],
      [p.adminKey, `${jobs()}/1`],
      [p.adminKey, `${jobs()}/${encodeURIComponent('../../x')}`],
    ];
    for (const [key, url] of cases) {
      const r = await svc.call('GET', url, { key });
      expectError(r, 404, 'not_found', { label: url });
    }
    expectError(await svc.call('POST', `/v1/admin/projects/${p.projectId}/reconcile`, { key: other.adminKey }), 404, 'not_found');
    const theirs = await svc.call('POST', `/v1/admin/projects/${other.projectId}/reconcile`, { key: other.adminKey });
    expect(theirs.status).toBe(202);
    expectError(await svc.call('GET', `/v1/admin/projects/${other.projectId}/reconcile/${theirs.body.id}`, { key: p.adminKey }), 404, 'not_found');
    expectError(await svc.call('GET', `${jobs()}/${theirs.body.id}`, { key: p.adminKey }), 404, 'not_found');
  }, test_timeout_ms);

  it('answers the status from a web process that did not start the job (one restarted meanwhile)', async () => {
    const started = await svc.call('POST', jobs(), { key: p.adminKey, body: { repair: false } });
    const done = await finished(started.headers.get('location')!);
    // Another web process on the same Redis and PostgreSQL, without workers.
    const restarted = await startTestService({ config: { REDIS_PREFIX: svc.rt.config.REDIS_PREFIX, QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX } });
    try {
      const r = await restarted.call('GET', started.headers.get('location')!, { key: p.adminKey });
      expect([r.status, r.body]).toEqual([200, done.body]);
    } finally {
      await restarted.close();
    }
  }, test_timeout_ms);
});

describe('a worker that stops', () => {
  it('puts its running job back in the queue, and another worker runs it again from the start', async () => {
    // Customers in PostgreSQL only (Redis holds none: each is drift), enough for the job to run a while.
    const q = await svc.project('B');
    const n = 1_500;
    await svc.rt.db.query(sql.unsafe`
      INSERT INTO customers (project_id, id, created_at) SELECT ${q.projectId}, 'w' || g, now() FROM generate_series(1, ${n}) g`);
    try {
      const started = await svc.call('POST', `/v1/admin/projects/${q.projectId}/reconcile`, { key: q.adminKey });
      const url = started.headers.get('location')!;
      await waitFor(async () => {
        const r = await svc.call('GET', url, { key: q.adminKey });
        expect(r.body.status).not.toBe('completed');
        return r.body.status === 'running' && r.body.progress.customers_done > 0 ? r : null;
      }, job_wait_ms, 'the job to be under way');
      await svc.workers!.stop();
      const back = await svc.call('GET', url, { key: q.adminKey });
      expect([back.body.status, back.body.result]).toEqual(['queued', null]);

      const again = await startWorkers(svc.rt);
      try {
        const done = await finished(url, q.adminKey, svc, 2 * job_wait_ms);
        expect(done.body.status).toBe('completed');
        expect(done.body.result).toMatchObject({ customers_checked: n, customers_with_drift: n, drift_total: n, errors_total: 0 });
        expect(done.body.result.drift).toHaveLength(1000);
        expect(done.body.progress).toMatchObject({ customers_done: n, customers_total: n });
      } finally {
        await again.stop();
      }
    } finally {
      await svc.rt.db.query(sql.unsafe`DELETE FROM customers WHERE project_id = ${q.projectId}`);
    }
  }, test_timeout_ms);
});
