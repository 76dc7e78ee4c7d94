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
 * A `bash` command is one curl command (its output may be piped, as to grep) run by bash
 * with the variables of ExampleEnv set from the live service, in a directory of its own
 * that every example shares (a cookie jar, `-c cookies.txt`, lasts from one example to
 * the next); its answer is the status line, the headers when the command prints them
 * (`-i`), then the body.
 *
 * A program is written the way a reader runs it: the file to save it as, the program, one
 * line of prose, then a `sh` block of its `npm install` line (none when it imports only
 * Node's own modules) and, last, the command that runs it; its answer (a `text` block) is
 * what it prints:
 *
 *     <!-- example: openai-chat -->
 *     Save as `openai-chat.mjs`:
 *     ```js
 *     import OpenAI from 'openai';
 *     ...
 *     ```
 *     Install its package and run it:
 *     ```sh
 *     npm install openai@6
 *     node openai-chat.mjs
 *     ```
 *     ```text
 *     answer: tok1 tok2 ...
 *     ```
 *
 * test/docs/programs.ts checks what that says and runs it so, in a folder outside the
 * project. Examples run in document order, one file after the other, against one
 * service: later examples see what earlier ones did.
 *
 * `scripts/docs-examples.ts` writes the answer blocks from a real run; the test
 * (examples.test.ts) runs them again and compares: the same status, header names, JSON
 * keys and value types, event sequence, text lines with ids and numbers left out, and for
 * an error the same `code`, `type` and `param` (values that change from run to run, as
 * ids, timestamps and amounts, are not compared).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface Example {
  name: string;
  file: string;
  /** `bash` (one curl command), or the language of a program (`js`, `ts`). */
  lang: 'bash' | 'js' | 'ts';
  /** The curl command, or the program's source. */
  command: string;
  /** How a reader runs a program (null for a curl command). */
  program: ProgramSteps | null;
  /** The answer block's text as the docs show it (null: none yet). */
  answer: string | null;
  /** Character offsets of the answer block (fences included) in the file, or where one goes. */
  answerStart: number;
  answerEnd: number;
}

/** What the docs tell a reader to do with a program: save it as `file`, run `install`, then `run`. */
export interface ProgramSteps {
  file: string;
  /** The `npm install ...` lines of its `sh` block (none: it imports only Node's modules). */
  install: string[];
  /** The last line of its `sh` block: the command that runs it. */
  run: string;
}

const exampleRe = new RegExp(
  [
    /<!-- example: ([a-z0-9][a-z0-9-]*) -->\n/.source,
    // A curl command, or a program: `Save as`, its block, one line of prose, its sh block.
    /(?:```(bash)\n([\s\S]*?)\n```\n|Save as `([^`\n]+)`:\n```(js|ts)\n([\s\S]*?)\n```\n[^`\n][^\n]*\n```sh\n([\s\S]*?)\n```\n)/.source,
    /(```(?:http|text)\n([\s\S]*?)\n```\n)?/.source,
  ].join(''),
  'g',
);

