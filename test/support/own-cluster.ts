/**
 * A Redis Cluster of a test's own: `masters` redis-server processes in cluster mode, in a
 * temporary directory, on ports that stay the same across restarts, the slots split
 * evenly between them, no replicas, nothing persisted unless asked for (`aof`: the
 * production setting, `appendonly yes` and `appendfsync always`). For tests that kill or
 * restart a node without touching the shared test cluster (scripts/redis-cluster.sh).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { slot_count } from '../../src/redis/slots.js';
import { waitFor } from '../helpers.js';
import { redisServerProcess } from './own-redis.js';
import { freePort } from './processes.js';
import { TcpProxy } from './tcp-proxy.js';

export interface OwnClusterNode {
  port: number;
  /** "127.0.0.1:port", as the cluster names the node. */
  key: string;
  /** First and last slot it serves. */
  slots: [number, number];
  readonly running: boolean;
  /** kill -9, as a crash. */
  kill(): Promise<void>;
  /**
   * Starts it again after a kill, its cluster config kept, with what it persisted (its
   * append-only file, when the cluster has one) unless `wipe`: then it comes back empty.
   * Resolves once the cluster is ok again.
   */
  start(opts?: { wipe?: boolean }): Promise<void>;
  /** kill -9 and start again (its data gone unless the cluster persists it). */
  restart(): Promise<void>;
}

export interface OwnCluster {
  url: string;
  nodes: OwnClusterNode[];
  /** The node that serves `slot`. */
  nodeOf(slot: number): OwnClusterNode;
  remove(): Promise<void>;
}

/** What each node keeps on disk: nothing, or an append-only file written before every answer. */
const persistence = {
  none: ['--save', '', '--appendonly', 'no'],
  aof: ['--save', '', '--appendonly', 'yes', '--appendfsync', 'always'],
};

/**
 * `nodeTimeoutMs` is the cluster's node timeout (2 s unless given): a master down for
 * longer is marked failed, and with no replica to promote every master then refuses
 * commands (CLUSTERDOWN) until some time after it is back.
 */
export async function ownCluster(masters = 3, opts: { persist?: keyof typeof persistence; nodeTimeoutMs?: number } = {}): Promise<OwnCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-own-cluster-'));
  const per = Math.ceil(slot_count / masters);
  const nodes: (OwnClusterNode & { launch(): Promise<void> })[] = [];
  for (let i = 0; i < masters; i++) {
    const port = await freePort();
    const nodeDir = join(dir, String(port));
    mkdirSync(nodeDir);
    const server = redisServerProcess(port, nodeDir);
    const node = {
      port,
      key: `127.0.0.1:${port}`,
      slots: [i * per, Math.min(slot_count, (i + 1) * per) - 1] as [number, number],
      get running() {
        return server.running;
      },
      launch: () =>
        server.start(['--cluster-enabled', 'yes', '--cluster-config-file', join(nodeDir, 'nodes.conf'), '--cluster-node-timeout', String(opts.nodeTimeoutMs ?? 2_000), ...persistence[opts.persist ?? 'none']]),
      kill: () => server.kill(),
      async start(o: { wipe?: boolean } = {}) {
        // Redis 7 keeps its append-only file as the parts in appendonlydir.
        if (o.wipe) rmSync(join(nodeDir, 'appendonlydir'), { recursive: true, force: true });
        await node.launch();
        await clusterOk(nodes.map((n) => n.port));
      },
      async restart() {
        await node.kill();
        await node.start();
      },
    };
    nodes.push(node);
  }
  await Promise.all(nodes.map((n) => n.launch()));
  const admin = nodes.map((n) => new Redis(n.port, '127.0.0.1'));
  try {
    for (let i = 0; i < masters; i++) {
      await admin[i].call('CLUSTER', 'ADDSLOTSRANGE', String(nodes[i].slots[0]), String(nodes[i].slots[1]));
      if (i > 0) await admin[i].call('CLUSTER', 'MEET', '127.0.0.1', String(nodes[0].port));
    }
  } finally {
    for (const a of admin) a.disconnect();
  }
  await clusterOk(nodes.map((n) => n.port));
  return {
    url: `redis://127.0.0.1:${nodes[0].port}`,
    nodes,
    nodeOf: (slot) => nodes.find((n) => slot >= n.slots[0] && slot <= n.slots[1])!,
    async remove() {
      await Promise.all(nodes.map((n) => n.kill()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Every node says cluster_state:ok and knows every other. */
async function clusterOk(ports: number[]): Promise<void> {
  const conns = ports.map((p) => new Redis(p, '127.0.0.1', { maxRetriesPerRequest: 1 }));
  try {
    await waitFor(async () => {
      for (const c of conns) {
        const info = String(await c.call('CLUSTER', 'INFO'));
        if (!/cluster_state:ok/.test(info) || !new RegExp(`cluster_known_nodes:${ports.length}\\b`).test(info)) return false;
      }
      return true;
    }, 20_000, 'the cluster to be ok');
  } finally {
    for (const c of conns) c.disconnect();
  }
}

/**
 * A TCP proxy in front of every node of `cluster` (by node key), and the NAT map that makes
 * a cluster client reach each node through its proxy, so a test can cut or drop one node's
 * traffic.
 */
export async function proxyEveryNode(cluster: OwnCluster): Promise<{ proxies: Map<string, TcpProxy>; natMap: Record<string, { host: string; port: number }> }> {
  const proxies = new Map<string, TcpProxy>();
  const natMap: Record<string, { host: string; port: number }> = {};
  for (const n of cluster.nodes) {
    const proxy = new TcpProxy('127.0.0.1', n.port);
    await proxy.start();
    proxies.set(n.key, proxy);
    natMap[n.key] = { host: '127.0.0.1', port: proxy.port };
  }
  return { proxies, natMap };
}
