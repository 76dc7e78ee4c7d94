/**
 * Every example of docs/API.md and docs/GUIDE.md runs against a live service, in document
 * order, and answers what the docs show: the same status, header names, JSON keys and
 * value types, stream events, printed lines (ids, keys, timestamps and amounts may differ),
 * and for an error the same code, type and param. No curl command or program of the docs
 * sits outside an example, where nothing would run it. The format and the runner:
 * test/docs/examples.ts; the answers are written by `npx tsx scripts/docs-examples.ts`.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandsOutsideExamples, compareAnswers, parseExamples, type Example } from './examples.js';
import { doc_files, startDocsFixture, type DocsFixture } from './fixture.js';

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

  for (const ex of examples) {
    it(`example ${ex.name}`, { timeout: 90_000 }, async () => {
      const live = await fixture.run(ex);
      expect(compareAnswers(ex, ex.answer ?? '', live)).toEqual([]);
    });
  }
});

// tsx runs the programs without checking their types; tsc checks them, strictly, as a reader's project would.
it('the TypeScript programs of the docs type-check', { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(root, '.docs-example-'));
  try {
    const files: string[] = [];
    for (const file of doc_files) {
      for (const ex of parseExamples(file, readFileSync(resolve(root, file), 'utf8'))) {
        if (ex.lang !== 'ts') continue;
        files.push(join(dir, `${ex.name}.ts`));
        writeFileSync(files.at(-1)!, ex.command);
      }
    }
    expect(files.length).toBeGreaterThan(0);
    const tsc = join(root, 'node_modules/.bin/tsc');
    const args = ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', ...files];
    const result = await promisify(execFile)(tsc, args, { cwd: root }).then(
      () => '',
      (err: { stdout?: string }) => err.stdout ?? String(err),
    );
    expect(result).toBe('');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

describe('compareAnswers', () => {
  const curl: Example = { name: 'x', file: 'x.md', lang: 'bash', command: 'curl -si', answer: null, answerStart: 0, answerEnd: 0 };
  const ts: Example = { ...curl, lang: 'ts', command: '' };
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
