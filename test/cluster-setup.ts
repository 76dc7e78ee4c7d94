/**
 * Once per cluster run (vitest.cluster.config.ts): a local 3-master Redis Cluster is up
 * (scripts/redis-cluster.sh, idempotent), then the usual setup against it.
 */
import { execFileSync } from 'node:child_process';
import setup from './global-setup.js';

export const cluster_url = 'redis://127.0.0.1:7000';

export default async function clusterSetup(): Promise<void> {
  execFileSync('bash', ['scripts/redis-cluster.sh', 'start'], { stdio: 'inherit' });
  process.env.REDIS_URL = cluster_url;
  await setup();
}
