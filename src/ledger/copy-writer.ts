/**
 * The persist loop's writer of ledger entries: COPY ... FROM STDIN on a PostgreSQL
 * connection of its own (pg-copy-streams; slonik does not expose the copy protocol), with
 * the statement path of src/ledger/queries.ts (`insertEntries`) behind it.
 *
 * A batch whose entries are all plain ledger entries (no deposit that creates a customer
 * or source row, no gateway usage record) is written by one `COPY ledger_entries` in
 * autocommit: one statement, atomic and durable on its own (synchronous_commit as the
 * server has it), with no BEGIN and COMMIT round trips, no ON CONFLICT arbiter probe, and
 * none of the per-row array building and parsing of the multi-row `unnest` statement.
 *
 * COPY cannot skip a row that is already there. It does not need to in the common case:
 * the outbox is trimmed only after the commit, so an entry is written twice only when a
 * worker died (or its trim failed) between the two, and the next pass repeats the batch.
 * Then the COPY fails on a unique key as a whole (nothing of it is written) and the batch
 * goes to the statement path, which skips the entries present (ON CONFLICT (id) DO
 * NOTHING) and tells a repeated entry from one that takes another's seq (isSeqClash).
 * Any other failure of the COPY (the connection, the server) also hands the batch to the
 * statement path, which gives the error the loop knows how to handle; a COPY whose
 * commit reached the server before the connection broke is then a repeat like any other.
 *
 * Batches with deposits or usage records take the statement path as a whole: they need
 * their customer, source and usage rows in the same transaction.
 */
import type { Logger } from 'pino';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { OutboxEntry } from '../redis/codec.js';
import { copy_columns, copyRow } from './copy-row.js';
import { compareForInsert, type LedgerQueries } from './queries.js';

const copy_statement = `COPY ledger_entries (${copy_columns.join(', ')}) FROM STDIN`;

/** As the pool's connectionTimeout (src/db/pool.ts). */
const copy_connect_timeout_ms = 5_000;
/** How long past statement_timeout a COPY without any answer is given before its connection is cut. */
const copy_silence_margin_ms = 5_000;

/** Bytes of COPY data sent per write to the stream (the rows are built in pieces of this size). */
const copy_chunk_chars = 64 * 1024;

/**
 * Whether the COPY can write this entry: a ledger entry that needs no customer, source,
 * usage or event row (a batch with an event takes the statement path, which inserts its
 * events in the same transaction).
 */
function copyable(e: OutboxEntry): boolean {
  return e.type !== 'USAGE' && e.type !== 'EVENT' && e.usage === undefined && !(e.type === 'DEPOSIT' && e.x);
}


export interface EntryWriter {
  /** Writes outbox entries (of any customers); those already in PostgreSQL are skipped. Returns the rows inserted. */
  insertEntries(entries: OutboxEntry[]): Promise<number>;
  close(): Promise<void>;
}

export interface CopyWriterStats {
  /** Batches written by COPY. */
  copied: number;
  /** Batches the COPY handed to the statement path after it failed (a repeat, mostly). */
  fellBack: number;
  /** Batches that went to the statement path because they need other rows. */
  statements: number;
}

export class CopyEntryWriter implements EntryWriter {
  private client: pg.Client | undefined;
  private connecting: Promise<pg.Client> | undefined;
  readonly stats: CopyWriterStats = { copied: 0, fellBack: 0, statements: 0 };

  constructor(
    private readonly databaseUrl: string,
    private readonly queries: Pick<LedgerQueries, 'insertEntries'>,
    private readonly logger: Logger,
    private readonly statementTimeoutMs = 30_000,
    /** How the connection shows in pg_stat_activity. */
    private readonly applicationName = 'persist-copy',
  ) {}

  async insertEntries(entries: OutboxEntry[]): Promise<number> {
    if (entries.length === 0) return 0;
    for (const e of entries) {
      if (!copyable(e)) {
        this.stats.statements++;
        return this.queries.insertEntries(entries);
      }
    }
    // Each customer's entries in seq order and one order for every worker, as the statement path.
    const sorted = [...entries].sort(compareForInsert);
    try {
      const n = await this.copy(sorted);
      this.stats.copied++;
      return n;
    } catch (err) {
      this.stats.fellBack++;
      if ((err as { code?: string }).code !== '23505') this.logger.warn({ err }, 'COPY of ledger entries failed; writing the batch with the statement path');
      return this.queries.insertEntries(entries);
    }
  }

  private async copy(sorted: OutboxEntry[]): Promise<number> {
    // The data first: an entry that cannot be written fails here, before the COPY starts.
    const chunks: string[] = [];
    let chunk = '';
    for (const e of sorted) {
      chunk += copyRow(e);
      if (chunk.length >= copy_chunk_chars) {
        chunks.push(chunk);
        chunk = '';
      }
    }
    chunks.push(chunk);
    const client = await this.connect();
    const stream = client.query(copyFrom(copy_statement));
    // statement_timeout bounds the server's side; a connection that goes silent (no answer,
    // no error) is cut a little later, so that the batch goes to the statement path.
    let timer: NodeJS.Timeout | undefined;
    const done = new Promise<void>((resolve, reject) => {
      stream.once('finish', resolve);
      // on, not once: a second error (the connection cut after the first) must not go unheard.
      stream.on('error', reject);
      timer = setTimeout(() => {
        reject(new Error(`COPY of ledger entries had no answer in ${this.statementTimeoutMs + copy_silence_margin_ms} ms`));
        this.drop(client);
      }, this.statementTimeoutMs + copy_silence_margin_ms);
    });
    for (const c of chunks) stream.write(c);
    stream.end();
    try {
      await done;
    } catch (err) {
      // The connection is dropped on any failure, now, not when its 'end' or 'error' event
      // comes: on a busy process that can be after the next batch has taken the dead
      // connection again (seen in CI: two batches in a row fell back after a backend was
      // terminated). A failure is rare and the next batch's connection costs milliseconds.
      this.drop(client);
      throw err;
    } finally {
      clearTimeout(timer);
    }
    return stream.rowCount;
  }

  private connect(): Promise<pg.Client> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= (async () => {
      const client = new pg.Client({
        connectionString: this.databaseUrl, statement_timeout: this.statementTimeoutMs, connectionTimeoutMillis: copy_connect_timeout_ms,
        application_name: this.applicationName,
      });
      // A connection that breaks is dropped; the next batch opens another.
      client.on('error', (err) => {
        this.logger.warn({ err }, 'the COPY connection broke; the next batch opens another');
        this.drop(client);
      });
      client.on('end', () => {
        if (this.client === client) this.client = undefined;
      });
      try {
        await client.connect();
      } catch (err) {
        client.end().catch(() => undefined);
        throw err;
      } finally {
        this.connecting = undefined;
      }
      this.client = client;
      return client;
    })();
    return this.connecting;
  }

  /** Forgets a connection and closes its socket (whatever it was doing fails). */
  private drop(client: pg.Client): void {
    if (this.client === client) this.client = undefined;
    (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    client.end().catch(() => undefined);
  }

  async close(): Promise<void> {
    const client = this.client ?? (await this.connecting?.catch(() => undefined));
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
