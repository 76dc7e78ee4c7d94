/**
 * Where the API's CPU goes per relayed chunk, by part of the chunk path:
 * `npx tsx bench/streams/parts.ts FILE.cpuprofile WINDOWS.json [CHUNKS_PER_STREAM]`, with
 * the profile of the API process and the gateway-windows.json that `BENCH_CPU_PROF_DIR=...
 * npm run bench:streams` writes. Each sample (inside the gateway's rounds) goes to the part
 * of the innermost frame of its stack that belongs to one, so native work (a socket write,
 * JSON.parse, a buffer copy) counts for the code that asked for it; samples of no part are
 * "other". Microseconds per chunk = the part's time / (streams x chunks per stream, 20).
 */
import { readFileSync } from 'node:fs';

interface Frame {
  functionName: string;
  url: string;
}
interface ProfileNode {
  id: number;
  callFrame: Frame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
}

/** Parts in no particular order; a frame belongs to the first whose test it passes. */
const parts: [string, (f: Frame) => boolean][] = [
  ['socket writes (http chunked framing, writev)', (f) => /^(writev|writeUtf8String|writeLatin1String|writeString|writeGeneric|writevGeneric|_writeGeneric|_writev|_write|_writeRaw|_send|write_|uncork|clearBuffer|onwrite|afterWriteDispatched)$/.test(f.functionName) || f.url.endsWith('_http_outgoing')],
  ['SSE framing (sse.ts)', (f) => f.url.includes('src/gateway/sse.')],
  ['event fields (eventsource-parser)', (f) => f.url.includes('eventsource-parser')],
  ['usage search / read (wire formats)', (f) => f.url.includes('src/gateway/wire/')],
  ['StreamRelay (adapters.ts)', (f) => f.url.includes('src/gateway/adapters.')],
  ['upstream reads (undici, readable, async iterator)', (f) => f.url.includes('undici') || f.url.endsWith('streams/readable') || f.functionName === 'onStreamRead'],
  ['ioredis', (f) => f.url.includes('ioredis') || f.url.includes('redis-parser')],
  ['pino (logs)', (f) => f.url.includes('pino') || f.url.includes('access-log')],
  ['billing, ledger, Redis scripts', (f) => /src\/(gateway\/billing|ledger|redis|plans)\./.test(f.url)],
  ['express, http server, auth, routing', (f) => /express|router|body-parser|_http_server|_http_incoming|_http_common|src\/http\/|src\/keys\//.test(f.url)],
  ['relay loop, TurnCork, timers (relay.ts)', (f) => f.url.includes('src/gateway/relay.') || f.url.endsWith('internal/timers')],
  ['rest of the gateway call (service, request, upstream)', (f) => f.url.includes('src/gateway/')],
  ['connections (accept, connect, close)', (f) => /^(internalConnect|onconnection|close|Socket|destroy|_destroy)$/.test(f.functionName)],
  ['garbage collector', (f) => f.functionName === '(garbage collector)'],
  ['promises, microtasks, nextTick', (f) => /^(runMicrotasks|processTicksAndRejections|nextTick)$/.test(f.functionName)],
];

export function chunkParts(profile: Profile, windows: [number, number][]): { part: string; ms: number }[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const partOf = new Map<number, string>();
  const classify = (id: number): string => {
    let found = partOf.get(id);
    if (found !== undefined) return found;
    found = 'other';
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame;
      const hit = parts.find(([, test]) => test(frame));
      if (hit) {
        found = hit[0];
        break;
      }
    }
    partOf.set(id, found);
    return found;
  };
  // Each sample counts as the usual interval (the median), not as the time since the one
  // before: a process the busy machine did not schedule for a while gets one late sample.
  const interval = [...profile.timeDeltas].sort((a, b) => a - b)[profile.timeDeltas.length >> 1]! / 1000;
  const ms = new Map<string, number>();
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i]!;
    if (!windows.some(([a, b]) => t >= a && t <= b)) continue;
    const node = byId.get(profile.samples[i]!)!;
    if (node.callFrame.functionName === '(idle)') continue;
    const part = classify(node.id);
    ms.set(part, (ms.get(part) ?? 0) + interval);
  }
  return [...ms].map(([part, v]) => ({ part, ms: v })).sort((a, b) => b.ms - a.ms);
}

if (process.argv[1]?.endsWith('parts.ts')) {
  const [file, windowsFile, perStream] = process.argv.slice(2);
  if (!file || !windowsFile) throw new Error('usage: parts.ts FILE.cpuprofile WINDOWS.json [CHUNKS_PER_STREAM]');
  const { windows, requests } = JSON.parse(readFileSync(windowsFile, 'utf8')) as { windows: [number, number][]; requests: number };
  const chunks = requests * Number(perStream ?? 20);
  const rows = chunkParts(JSON.parse(readFileSync(file, 'utf8')) as Profile, windows);
  const total = rows.reduce((a, r) => a + r.ms, 0);
  console.log(`| part | us per chunk | share |\n|---|---:|---:|`);
  for (const r of rows) console.log(`| ${r.part} | ${((r.ms * 1000) / chunks).toFixed(1)} | ${((100 * r.ms) / total).toFixed(0)}% |`);
  console.log(`| **all (busy)** | **${((total * 1000) / chunks).toFixed(1)}** | ${chunks} chunks |`);
}
