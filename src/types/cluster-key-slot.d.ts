/** cluster-key-slot (a dependency of ioredis) ships no types: the slot of a key, as Redis Cluster computes it. */
declare module 'cluster-key-slot' {
  function calculateSlot(key: string | Buffer): number;
  namespace calculateSlot {
    /** The slot all keys share, or -1 when they do not. */
    function generateMulti(keys: (string | Buffer)[]): number;
  }
  export = calculateSlot;
}
