/** pg-copy-streams ships no types: the part of its API that src/ledger/copy-writer.ts uses. */
declare module 'pg-copy-streams' {
  import type { Writable } from 'node:stream';
  import type { Submittable } from 'pg';
  /** COPY ... FROM STDIN: a writable stream of the data; `rowCount` once it has finished. */
  export interface CopyStreamQuery extends Writable, Submittable {
    rowCount: number;
  }
  export function from(text: string): CopyStreamQuery;
}
