/**
 * The executable examples of docs/API.md and docs/GUIDE.md: parsing them, running them
 * against a live service, and comparing what they answer with what the docs show.
 *
 * An example in the Markdown is an HTML comment naming it, then a fenced command block,
 * then a fenced answer block:
 *
 *     <!-- example: deposit -->
 *     ```bash
 *     curl -s $BASE_URL/v1/customers/deposit -H "Authorization: Bearer $API_KEY" ...
 *     ```
 *     ```http
 *     HTTP/1.1 200 OK
 *
 *     {"customer_id": "alice", ...}
 *     ```
 *
 * A `bash` command is one curl command run by bash with $BASE_URL, $API_KEY (project
 * key), $ADMIN_KEY, $CUSTOMER_KEY, $PROJECT_ID, $MOCK_URL and the ids of ExampleEnv set
 * from the live service; its answer is
 * the status line, the headers when the command prints them (`-i`), then the body. A `ts`
 * command is a complete TypeScript program run with tsx, with the same environment; its
 * answer (a `text` block) is what it prints. Examples run in document order, one file
 * after the other, against one service: later examples see what earlier ones did.
 *
 * `scripts/docs-examples.ts` writes the answer blocks from a real run; the test
 * (examples.test.ts) runs them again and compares shapes: the same status, JSON keys and
 * value types, header names, event sequence, and printed lines with ids and numbers left out.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface Example {
  name: string;
  file: string;
  /** `bash` (one curl command) or `ts` (a program). */
  lang: 'bash' | 'ts';
  command: string;
  /** The answer block's text as the docs show it (null: none yet). */
  answer: string | null;
  /** Character offsets of the answer block (fences included) in the file, or where one goes. */
  answerStart: number;
  answerEnd: number;
}

const exampleRe = /<!-- example: ([a-z0-9][a-z0-9-]*) -->\n```(bash|ts)\n([\s\S]*?)\n```\n(?:```(?:http|text)\n([\s\S]*?)\n```\n)?/g;

export function parseExamples(file: string, markdown: string): Example[] {
  const out: Example[] = [];
  for (const m of markdown.matchAll(exampleRe)) {
    const commandEnd = m.index + m[0].indexOf('\n```\n', m[0].indexOf('```' + m[2])) + 5;
    out.push({
      name: m[1],
      file,
      lang: m[2] as 'bash' | 'ts',
      command: m[3],
      answer: m[4] ?? null,
      answerStart: commandEnd,
      answerEnd: m.index + m[0].length,
    });
  }
  return out;
}

/** Replaces each example's answer block with `answers[name]`. */
export function writeAnswers(markdown: string, examples: Example[], answers: Map<string, string>): string {
  let out = '';
  let at = 0;
  for (const ex of examples) {
    const a = answers.get(ex.name);
    if (a === undefined) continue;
    out += markdown.slice(at, ex.answerStart) + '```' + (ex.lang === 'bash' ? 'http' : 'text') + '\n' + a + '\n```\n';
    at = ex.answerEnd;
  }
  return out + markdown.slice(at);
}

export interface ExampleEnv {
  BASE_URL: string;
  API_KEY: string;
  ADMIN_KEY: string;
  CUSTOMER_KEY: string;
  PROJECT_ID: string;
  /** The mock upstream's address, as npm start's `http://127.0.0.1:4010/v1`. */
  MOCK_URL: string;
  /** The `X-Service-Transaction-Id` of the last gateway call an example printed. */
  TRANSACTION_ID: string;
  /** The ids of the last key and member an example created (answered 201). */
  KEY_ID: string;
  MEMBER_ID: string;
}

const statusMarker = '@@docs-status ';
const reasons: Record<number, string> = {
  200: 'OK', 201: 'Created', 202: 'Accepted', 400: 'Bad Request', 401: 'Unauthorized', 402: 'Payment Required', 403: 'Forbidden',
  404: 'Not Found', 409: 'Conflict', 413: 'Payload Too Large', 429: 'Too Many Requests', 500: 'Internal Server Error',
  502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};

