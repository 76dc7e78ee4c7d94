/**
 * Redis Cluster slots: which slot a key is in, which master serves which slots (from the
 * cluster client's slot map), and a hash tag whose keys land on a given master.
 */
import calculateSlot from 'cluster-key-slot';
import type { Cluster } from 'ioredis';

export const slot_count = 16_384;

/** The slot of `key` (its hash tag's, when it has one). */
export function keySlot(key: string): number {
  return calculateSlot(key);
}

/** Master "host:port" -> the slots it serves, from the cluster client's current slot map. */
export function masterSlots(cluster: Cluster): Map<string, Set<number>> {
  const slots = (cluster as unknown as { slots: (string[] | undefined)[] }).slots;
  const masters = new Map<string, Set<number>>();
  for (let slot = 0; slot < slot_count; slot++) {
    const master = slots[slot]?.[0];
    if (master === undefined) continue;
    let own = masters.get(master);
    if (!own) masters.set(master, (own = new Set()));
    own.add(slot);
  }
  return masters;
}

/**
 * The first of `n0`, `n1`... whose slot is in `slots`: a hash tag (`{n7}`) for keys that
 * must live on the master serving them. The same slots give the same tag.
 */
export function tagIn(slots: ReadonlySet<number>): string {
  if (slots.size === 0) throw new Error('a master without slots has no hash tag');
  for (let i = 0; ; i++) {
    if (slots.has(keySlot(`n${i}`))) return `n${i}`;
  }
}
