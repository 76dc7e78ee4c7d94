/**
 * Where a V8 .cpuprofile's time went: self time by function and by file, as shares of the
 * busy (non-idle) time. `npx tsx bench/profile/summary.ts FILE.cpuprofile [TOP] [LAST_S]` (LAST_S: only
 * the profile's last seconds).
 */
import { readFileSync } from 'node:fs';
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

/** `lastMs`: only the samples of the profile's last milliseconds (the load, not the start-up). */
export function summarize(path: string, lastMs = Infinity): Summary {
  const p = JSON.parse(readFileSync(path, 'utf8')) as Profile;
  const from = p.endTime - lastMs * 1000;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    if (t < from) continue;
    self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  const fn = new Map<string, number>();
  const file = new Map<string, number>();
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
  return { busyMs: busy / 1000, idleMs: idle / 1000, byFunction: sorted(fn), byFile: sorted(file), inclusive: sorted(incl) };
}

export function printSummary(s: Summary, top = 40): void {
  const pct = (us: number) => `${((us / 1000 / s.busyMs) * 100).toFixed(1).padStart(5)}%`;
  console.log(`busy ${s.busyMs.toFixed(0)} ms, idle ${s.idleMs.toFixed(0)} ms`);
  console.log('\nself time by file:');
  for (const [k, us] of s.byFile.slice(0, top)) console.log(`${pct(us)}  ${k}`);
  console.log('\nself time by function:');
  for (const [k, us] of s.byFunction.slice(0, top)) console.log(`${pct(us)}  ${k}`);
  console.log('\ninclusive time by function (src/ only):');
  for (const [k, us] of s.inclusive.filter(([k]) => / (src|workers)\//.test(k)).slice(0, top)) console.log(`${pct(us)}  ${k}`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const lastS = process.argv[4];
  printSummary(summarize(process.argv[2], lastS ? Number(lastS) * 1000 : Infinity), Number(process.argv[3] ?? 40));
}