export function parseExamples(file: string, markdown: string): Example[] {
  const out: Example[] = [];
  for (const m of markdown.matchAll(exampleRe)) {
    const [, name, bash, curl, programFile, programLang, source, steps, answerBlock, answer] = m;
    const end = m.index + m[0].length;
    const lines = steps?.split('\n') ?? [];
    out.push({
      name,
      file,
      lang: (bash ?? programLang) as Example['lang'],
      command: curl ?? source,
      program: programFile === undefined ? null : { file: programFile, install: lines.slice(0, -1), run: lines.at(-1)! },
      answer: answer ?? null,
      answerStart: end - (answerBlock?.length ?? 0),
      answerEnd: end,
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
    out += markdown.slice(at, ex.answerStart) + '```' + (ex.program ? 'text' : 'http') + '\n' + a + '\n```\n';
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
  /** The ids of the last key, member and project an example created (answered 201). */
  KEY_ID: string;
  MEMBER_ID: string;
  NEW_PROJECT_ID: string;
  /** The demo organization, and its owner's password (the dashboard's sign-in). */
  ORGANIZATION_ID: string;
  OWNER_PASSWORD: string;
  /** The `csrf_token` of the last dashboard sign-in an example printed. */
  CSRF_TOKEN: string;
  /** The first invoice of the last invoice list an example printed. */
  INVOICE_ID: string;
  /** The last reconcile job an example started. */
  JOB_ID: string;
  /** A receiver on loopback that answers 204 to any webhook delivery. */
  WEBHOOK_URL: string;
  /** The last webhook endpoint an example created, and the last delivery a test send queued. */
  WEBHOOK_ID: string;
  DELIVERY_ID: string;
}

const statusMarker = '@@docs-status ';
const reasons: Record<number, string> = {
  200: 'OK', 201: 'Created', 202: 'Accepted', 400: 'Bad Request', 401: 'Unauthorized', 402: 'Payment Required', 403: 'Forbidden',
  404: 'Not Found', 409: 'Conflict', 413: 'Payload Too Large', 429: 'Too Many Requests', 500: 'Internal Server Error',
  502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};

/** Headers that change on every run and say nothing about the API: left out of the answers. */
const noise_headers = new Set(['date', 'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'etag', 'x-ratelimit-remaining']);

/** Runs one curl example and returns its answer block's text; `cwd` is the directory it runs in (test/docs/programs.ts runs the programs). */
export async function runCurlExample(ex: Example, env: ExampleEnv, cwd: string): Promise<string> {
  if (ex.program) throw new Error(`example ${ex.name}: a program, run by test/docs/programs.ts`);
  const childEnv = { ...process.env, ...env };
  if ((ex.command.match(/\bcurl\b/g) ?? []).length !== 1) throw new Error(`example ${ex.name}: one curl command per example`);
  // The function prints the status to stderr, whatever options the command uses and
  // wherever its output goes (a pipe to grep).
  const script = `curl() { command curl -w '%{stderr}${statusMarker}%{http_code}\\n' "$@"; }\n${ex.command}`;
  const { stdout, stderr } = await run('bash', ['-c', script], { env: childEnv, cwd, timeout: 60_000, maxBuffer: 16 << 20 });
  const status = [...stderr.matchAll(new RegExp(`${statusMarker}(\\d{3})`, 'g'))].at(-1)?.[1];
  if (status === undefined) throw new Error(`example ${ex.name}: curl printed no status (stderr: ${stderr})`);
  return formatCurl(stdout, Number(status), /(^|\s)-[a-zA-Z]*i/.test(ex.command));
}

/** curl's output as an answer block: status line, the headers (`-i`), the body (JSON pretty-printed). */
function formatCurl(stdout: string, status: number, withHeaders: boolean): string {
  let rest = stdout.replace(/\r\n/g, '\n');
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
function shapeOf(v: unknown): unknown {
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

/** What an error answer says that does not change from run to run: its code, type and param, those of each of `errors`, and the Anthropic envelope's `type`. */
function errorFacts(body: unknown): string | null {
  const e = (body as { error?: unknown } | null)?.error;
  if (typeof e !== 'object' || e === null) return null;
  const err = e as { code?: unknown; type?: unknown; param?: unknown; errors?: { param?: unknown; code?: unknown }[] };
  return JSON.stringify({
    envelope: (body as { type?: unknown }).type ?? null,
    code: err.code ?? null,
    type: err.type ?? null,
    param: err.param ?? null,
    errors: Array.isArray(err.errors) ? err.errors.map((x) => [x.param ?? null, x.code ?? null]) : null,
  });
}

function parseJson(b: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(b) };
  } catch {
    return { ok: false };
  }
}

/** The differences between the documented answer and the live one, in words (empty: none). */
export function compareAnswers(ex: Example, documented: string, live: string): string[] {
  if (ex.program) {
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
  const dj = parseJson(d.body);
  const lj = parseJson(l.body);
  // JSON by its shape, a stream by its events, other text by its lines with ids and numbers left out.
  const bodyShape = (b: string, json: ReturnType<typeof parseJson>) =>
    json.ok ? shapeOf(json.value) : b.includes('data: ') ? sseShape(b) : b.split('\n').map(lineShape);
  const ds = JSON.stringify(bodyShape(d.body, dj));
  const ls = JSON.stringify(bodyShape(l.body, lj));
  if (ds !== ls) problems.push(`body shape differs:\n  docs: ${ds}\n  live: ${ls}`);
  // An error's code is what programs branch on: the docs must show the one the service answers.
  const de = dj.ok ? errorFacts(dj.value) : null;
  const le = lj.ok ? errorFacts(lj.value) : null;
  if (de !== le) problems.push(`error differs:\n  docs: ${de}\n  live: ${le}`);
  return problems;
}

const curl_command = /(?:^|[\s`$(|;&])curl\s+(?:-|\$|https?:\/\/|["'])/;
const sdk_program = /\bfrom\s+['"](?:openai|@anthropic-ai\/sdk)['"]|\brequire\(\s*['"](?:openai|@anthropic-ai\/sdk)['"]|\bnew\s+(?:OpenAI|Anthropic)\s*\(/;
const program_fence = /^```(?:ts|typescript|tsx|js|javascript|mjs)\s*$/;
const save_as = /^Save as `/;
/** A block marked `<!-- fragment -->`: code for this repository's own tests, not a program a reader runs. */
const fragmentRe = /<!-- fragment -->\n```[^\n]*\n[\s\S]*?\n```\n/g;

/**
 * The lines of a Markdown page that hold a curl command or a program outside an
 * executable example (1-based line numbers): a command there would be run by nobody.
 * A program is a fenced `ts`/`js` block, a `Save as` line, or a line importing or
 * constructing an SDK client; a block marked `<!-- fragment -->` is none.
 */
export function commandsOutsideExamples(markdown: string): { line: number; text: string }[] {
  // Blank the examples (command and answer blocks) and fragments, keeping their lines so that numbers stay right.
  const blank = (m: string) => m.replace(/[^\n]/g, '');
  const rest = markdown.replace(exampleRe, blank).replace(fragmentRe, blank);
  const out: { line: number; text: string }[] = [];
  rest.split('\n').forEach((text, i) => {
    if (curl_command.test(text) || sdk_program.test(text) || program_fence.test(text) || save_as.test(text)) out.push({ line: i + 1, text });
  });
  return out;
}
