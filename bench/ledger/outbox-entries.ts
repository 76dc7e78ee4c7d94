/**
 * What an outbox entry costs to keep and to read: 2,000 deducts on one customer on a Redis
 * of its own, then the outbox's MEMORY USAGE and, over 20 reads of the whole outbox, the
 * client CPU of XRANGE plus parseOutboxEntry and Redis's own XRANGE time per entry (INFO
 * commandstats). `npx tsx bench/ledger/outbox-entries.ts`.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newId } from '../../src/ids.js';
import { createRedis } from '../../src/redis/client.js';
import { parseOutboxEntry } from '../../src/redis/codec.js';
import { customerKeys, scriptKeys } from '../../src/redis/keys.js';
import { registerScripts, scriptApi } from '../../src/redis/scripts.js';
import { startBenchRedis } from '../lib/bench-redis.js';

const deducts = 2_000;
const reads = 20;
const projectId = 'proj_outbox_entries';

const logDir = mkdtempSync(join(tmpdir(), 'outbox-entries-'));
const own = await startBenchRedis('none', logDir, 10_000);
const redis = createRedis(own.url);
try {
  const scripts = scriptApi(registerScripts(redis));
  const k = customerKeys(`oe${randomBytes(3).toString('hex')}:`, projectId, 'c1');
  const call = () => ({ keys: scriptKeys(k), clockOffsetMs: 0, projectId, customerId: 'c1', entryIdBase: newId('le'), bindingReadAtMs: null });
  await scripts.deposit(call(), {
    idempotencyKey: '', requestHash: 'h', amount: 1_000_000_000, wallet: 'credits', label: 'bench', startsAtMs: '', expiresAtMs: '',
    name: '0', email: '0', metadata: '0', description: '', sourceId: newId('src'), requestFields: '',
  });
  for (let i = 0; i < deducts; i += 100) {
    await Promise.all(Array.from({ length: 100 }, (_, j) => scripts.deduct(call(), {
      transactionId: `t-${i + j}`, amount: 1, requestHash: 'hash0123456789abcdef0123456789ab', walletFilter: '', entryWallet: '', businessType: '',
      description: '', admitted: '1', keyBudget: '', requestFields: '',
    })));
  }
  const entries = deducts + 1;
  const bytes = Number(await redis.call('MEMORY', 'USAGE', k.outbox, 'SAMPLES', '0'));
  const readAll = async () => (await redis.xrange(k.outbox, '-', '+')).map(([, fields]) => parseOutboxEntry(fields));
  for (let r = 0; r < 5; r++) await readAll();
  const xrangeUs = async () => Number(/cmdstat_xrange:calls=\d+,usec=(\d+)/.exec(await redis.info('commandstats'))![1]);
  const redisBefore = await xrangeUs();
  const cpu = process.cpuUsage();
  for (let r = 0; r < reads; r++) await readAll();
  const client = process.cpuUsage(cpu);
  const redisUs = (await xrangeUs()) - redisBefore;
  console.log(`outbox of ${entries} entries: ${bytes} bytes, ${(bytes / entries).toFixed(0)} per entry`);
  console.log(`per entry read: client CPU (XRANGE + parseOutboxEntry) ${((client.user + client.system) / reads / entries).toFixed(2)} us, Redis XRANGE ${(redisUs / reads / entries).toFixed(2)} us`);
} finally {
  redis.disconnect();
  await own.stop();
  rmSync(logDir, { recursive: true, force: true });
}
