/**
 * Preloaded into a child process (`node --expose-gc --import <this file> ...`): every
 * HEAP_PROBE_MS (250) it collects all garbage and writes what is left, the live heap, to
 * stderr as `heap-probe: <bytes>`. A test then reads what the process keeps, not the
 * sawtooth that RSS shows between collections.
 */
const probe_ms = Number(process.env.HEAP_PROBE_MS ?? 250);

setInterval(() => {
  globalThis.gc();
  process.stderr.write(`heap-probe: ${process.memoryUsage().heapUsed}\n`);
}, probe_ms).unref();
