/**
 * Where a V8 .cpuprofile's time went: self time by function and by file, as shares of the
 * busy (non-idle) time. `npx tsx bench/profile/summary.ts FILE.cpuprofile [TOP] [LAST_S]` (LAST_S: only
 * the profile's last seconds; a FILE.cpuprofile.windows.json beside it, as bench/profile/gateway.ts
 * writes, limits it to those spans and gives microseconds per request).
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
  endTime: number;
  startTime: number;
}

export interface Summary {
  busyMs: number;
  idleMs: number;
  byFunction: [string, number][];
  byFile: [string, number][];
  /**
   * Self time by file with the time of native code (system calls, JSON, builtins) charged
   * to the file of the nearest JavaScript frame that called it, marked `<native>`: who asked
   * for the socket write, the JSON.parse, the buffer copy.
   */
  byCaller: [string, number][];
  /** Total (self + callees) time of each function, by name and file. */
  inclusive: [string, number][];
}

function shortUrl(url: string): string {
  if (!url) return '(native)';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 'node_modules/'.length).split('/');
    return `npm:${rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  const src = url.search(/\/(src|workers|bench)\//);
  if (src >= 0) return url.slice(src + 1);
  return url.replace(/^file:\/\//, '');
}

function medianOf(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

/**
 * `lastMs`: only the samples of the profile's last milliseconds (the load, not the
 * start-up). `windows`: only the samples inside these spans of the monotonic clock, in
 * microseconds (process.hrtime.bigint() / 1000n of any process on the machine: V8 stamps
 * its samples on the same clock).
 */
export function summarize(path: string, lastMs = Infinity, windows?: [number, number][]): Summary {
  const p = JSON.parse(readFileSync(path, 'utf8')) as Profile;
  const from = p.endTime - lastMs * 1000;
  const inWindows = (t: number) => windows === undefined || windows.some(([a, b]) => t >= a && t <= b);
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  // Each sample counts as the profile's usual interval, not as the time since the one
  // before: on a busy machine a process that was not scheduled for a while gets one sample
  // when it runs again, whose delta would charge the whole wait to whatever ran then.
  const interval = medianOf(p.timeDeltas);
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    if (t < from || !inWindows(t)) continue;
    self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + interval);
  }
  const callerFile = (id: number): string => {
    for (let cur = parent.get(id); cur !== undefined; cur = parent.get(cur)) {
      const url = byId.get(cur)!.callFrame.url;
      if (url) return shortUrl(url);
    }
    return '(native)';
  };
  const fn = new Map<string, number>();
  const file = new Map<string, number>();
  const caller = new Map<string, number>();
  const incl = new Map<string, number>();
  let busy = 0;
  let idle = 0;
  for (const [id, us] of self) {
    const n = byId.get(id)!;
    const name = n.callFrame.functionName || '(anonymous)';
    if (name === '(idle)' || name === '(program)' || name === '(garbage collector)') {
      if (name === '(idle)') {
        idle += us;
        continue;
      }
    }
    busy += us;
    const f = shortUrl(n.callFrame.url);
    const key = `${name} ${f}:${n.callFrame.lineNumber + 1}`;
    fn.set(key, (fn.get(key) ?? 0) + us);
    file.set(f, (file.get(f) ?? 0) + us);
    const owner = (n.callFrame.url || name.startsWith('(')) ? f : `${callerFile(id)} <native>`;
    caller.set(owner, (caller.get(owner) ?? 0) + us);
    // Inclusive: count once per distinct function on the stack.
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const c = byId.get(cur)!;
      const k = `${c.callFrame.functionName || '(anonymous)'} ${shortUrl(c.callFrame.url)}:${c.callFrame.lineNumber + 1}`;
      if (seen.has(k)) continue;
      seen.add(k);
      incl.set(k, (incl.get(k) ?? 0) + us);
    }
  }
  const sorted = (m: Map<string, number>) => [...m.entries()].sort((a, b) => b[1] - a[1]);
  return { busyMs: busy / 1000, idleMs: idle / 1000, byFunction: sorted(fn), byFile: sorted(file), byCaller: sorted(caller), inclusive: sorted(incl) };
}

/** `calls`: the requests the profiled time served, to print microseconds per request beside the shares. */
export function printSummary(s: Summary, top = 40, calls?: number): void {
  const pct = (us: number) => `${((us / 1000 / s.busyMs) * 100).toFixed(1).padStart(5)}%` + (calls ? ` ${(us / calls).toFixed(1).padStart(6)} us` : '');
  console.log(`busy ${s.busyMs.toFixed(0)} ms, idle ${s.idleMs.toFixed(0)} ms` + (calls ? `, ${calls} requests: ${((s.busyMs * 1000) / calls).toFixed(0)} us busy per request` : ''));
  console.log('\nself time by file:');
  for (const [k, us] of s.byFile.slice(0, top)) console.log(`${pct(us)}  ${k}`);
  console.log('\nself time by file, native code charged to its JavaScript caller:');
  for (const [k, us] of s.byCaller.slice(0, top)) console.log(`${pct(us)}  ${k}`);
  console.log('\nself time by function:');
  for (const [k, us] of s.byFunction.slice(0, top)) console.log(`${pct(us)}  ${k}`);
  console.log('\ninclusive time by function (src/ only):');
  for (const [k, us] of s.inclusive.filter(([k]) => / (src|workers)\//.test(k)).slice(0, top)) console.log(`${pct(us)}  ${k}`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [file, top, lastS] = process.argv.slice(2) as [string, string | undefined, string | undefined];
  // bench/profile/gateway.ts leaves the spans under load (and the requests they served) beside its profiles.
  const spans = existsSync(`${file}.windows.json`) ? (JSON.parse(readFileSync(`${file}.windows.json`, 'utf8')) as { windows: [number, number][]; requests: number }) : undefined;
  printSummary(summarize(file, lastS ? Number(lastS) * 1000 : Infinity, spans?.windows), Number(top ?? 40), spans?.requests);
}
