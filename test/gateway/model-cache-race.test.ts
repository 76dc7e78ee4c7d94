/**
 * A model change (prices included) takes effect on every API process at once, whatever
 * it races: model reads from PostgreSQL that were in flight when it committed must not
 * put the old model back into a cache its message already cleared, nor may a read in
 * flight while the subscriber reconnects (the message published meanwhile is lost).
 *
 * The caches under test are ModelCache instances, one per simulated API process, each
 * with its own subscriber connection; their reads are the real PostgreSQL query, held at
 * a gate after the row was read so that the change lands while they are in flight.
 */
import { describe, expect, it } from 'vitest';
import { gatewayModelOf, ModelCache, type GatewayModel } from '../../src/gateway/models.js';
import { projectChannel } from '../../src/keys/store.js';
import { waitFor } from '../helpers.js';
import { ReadGate } from '../support/read-gate.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService();

/** Model reads that, while the gate is shut, wait after reading the row until it opens. */
class GatedLoader extends ReadGate {
  readonly load = async (projectId: string, modelId: string): Promise<GatewayModel | null> => {
    const m = await svc.rt.modelQueries.findModel(projectId, modelId);
    await this.pass();
    return m && gatewayModelOf(m);
  };
}

/** A simulated API process: a model cache subscribed on its own connection. */
async function apiProcess(loader: GatedLoader) {
  const subscriber = svc.rt.extraConnection();
  const cache = new ModelCache(loader.load);
  await cache.subscribe(subscriber, svc.rt.config.REDIS_PREFIX);
  // Registered after the cache's listener, so it runs once the cache has handled the message.
  let changes = 0;
  subscriber.on('message', (channel: string, message: string) => {
    if (channel === projectChannel(svc.rt.config.REDIS_PREFIX) && message === p.projectId) changes++;
  });
  return { cache, subscriber, changes: () => changes };
}

let models = 0;

async function putModel(id: string, inputPrice: number): Promise<void> {
  const res = await svc.call('PUT', `/v1/admin/projects/${p.projectId}/models/${id}`, {
    key: p.adminKey,
    body: {
      provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: 'm', context_window: 1_000,
      max_output_tokens: 100, supports_streaming: true, input_price_per_million_credits: inputPrice, output_price_per_million_credits: 1,
    },
  });
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
}

async function newModel(): Promise<string> {
  const id = `race-${++models}`;
  await putModel(id, 1);
  return id;
}

describe('a model change racing model reads', () => {
  it('30 reads in flight on three processes when the change commits all answer the new prices, and so does every read after', async () => {
    const id = await newModel();
    const loaders = [new GatedLoader(), new GatedLoader(), new GatedLoader()];
    const procs = await Promise.all(loaders.map((l) => apiProcess(l)));
    for (const l of loaders) l.shut();
    const inFlight = Array.from({ length: 30 }, (_, i) => procs[i % procs.length].cache.get(p.projectId, id));
    // Every process has read the old row and holds it.
    await waitFor(() => loaders.every((l) => l.arrivals > 0), 5_000, 'a read on every process');

    await putModel(id, 7);
    await waitFor(() => procs.every((pr) => pr.changes() > 0), 2_000, 'the change message on every process');
    for (const l of loaders) l.release();

    const answers = await Promise.all(inFlight);
    expect(answers.map((m) => m?.prices.input)).toEqual(answers.map(() => 7));
    // At once, although the caches would keep a model for seconds.
    for (const pr of procs) expect((await pr.cache.get(p.projectId, id))?.prices.input).toBe(7);
    for (const pr of procs) pr.subscriber.disconnect();
  });

  it('a read in flight while the subscriber reconnects does not cache the model a lost message would have cleared', async () => {
    const id = await newModel();
    const loader = new GatedLoader();
    const pr = await apiProcess(loader);
    loader.shut();
    const inFlight = pr.cache.get(p.projectId, id);
    await waitFor(() => loader.arrivals > 0, 5_000, 'the read');

    // The change's message is published while the subscriber is away, so it is lost.
    const ready = new Promise((resolve) => pr.subscriber.once('ready', resolve));
    pr.subscriber.disconnect(true);
    await putModel(id, 9);
    await ready;
    loader.release();

    expect((await inFlight)?.prices.input).toBe(9);
    expect((await pr.cache.get(p.projectId, id))?.prices.input).toBe(9);
    pr.subscriber.disconnect();
  });
});