/** Headers that change on every run and say nothing about the API: left out of the answers. */
const noise_headers = new Set(['date', 'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'etag', 'x-ratelimit-remaining']);

/** Runs one example and returns its answer block's text. */
export async function runExample(ex: Example, env: ExampleEnv, repoRoot: string): Promise<string> {
  const childEnv = { ...process.env, ...env };
  if (ex.lang === 'ts') {
    const dir = mkdtempSync(join(repoRoot, '.docs-example-'));
    try {
      const path = join(dir, `${ex.name}.ts`);
      writeFileSync(path, ex.command);
      const { stdout } = await run(join(repoRoot, 'node_modules/.bin/tsx'), [path], { env: childEnv, cwd: repoRoot, timeout: 60_000 });
      return stdout.replace(/\n+$/, '');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  if ((ex.command.match(/\bcurl\b/g) ?? []).length !== 1) throw new Error(`example ${ex.name}: one curl command per example`);
  // The function prints the status after the answer, whatever options the command uses.
  const script = `curl() { command curl -w '\\n${statusMarker}%{http_code}\\n' "$@"; }\n${ex.command}`;
  const { stdout } = await run('bash', ['-c', script], { env: childEnv, timeout: 60_000, maxBuffer: 16 << 20 });
  return formatCurl(stdout, /(^|\s)-[a-zA-Z]*i/.test(ex.command));
}

/** curl's output as an answer block: status line, the headers (`-i`), the body (JSON pretty-printed). */
function formatCurl(stdout: string, withHeaders: boolean): string {
  const at = stdout.lastIndexOf(`\n${statusMarker}`);
  const status = Number(stdout.slice(at + 1 + statusMarker.length).trim());
  let rest = stdout.slice(0, at).replace(/\r\n/g, '\n');
  const lines = [`HTTP/1.1 ${status} ${reasons[status] ?? ''}`.trimEnd()];
  if (withHeaders) {
    const end = rest.indexOf('\n\n');
    const head = rest.slice(0, end).split('\n').slice(1);
    rest = rest.slice(end + 2);
    // Trailers come after the body, as curl prints them: header lines at its end.
    const bodyLines = rest.trimEnd().split('\n');
    let k = bodyLines.length;
    while (k > 0 && /^[A-Za-z][A-Za-z0-9-]*: /.test(bodyLines[k - 1])) k--;
    const trailers = k < bodyLines.length && !rest.trimStart().startsWith('{') ? bodyLines.slice(k) : [];
    if (trailers.length) rest = bodyLines.slice(0, k).join('\n');
    for (const h of head) if (!noise_headers.has(h.slice(0, h.indexOf(':')).toLowerCase())) lines.push(h);
    lines.push('', formatBody(rest));
    if (trailers.length) lines.push('', ...trailers);
    return lines.join('\n').replace(/\n+$/, '');
  }
  lines.push('', formatBody(rest));
  return lines.join('\n').replace(/\n+$/, '');
}

function formatBody(body: string): string {
  const t = body.trim();
  if (t.startsWith('{') || t.startsWith('[')) {
    try {
      return JSON.stringify(JSON.parse(t), null, 2);
    } catch {
      // not JSON after all
    }
  }
  return t;
}

// ---------------------------------------------------------------------------
// Comparing an answer with the one the docs show
// ---------------------------------------------------------------------------

interface ParsedAnswer {
  status: string;
  headers: string[];
  body: string;
  trailers: string[];
}

function parseAnswer(a: string): ParsedAnswer {
  const blocks = a.split(/\n\n/);
  const head = blocks[0].split('\n');
  const status = head[0];
  const headers = head.slice(1).map((h) => h.slice(0, h.indexOf(':')).toLowerCase());
  let rest = blocks.slice(1);
  let trailers: string[] = [];
  const last = rest.at(-1) ?? '';
  if (rest.length > 1 && last.split('\n').every((l) => /^X-Service-[A-Za-z-]+: /i.test(l))) {
    trailers = last.split('\n').map((l) => l.slice(0, l.indexOf(':')).toLowerCase());
    rest = rest.slice(0, -1);
  }
  return { status, headers, body: rest.join('\n\n'), trailers };
}

/** A value's shape: keys and types, recursively; arrays by their elements. */
export function shapeOf(v: unknown): unknown {
  if (v === null) return 'null';
  if (Array.isArray(v)) return v.map(shapeOf);
  if (typeof v === 'object') {
    return Object.fromEntries(Object.keys(v as object).sort().map((k) => [k, shapeOf((v as Record<string, unknown>)[k])]));
  }
  return typeof v;
}

/** An SSE body's shape: each event's name and its data's shape. */
function sseShape(body: string): unknown[] {
  return body
    .split(/\n\n+/)
    .filter((e) => e.trim())
    .map((e) => {
      const event = /^event: (.*)$/m.exec(e)?.[1] ?? null;
      const data = /^data: (.*)$/m.exec(e)?.[1] ?? '';
      let parsed: unknown = data;
      try {
        parsed = shapeOf(JSON.parse(data));
      } catch {
        // [DONE]
      }
      return { event, data: parsed };
    });
}

/** A printed line with what changes from run to run (ids, numbers) left out. */
function lineShape(line: string): string {
  return line.replace(/\b(?:gw|chatcmpl|msg|cus|proj|org|key|mem|inv)[_-][A-Za-z0-9_-]*|[A-Za-z0-9_.-]*\d[A-Za-z0-9_.-]*/g, '#');
}

/** The differences between the documented answer and the live one, in words (empty: none). */
export function compareAnswers(ex: Example, documented: string, live: string): string[] {
  if (ex.lang === 'ts') {
    const d = documented.split('\n').map(lineShape);
    const l = live.split('\n').map(lineShape);
    return JSON.stringify(d) === JSON.stringify(l) ? [] : [`printed lines differ:\n  docs: ${d.join(' | ')}\n  live: ${l.join(' | ')}`];
  }
  const d = parseAnswer(documented);
  const l = parseAnswer(live);
  const problems: string[] = [];
  if (d.status !== l.status) problems.push(`status: docs ${d.status}, live ${l.status}`);
  for (const h of d.headers) if (!l.headers.includes(h)) problems.push(`header ${h} shown in the docs, missing live`);
  for (const h of d.trailers) if (!l.trailers.includes(h)) problems.push(`trailer ${h} shown in the docs, missing live`);
  const bodyShape = (b: string) => {
    try {
      return shapeOf(JSON.parse(b));
    } catch {
      return b.includes('data: ') ? sseShape(b) : b;
    }
  };
  const ds = JSON.stringify(bodyShape(d.body));
  const ls = JSON.stringify(bodyShape(l.body));
  if (ds !== ls) problems.push(`body shape differs:\n  docs: ${ds}\n  live: ${ls}`);
  return problems;
}
