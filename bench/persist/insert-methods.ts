/**
 * `tsx bench/persist/insert-methods.ts`: which way of writing a batch of ledger entries
 * costs less CPU per entry (client + PostgreSQL backend): one prepared multi-row
 * statement (`INSERT ... SELECT FROM unnest($1..$17) ON CONFLICT (id) DO NOTHING`, what
 * src/ledger/queries.ts sends), or COPY into a staging table then one
 * `INSERT ... SELECT ... ON CONFLICT (id) DO NOTHING` (COPY itself cannot skip an entry
 * already written). Both run in the same process, alternating, on a scratch copy of the
 * ledger table, so that a shared machine's load falls on both alike.
 *
 * Knobs: BENCH_DATABASE_URL, INSERT_BATCH (256), INSERT_BATCHES (40 per round),
 * INSERT_ROUNDS (6 alternations).
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';

const url = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/svc_bench';
const batchSize = Number(process.env.INSERT_BATCH ?? 256);
const batches = Number(process.env.INSERT_BATCHES ?? 40);
const rounds = Number(process.env.INSERT_ROUNDS ?? 6);

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

/** COPY FROM STDIN through pg's submittable interface (what pg-copy-streams does). */
class CopyIn {
  private resolve!: () => void;
  private reject!: (err: Error) => void;
  readonly done = new Promise<void>((res, rej) => {
    this.resolve = res;
    this.reject = rej;
  });
  constructor(
    private readonly text: string,
    private readonly data: Buffer,
  ) {}
  submit(connection: { query(text: string): void }) {
    connection.query(this.text);
  }
  handleCopyInResponse(connection: { sendCopyFromChunk(b: Buffer): void; endCopyFrom(): void }) {
    connection.sendCopyFromChunk(this.data);
    connection.endCopyFrom();
  }
  handleCommandComplete() {}
  handleReadyForQuery() {
    this.resolve();
  }
  handleError(err: Error) {
    this.reject(err);
  }
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
await client.query('DROP TABLE IF EXISTS measure_ledger_entries');
await client.query('CREATE TABLE measure_ledger_entries (LIKE ledger_entries INCLUDING ALL)');
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
    const data = Buffer.from(batch.map((r) => r.map(copyText).join('\t')).join('\n') + '\n');
    await client.query('BEGIN');
    const copy = new CopyIn(`COPY measure_stage (${columns.join(', ')}) FROM STDIN`, data);
    await (client.query(copy as never), copy.done);
    await client.query({ name: 'measure_from_stage', text: `INSERT INTO measure_ledger_entries SELECT * FROM measure_stage ON CONFLICT (id) DO NOTHING` });
    await client.query('COMMIT');
  },
};

const totals: Record<string, { cpuS: number; entries: number }> = {};
try {
  for (let round = 0; round < rounds; round++) {
    for (const [name, write] of Object.entries(round % 2 === 0 ? methods : Object.fromEntries(Object.entries(methods).reverse()))) {
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
  await client.query('DROP TABLE IF EXISTS measure_ledger_entries');
  await client.end();
}
