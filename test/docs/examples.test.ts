/**
 * Every example of docs/API.md and docs/GUIDE.md runs against a live service, in document
 * order, and answers what the docs show: the same status, header names, JSON keys and
 * value types, stream events, printed lines (ids, keys, timestamps and amounts may differ),
 * and for an error the same code, type and param. No curl command or program of the docs
 * (README.md and docs/*.md) sits outside an example, where nothing would run it.
 *
 * A program runs as a reader runs it. Its example says, in the Markdown, the file to save
 * it as (a line "Save as `name.mjs`:"), then the program, then a `sh` block: its
 * `npm install name@MAJOR ...` line and, last, the command that runs it (`node name.mjs`).
 * The test reads the three from the doc's text; the install line must name exactly the
 * packages the program imports, at the major version this project installs, and the
 * command the saved file. It saves each program in one fresh folder under the OS's
 * temporary directory, outside the project (no node_modules of the project can be found),
 * where one `npm install` of every program's packages ran, and runs the doc's command
 * there with only BASE_URL and API_KEY added. A wrong file name, extension, package or
 * command fails. The format and the runners: test/docs/examples.ts, test/docs/programs.ts;
 * the answers are written by `npx tsx scripts/docs-examples.ts`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandsOutsideExamples, compareAnswers, parseExamples, writeAnswers, type Example } from './examples.js';
import { doc_files, startDocsFixture, type DocsFixture } from './fixture.js';
import { importedPackages, programProblems } from './programs.js';

const root = resolve(import.meta.dirname, '../..');
let fixture: DocsFixture;

beforeAll(async () => {
  fixture = await startDocsFixture(root);
});
afterAll(async () => {
  await fixture?.close();
});

describe.sequential.each(doc_files)('%s', (file) => {
  const examples = parseExamples(file, readFileSync(resolve(root, file), 'utf8'));

  it('writes each answer back where it was (scripts/docs-examples.ts)', () => {
    const markdown = readFileSync(resolve(root, file), 'utf8');
    expect(writeAnswers(markdown, examples, new Map(examples.map((e) => [e.name, e.answer ?? ''])))).toBe(markdown);
  });

  it('has examples, each with a unique name and an answer', () => {
    expect(examples.length).toBeGreaterThan(0);
    // A marker the parser does not take (another block language, a missing command) would be skipped silently.
    // (A marker is a line of its own; prose that shows the format quotes it mid-line.)
    expect(examples.length).toBe((readFileSync(resolve(root, file), 'utf8').match(/^<!-- example: /gm) ?? []).length);
    expect(new Set(examples.map((e) => e.name)).size).toBe(examples.length);
    expect(examples.filter((e) => e.answer === null).map((e) => e.name)).toEqual([]);
  });

  it('holds every curl command and program in an executable example', () => {
    const stray = commandsOutsideExamples(readFileSync(resolve(root, file), 'utf8')).map((c) => `${file}:${c.line} ${c.text}`);
    expect(stray, 'make each an example (<!-- example: a-name --> and a bash or ts block), see test/docs/examples.ts').toEqual([]);
  });

  it('says of each program its file, what to install and the command that runs it', () => {
    expect(examples.flatMap((ex) => programProblems(ex, root))).toEqual([]);
    const files = examples.flatMap((ex) => (ex.program ? [ex.program.file] : []));
    expect(new Set(files).size, 'each program of a page is saved under a name of its own').toBe(files.length);
  });

  for (const ex of examples) {
    it(`example ${ex.name}`, { timeout: 90_000 }, async () => {
      const live = await fixture.run(ex);
      expect(compareAnswers(ex, ex.answer ?? '', live)).toEqual([]);
    });
  }
});

// The other pages run no example: a curl command or program there would be run by nobody.
const other_docs = ['README.md', ...readdirSync(resolve(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)].filter(
  (f) => !doc_files.includes(f),
);
it.each(other_docs)('%s holds no curl command, program or example (they run in docs/API.md and docs/GUIDE.md)', (file) => {
  const markdown = readFileSync(resolve(root, file), 'utf8');
  expect(commandsOutsideExamples(markdown).map((c) => `${file}:${c.line} ${c.text}`)).toEqual([]);
  expect(parseExamples(file, markdown).map((e) => e.name)).toEqual([]);
});

describe('compareAnswers', () => {
  const curl: Example = { name: 'x', file: 'x.md', lang: 'bash', command: 'curl -si', program: null, answer: null, answerStart: 0, answerEnd: 0 };
  const ts: Example = { ...curl, lang: 'js', command: '', program: { file: 'x.mjs', install: [], run: 'node x.mjs' } };
  const doc = 'HTTP/1.1 200 OK\nX-Service-Cost-Credits: 130\n\n{\n  "id": "gw_a1",\n  "amount": 5,\n  "tags": ["a"]\n}';

  it('accepts another answer of the same shape', () => {
    expect(compareAnswers(curl, doc, doc.replace('gw_a1', 'gw_zz9').replace('5', '6000'))).toEqual([]);
  });

  it('reports another status, a missing header, a renamed field, another type', () => {
    expect(compareAnswers(curl, doc, doc.replace('200 OK', '400 Bad Request'))).toHaveLength(1);
    expect(compareAnswers(curl, doc, doc.replace('X-Service-Cost-Credits: 130\n', ''))).toEqual([
      'header x-service-cost-credits shown in the docs, missing live',
    ]);
    expect(compareAnswers(curl, doc, doc.replace('"amount"', '"amount_credits"'))).toHaveLength(1);
    expect(compareAnswers(curl, doc, doc.replace('5,', '"5",'))).toHaveLength(1);
    expect(compareAnswers(curl, doc, doc.replace('["a"]', '[]'))).toHaveLength(1);
  });

  it('compares streams by their events and trailers', () => {
    const stream = 'HTTP/1.1 200 OK\n\nevent: a\ndata: {"n": 1}\n\ndata: [DONE]\n\nX-Service-Cost-Credits: 1';
    expect(compareAnswers(curl, stream, stream.replace('"n": 1', '"n": 2'))).toEqual([]);
    expect(compareAnswers(curl, stream, stream.replace('event: a', 'event: b'))).toHaveLength(1);
    expect(compareAnswers(curl, stream, stream.replace('\n\nX-Service-Cost-Credits: 1', ''))).toEqual([
      'trailer x-service-cost-credits shown in the docs, missing live',
    ]);
  });

  it('reports another error code, type or param, and compares no message', () => {
    const err = (code: string, param: string) =>
      `HTTP/1.1 400 Bad Request\n\n${JSON.stringify({ error: { message: `m ${code}`, type: 'bad_request', code, param, errors: [{ param, code, message: 'x' }] } }, null, 2)}`;
    const doc = err('invalid_amount', 'amount');
    expect(compareAnswers(curl, doc, err('invalid_amount', 'amount').replace('"x"', '"another message"'))).toEqual([]);
    expect(compareAnswers(curl, doc, err('invalid_request', 'amount'))).toEqual([expect.stringMatching(/^error differs/)]);
    expect(compareAnswers(curl, doc, err('invalid_amount', 'amount_usd'))).toEqual([expect.stringMatching(/^error differs/)]);
    expect(compareAnswers(curl, doc, doc.replace('"type": "bad_request"', '"type": "conflict"'))).toEqual([expect.stringMatching(/^error differs/)]);
    // The Anthropic envelope's top-level type.
    const anthropic = doc.replace('{\n  "error"', '{\n  "type": "error",\n  "error"');
    expect(compareAnswers(curl, anthropic, doc)).toContainEqual(expect.stringMatching(/^error differs/));
  });

  it('compares a text body by its lines with numbers left out', () => {
    const text = 'HTTP/1.1 200 OK\n\n# TYPE svc_x counter\nsvc_x{model="demo-gpt"} 430';
    expect(compareAnswers(curl, text, text.replace('430', '7'))).toEqual([]);
    expect(compareAnswers(curl, text, text.replace('demo-gpt', 'demo-claude'))).toHaveLength(1);
    expect(compareAnswers(curl, text, `${text}\nsvc_x{model="demo-claude"} 1`)).toHaveLength(1);
  });

  it('compares printed lines with ids and numbers left out', () => {
    const out = 'transaction: gw_Ab-x\ncost: 130 credits = 0.00013 USD';
    expect(compareAnswers(ts, out, 'transaction: gw_Qz_y\ncost: 7 credits = 0.000007 USD')).toEqual([]);
    expect(compareAnswers(ts, out, 'transaction: gw_Ab-x\ncost: 130 credits')).toHaveLength(1);
    expect(compareAnswers(ts, out, out + '\nmore')).toHaveLength(1);
  });
});

describe('commandsOutsideExamples', () => {
  it('finds curl commands and programs outside examples, and not inside them or in prose', () => {
    const md = [
      '# Page',
      'curl prints the trailers; one curl command per example.',
      '<!-- example: a -->',
      '```bash',
      'curl -s $BASE_URL/health',
      '```',
      '```http',
      'HTTP/1.1 200 OK',
      '```',
      '```',
      'curl -s $API/v1/billing/deduct',
      '```',
      'Or `curl https://example.com` inline.',
      '```ts',
      "import OpenAI from 'openai';",
      '```',
    ].join('\n');
    expect(commandsOutsideExamples(md).map((c) => c.line)).toEqual([11, 13, 14, 15]);
  });
});

describe('programs', () => {
  const md = (steps: string) =>
    ['<!-- example: p -->', 'Save as `p.mjs`:', '```js', "import OpenAI from 'openai';", "import http from 'node:http';", '```', 'Run it:', '```sh', steps, '```', '```text', 'out', '```', ''].join('\n');

  it('reads the file, the install line and the run command from the page', () => {
    const [ex] = parseExamples('x.md', md('npm install openai@6\nnode p.mjs'));
    expect(ex.program).toEqual({ file: 'p.mjs', install: ['npm install openai@6'], run: 'node p.mjs' });
    expect(ex.command).toBe("import OpenAI from 'openai';\nimport http from 'node:http';");
    expect(ex.answer).toBe('out');
  });

  it('takes no program without its file name or its sh block', () => {
    expect(parseExamples('x.md', md('node p.mjs').replace('Save as `p.mjs`:\n', ''))).toEqual([]);
    expect(parseExamples('x.md', md('node p.mjs').replace('```sh', '```'))).toEqual([]);
  });

  it("reports an install line that is not the program's packages at the tested major, and a command that does not name the file", () => {
    const problems = (steps: string) => programProblems(parseExamples('x.md', md(steps))[0], root);
    expect(problems('npm install openai@6\nnode p.mjs')).toEqual([]);
    expect(problems('node p.mjs')).toEqual([expect.stringMatching(/imports \[openai\] but its install line installs \[\]/)]);
    expect(problems('npm install openai@5\nnode p.mjs')).toEqual([expect.stringMatching(/installs openai@5; the project tests openai 6\./)]);
    expect(problems('npm install openai\nnode p.mjs')).toContainEqual(expect.stringMatching(/"openai": a package is installed as name@MAJOR/));
    expect(problems('npm i openai@6\nnode p.mjs')).toContainEqual(expect.stringMatching(/each line before the run command/));
    expect(problems('npm install openai@6 left-pad@1\nnode p.mjs')).toHaveLength(2);
    expect(problems('npm install openai@6\nnode p.ts')).toEqual([expect.stringMatching(/does not name the file it is saved as, p\.mjs/)]);
  });

  it('finds the packages a program imports', () => {
    const source = "import OpenAI from 'openai';\nimport { Webhook } from 'standardwebhooks';\nimport {\n  a,\n} from '@anthropic-ai/sdk/streaming';\nimport fs from 'fs';\nimport './local.mjs';\nconst x = await import('pg');";
    expect(importedPackages(source)).toEqual(['@anthropic-ai/sdk', 'openai', 'pg', 'standardwebhooks']);
  });

  it('counts a Save as line outside an example as a stray program, and skips a fragment', () => {
    expect(commandsOutsideExamples('Save as `x.mjs`:\n').map((c) => c.line)).toEqual([1]);
    expect(commandsOutsideExamples("<!-- fragment -->\n```ts\nnew OpenAI({ baseURL: mock.url });\n```\n")).toEqual([]);
  });
});
