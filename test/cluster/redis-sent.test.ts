/**
 * The per-command proof of src/redis/sent.ts on a Redis Cluster client (createCluster),
 * on a cluster of the test's own with a TCP proxy in front of every node (ioredis's
 * natMap sends each node's traffic through its proxy, redirections included):
 * - a command written to a node whose connection then drops fails as "outcome unknown"
 *   and is not sent again, although ioredis's cluster client retries a command that
 *   failed with "Connection is closed." after a failover delay;
 * - one sent while its node is unreachable fails as "not sent", and never applies;
 * - one that timed out in the cluster's own offline queue (the whole cluster lost) is not
 *   written when the cluster is back;
 * - a node that refused a command with a redirection (MOVED) did not run it: a command
 *   MOVED away and then never written fails as "not sent".
 */
import { randomBytes } from 'node:crypto';
import { Redis, type Cluster } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCluster } from '../../src/redis/client.js';
import { CommandNotSentError, OutcomeUnknownError } from '../../src/redis/sent.js';
import { keySlot } from '../../src/redis/slots.js';
import { waitFor } from '../helpers.js';
import { ownCluster, proxyEveryNode, type OwnCluster } from '../support/own-cluster.js';
import { TcpProxy } from '../support/tcp-proxy.js';

let cluster: OwnCluster;
const prefix = `tcsent${randomBytes(4).toString('hex')}:`;
let proxies: Map<string, TcpProxy>;
let conn: Cluster | null = null;

beforeAll(async () => {
  cluster = await ownCluster(3);
}, 60_000);
afterAll(async () => {
  await cluster?.remove();
});
afterEach(async () => {
  conn?.disconnect();
  conn = null;
  for (const p of proxies?.values() ?? []) await p.close();
});

async function connect(opts: { commandTimeout?: number } = {}): Promise<Cluster> {
  const proxied = await proxyEveryNode(cluster);
  proxies = proxied.proxies;
  const { natMap } = proxied;
  const first = cluster.nodes[0];
  conn = createCluster(proxies.get(first.key)!.via(cluster.url), opts, undefined, { natMap });
  await waitFor(() => conn!.status === 'ready', 10_000, 'the cluster client to be ready');
  return conn;
}

/** A direct connection to the node that serves `key`, around the proxies. */
function direct(key: string): Redis {
  return new Redis(cluster.nodeOf(keySlot(key)).port, '127.0.0.1');
}

function proxyOf(key: string): TcpProxy {
  return proxies.get(cluster.nodeOf(keySlot(key)).key)!;
}

describe('which failed Redis Cluster commands are proven unsent', () => {
  it('a command written before its node connection dropped is outcome unknown and never sent again; one sent while the node is away is not sent', async () => {
    const c = await connect();
    const key = `${prefix}written`;
    const d = direct(key);
    try {
      // Warm the node's connection (the cluster client opens node connections lazily).
      await c.get(key);
      const proxy = proxyOf(key);
      proxy.dropReplies();
      const written = c.incr(key).catch((err: unknown) => err);
      await waitFor(async () => (await d.get(key)) === '1', 5_000, 'the INCR to apply');
      await proxy.refuse();
      proxy.cut();
      const w = await written;
      expect(w).toBeInstanceOf(OutcomeUnknownError);
      expect(w).not.toBeInstanceOf(CommandNotSentError);
      // Sent while the node refuses connections: never written anywhere.
      const queuedKey = `${prefix}queued{${key}}`;
      const q = await c.set(queuedKey, '1').catch((err: unknown) => err);
      expect(q).toBeInstanceOf(CommandNotSentError);
      // The node is back: the INCR that was written is not sent a second time, the SET not at all.
      proxy.forward();
      await proxy.start();
      await waitFor(async () => (await c.get(key).catch(() => null)) !== null, 10_000, 'the node to answer the cluster client again');
      expect(await d.get(key)).toBe('1');
      expect(await d.get(queuedKey)).toBeNull();
    } finally {
      d.disconnect();
    }
  });

  it('a written command whose node connection closes fails at once as outcome unknown, and is not sent again although the node answers at once', async () => {
    const c = await connect();
    const key = `${prefix}in-flight`;
    const d = direct(key);
    try {
      await c.get(key);
      const proxy = proxyOf(key);
      proxy.dropReplies();
      const started = Date.now();
      const written = c.incr(key).catch((err: unknown) => err);
      await waitFor(async () => (await d.get(key)) === '1', 5_000, 'the INCR to apply');
      // The node answers again before the cluster client's failover retry (100 ms) would
      // send the command again: a resend would make it 2.
      proxy.forward();
      proxy.cut();
      const err = await written;
      expect(Date.now() - started).toBeLessThan(1_000);
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect(err).not.toBeInstanceOf(CommandNotSentError);
      await waitFor(async () => (await c.get(key).catch(() => null)) !== null, 5_000, 'the node to answer the cluster client again');
      await new Promise((r) => setTimeout(r, 500));
      expect(await d.get(key)).toBe('1');
    } finally {
      d.disconnect();
    }
  });

  it('a command that timed out in the offline queue of a cluster that lost every node is never written when it is back', async () => {
    const c = await connect({ commandTimeout: 300 });
    const key = `${prefix}timed-out`;
    const d = direct(key);
    try {
      // Every node connection open (they open lazily): losing them all leaves the cluster client without a node.
      await Promise.all(c.nodes('master').map((n) => n.ping()));
      for (const p of proxies.values()) {
        await p.refuse();
        p.cut();
      }
      await waitFor(() => c.status !== 'ready', 5_000, 'the cluster client to lose the cluster');
      const err = await c.set(key, '1').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CommandNotSentError);
      expect((err as Error).message).toBe('Command timed out');
      for (const p of proxies.values()) await p.start();
      await waitFor(() => c.status === 'ready', 10_000, 'the cluster client to be ready again');
      await c.set(`${prefix}after{${key}}`, '1');
      expect(await d.get(`${prefix}after{${key}}`)).toBe('1');
      expect(await d.get(key)).toBeNull();
    } finally {
      d.disconnect();
    }
  });

  it('a command MOVED away by the node it was written to, then never written to its own node, is not sent', async () => {
    const c = await connect({ commandTimeout: 1_500 });
    const key = `${prefix}moved`;
    const d = direct(key);
    try {
      const slot = keySlot(key);
      const owner = cluster.nodeOf(slot);
      const other = cluster.nodes.find((n) => n !== owner)!;
      await c.get(key);
      await c.get(`${prefix}warm{${other.key}}`);
      // A stale slot map: the command goes to a node that answers MOVED, and its own node is away.
      const proxy = proxies.get(owner.key)!;
      await proxy.refuse();
      proxy.cut();
      await waitFor(() => c.nodes('all').every((n) => n.options.port !== proxy.port), 5_000, 'the cluster client to drop the lost node');
      (c as unknown as { slots: string[][] }).slots[slot] = [`127.0.0.1:${proxies.get(other.key)!.port}`];
      const err = await c.set(key, '1').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CommandNotSentError);
      await proxy.start();
      await waitFor(async () => (await c.get(key).catch(() => 'x')) === null, 10_000, 'the cluster client to reach the node again');
      expect(await d.get(key)).toBeNull();
    } finally {
      d.disconnect();
    }
  });
});
