/**
 * `tsx bench/persist/insert-methods.ts`: which way of writing a batch of ledger entries
 * costs less CPU per entry (client + PostgreSQL backend): one prepared multi-row
 * statement (`INSERT ... SELECT FROM unnest($1..$17) ON CONFLICT (id) DO NOTHING`, the
 * statement path of src/ledger/queries.ts), COPY into a staging table then one
 * `INSERT ... SELECT ... ON CONFLICT (id) DO NOTHING`, or one COPY straight into the table
 * in autocommit (what the persist loop sends, src/ledger/copy-writer.ts: a repeated
 * batch fails as a whole there and goes to the statement path). All run in the same
 * process, in rotating order, on a scratch copy of the ledger table with its indexes and
 * (unless INSERT_FK=0) its foreign key to a customers table, so that a shared machine's
 * load falls on all alike.
 *
 * Knobs: BENCH_DATABASE_URL, INSERT_BATCH (256), INSERT_BATCHES (40 per round),
 * INSERT_ROUNDS (6), INSERT_FK (1).
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';

const url = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/svc_bench';
const batchSize = Number(process.env.INSERT_BATCH ?? 256);
const batches = Number(process.env.INSERT_BATCHES ?? 40);
const rounds = Number(process.env.INSERT_ROUNDS ?? 6);
const withFk = process.env.INSERT_FK !== '0';

const columns = ['id', 'project_id', 'customer_id', 'seq', 'type', 'transaction_id', 'amount', 'returned_amount', 'wallet', 'details', 'reason', 'business_type', 'description', 'state', 'result', 'extra', 'created_at'];
const types = ['text', 'text', 'text', 'int8', 'text', 'text', 'int8', 'int8', 'text', 'jsonb', 'text', 'text', 'text', 'text', 'jsonb', 'jsonb', 'timestamptz'];

let seq = 0;
function rows(): (string | number | null)[][] {
  return Array.from({ length: batchSize }, () => {
    seq++;
    return [
      `le_${seq}_${Math.random().toString(36).slice(2)}`, 'proj_bench', `c${seq % 64}`, seq, 'DEDUCT', `tx_${seq}`, 1, null, null,
      JSON.stringify([{ account_id: 'src_abcdefghijkl', credit_type: 'default', amount: 1 }]), null, null, null, 'applied',
      JSON.stringify({ transaction_id: `tx_${seq}`, amount: '1', balance_after: '999999' }), null, new Date().toISOString(),
    ];
  });
}

/** COPY FROM STDIN of one chunk of text, through pg-copy-streams (what src/ledger/copy-writer.ts uses). */
function copyIn(text: string, data: string): Promise<void> {
  const stream = client.query(copyFrom(text));
  const done = new Promise<void>((resolve, reject) => {
    stream.once('finish', resolve);
    stream.once('error', reject);
  });
  stream.end(data);
  return done;
}

const copyText = (v: string | number | null) =>
  v === null ? '\\N' : String(v).replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r');

function backendCpuS(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const client = new pg.Client({ connectionString: url });
await client.connect();
const backend = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
await client.query('DROP TABLE IF EXISTS measure_ledger_entries, measure_customers');
await client.query('CREATE TABLE measure_ledger_entries (LIKE ledger_entries INCLUDING ALL)');
// The ledger's foreign key to its customers, unless INSERT_FK=0 (LIKE does not copy it).
if (withFk) {
  await client.query('CREATE TABLE measure_customers (project_id text, id text, PRIMARY KEY (project_id, id))');
  await client.query(`INSERT INTO measure_customers SELECT 'proj_bench', 'c' || g FROM generate_series(0, 63) g`);
  await client.query('ALTER TABLE measure_ledger_entries ADD FOREIGN KEY (project_id, customer_id) REFERENCES measure_customers (project_id, id)');
}
await client.query('CREATE TEMP TABLE measure_stage (LIKE ledger_entries INCLUDING DEFAULTS) ON COMMIT DELETE ROWS');

const methods: Record<string, (batch: (string | number | null)[][]) => Promise<void>> = {
  async 'prepared unnest'(batch) {
    const arrays = columns.map((_, i) => batch.map((r) => r[i]));
    await client.query('BEGIN');
    await client.query({
      name: 'measure_unnest',
      text: `INSERT INTO measure_ledger_entries (${columns.join(', ')}) SELECT * FROM unnest(${types.map((t, i) => `$${i + 1}::${t}[]`).join(', ')}) ON CONFLICT (id) DO NOTHING`,
      values: arrays,
    });
    await client.query('COMMIT');
  },
  async 'COPY + INSERT SELECT'(batch) {
    const data = batch.map((r) => r.map(copyText).join('\t')).join('\n') + '\n';
    await client.query('BEGIN');
    await copyIn(`COPY measure_stage (${columns.join(', ')}) FROM STDIN`, data);
    await client.query({ name: 'measure_from_stage', text: `INSERT INTO measure_ledger_entries SELECT * FROM measure_stage ON CONFLICT (id) DO NOTHING` });
    await client.query('COMMIT');
  },
  // What the persist loop sends: one COPY into the table, in autocommit.
  async 'COPY direct'(batch) {
    const data = batch.map((r) => r.map(copyText).join('\t')).join('\n') + '\n';
    await copyIn(`COPY measure_ledger_entries (${columns.join(', ')}) FROM STDIN`, data);
  },
};

const totals: Record<string, { cpuS: number; entries: number }> = {};
try {
  for (let round = 0; round < rounds; round++) {
    const all = Object.entries(methods);
    // Each round starts with another method, so that none always follows the same one.
    for (const [name, write] of [...all.slice(round % all.length), ...all.slice(0, round % all.length)]) {
      const prepared = Array.from({ length: batches }, rows);
      const c0 = process.cpuUsage();
      const b0 = backendCpuS(backend);
      for (const batch of prepared) await write(batch);
      const c1 = process.cpuUsage(c0);
      const cpuS = (c1.user + c1.system) / 1e6 + (backendCpuS(backend) - b0);
      totals[name] ??= { cpuS: 0, entries: 0 };
      totals[name].cpuS += cpuS;
      totals[name].entries += batches * batchSize;
      console.log(`round ${round + 1} ${name}: ${((cpuS / (batches * batchSize)) * 1e6).toFixed(1)} us/entry`);
    }
  }
  for (const [name, t] of Object.entries(totals)) {
    console.log(`${name}: ${((t.cpuS / t.entries) * 1e6).toFixed(1)} us client + PostgreSQL CPU per entry over ${t.entries} entries (batches of ${batchSize})`);
  }
} finally {
  await client.query('DROP TABLE IF EXISTS measure_ledger_entries, measure_customers');
  await client.end();
}
