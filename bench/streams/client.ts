/**
 * The load generator of `npm run bench:streams`, run as a process of its own (its CPU is
 * then measured apart and does not slow the process that samples memory): opens
 * STREAMS_COUNT streamed chat completions at once against STREAMS_ORIGIN, reads each to its
 * end, and writes what it measured as JSON to STREAMS_RESULT. Each latency counts from the
 * moment all the calls were started to that stream's last byte (the trailers included), so
 * a stream that waited for a connection or for the CPU shows it.
 *
 * Input (environment): STREAMS_ORIGIN, STREAMS_COUNT, STREAMS_HEADERS (JSON: the headers of
 * each call, `{customer}` replaced by one of STREAMS_CUSTOMERS in turn), STREAMS_BODY,
 * STREAMS_CUSTOMERS (JSON array), STREAMS_EVENTS (the events each answer must carry),
 * STREAMS_RESULT (a file path).
 */
import { writeFileSync } from 'node:fs';
import { Agent, request } from 'undici';

export interface ClientResult {
  streams: number;
  completed: number;
  failed: number;
  /** Failures by their first message. */
  failures: Record<string, number>;
  /** Per completed stream, ms from the start to its last byte. */
  latenciesMs: number[];
  /** Per completed stream, ms from the start to its response headers and to its first event. */
  headersMs: number[];
  firstEventMs: number[];
  allDoneMs: number;
  /** Body chunks (socket reads) and SSE events received, all streams together. */
  chunks: number;
  events: number;
  /** Streams whose answer did not carry STREAMS_EVENTS events. */
  shortStreams: number;
  /** Streams whose X-Service-Cost-Credits trailer was a positive number. */
  costTrailers: number;
  cpuS: number;
}

const env = process.env;
const origin = env.STREAMS_ORIGIN!;
const count = Number(env.STREAMS_COUNT ?? 1000);
const headerTemplate = JSON.parse(env.STREAMS_HEADERS ?? '{}') as Record<string, string>;
const customers = JSON.parse(env.STREAMS_CUSTOMERS ?? '["none"]') as string[];
const body = env.STREAMS_BODY!;
const expectedEvents = Number(env.STREAMS_EVENTS ?? 0);
const LF2 = Buffer.from('\n\n');

// One connection per stream, opened when the stream starts, as 1,000 separate clients would.
const agent = new Agent({ connections: count, pipelining: 1, keepAliveTimeout: 5_000 });
const result: ClientResult = {
  streams: count,
  completed: 0,
  failed: 0,
  failures: {},
  latenciesMs: [],
  headersMs: [],
  firstEventMs: [],
  allDoneMs: 0,
  chunks: 0,
  events: 0,
  shortStreams: 0,
  costTrailers: 0,
  cpuS: 0,
};

async function one(i: number, start: number): Promise<void> {
  const customer = customers[i % customers.length]!;
  const headers = Object.fromEntries(Object.entries(headerTemplate).map(([k, v]) => [k, v.replace('{customer}', customer)]));
  try {
    const res = await request(`${origin}/v1/chat/completions`, { method: 'POST', headers, body, dispatcher: agent, headersTimeout: 60_000, bodyTimeout: 60_000 });
    const headersAt = performance.now() - start;
    let firstAt = 0;
    let events = 0;
    for await (const chunk of res.body) {
      if (firstAt === 0) firstAt = performance.now() - start;
      result.chunks++;
      // Counting blank lines is enough: every event of the mock ends with one.
      const buf = chunk as Buffer;
      for (let at = buf.indexOf(LF2); at >= 0; at = buf.indexOf(LF2, at + 2)) events++;
    }
    const doneMs = performance.now() - start;
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
    result.events += events;
    if (events !== expectedEvents) result.shortStreams++;
    if (Number(res.trailers['x-service-cost-credits']) > 0) result.costTrailers++;
    result.latenciesMs.push(doneMs);
    result.headersMs.push(headersAt);
    result.firstEventMs.push(firstAt);
    result.completed++;
  } catch (err) {
    result.failed++;
    const why = (err as Error).message.slice(0, 80);
    result.failures[why] = (result.failures[why] ?? 0) + 1;
  }
}

const cpu0 = process.cpuUsage();
const start = performance.now();
await Promise.all(Array.from({ length: count }, (_, i) => one(i, start)));
result.allDoneMs = performance.now() - start;
const cpu = process.cpuUsage(cpu0);
result.cpuS = (cpu.user + cpu.system) / 1e6;
writeFileSync(env.STREAMS_RESULT!, JSON.stringify(result));
await agent.close();
