/**
 * The request-path series (src/metrics/series.ts) in prom-client's text format: cumulative
 * buckets with `le` including the bound itself, `+Inf`, `_sum` and `_count`, as a
 * prom-client Histogram writes them for the same observations.
 */
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { FastCounter, FastHistogram } from '../../src/metrics/series.js';

describe('FastHistogram and FastCounter', () => {
  it('write what prom-client\'s own instruments write for the same observations', async () => {
    const observations = [0.001, 0.003, 0.003, 0.01, 0.5, 7, 0];
    const buckets = [0.001, 0.005, 0.01, 1];
    const ours = new Registry();
    const theirs = new Registry();
    const fast = new FastHistogram('h_seconds', 'help', ['route', 'status'], buckets, ours);
    const reference = new Histogram({ name: 'h_seconds', help: 'help', labelNames: ['route', 'status'], buckets, registers: [theirs] });
    const a = fast.series('/x', '200');
    const b = fast.series('/y', '500');
    for (const v of observations) {
      a.observe(v);
      reference.observe({ route: '/x', status: '200' }, v);
    }
    b.observe(2);
    reference.observe({ route: '/y', status: '500' }, 2);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    const text = await ours.metrics();
    // `le` counts the bound itself: 0.001 and 0 are both in the first bucket.
    expect(text).toContain('h_seconds_bucket{le="0.001",route="/x",status="200"} 2');
    expect(text).toContain('h_seconds_bucket{le="+Inf",route="/x",status="200"} 7');

    const counter = new FastCounter('c_total', 'help', ['operation', 'outcome'], ours);
    const applied = counter.series('deduct', 'applied');
    applied.inc();
    applied.inc(4);
    counter.series('deduct', 'replay');
    const lines = (await ours.metrics()).split('\n').filter((l) => l.startsWith('c_total'));
    expect(lines).toEqual(['c_total{operation="deduct",outcome="applied"} 5', 'c_total{operation="deduct",outcome="replay"} 0']);
    await ours.resetMetrics();
    expect((await ours.metrics()).split('\n').filter((l) => l.startsWith('c_total{operation="deduct",outcome="applied"}'))).toEqual(['c_total{operation="deduct",outcome="applied"} 0']);
  });
});
