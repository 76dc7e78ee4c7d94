/**
 * Identifiers the service makes (`le_` ledger entries, `gw_` gateway calls, `usage_`,
 * `src_`, `key_`, `org_`, `proj_`...): a prefix and 12 random bytes in base64url. The
 * bytes come from a pool filled by one randomBytes call per id_pool_size ids: on the VM
 * the benches run on, a randomBytes call costs 6-30 us (more under load) almost
 * regardless of its size (docs/PERFORMANCE.md, "Model gateway"), and every money
 * operation needs one or two ids. The bytes are the same cryptographic randomness, each
 * used once, so ids stay as unique and as unguessable.
 */
import { randomBytes } from 'node:crypto';

const id_random_bytes = 12;
const id_pool_size = 256;

let pool = Buffer.alloc(0);
let offset = 0;

export function newId(prefix: string): string {
  if (offset + id_random_bytes > pool.length) {
    pool = randomBytes(id_random_bytes * id_pool_size);
    offset = 0;
  }
  const id = `${prefix}_${pool.toString('base64url', offset, offset + id_random_bytes)}`;
  offset += id_random_bytes;
  return id;
}
