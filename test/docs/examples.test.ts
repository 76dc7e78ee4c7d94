/**
 * Every example of docs/API.md and docs/GUIDE.md runs against a live service, in document
 * order, and answers what the docs show: the same status, header names, JSON keys and
 * value types, stream events, printed lines (ids, keys, timestamps and amounts may differ).
 * The format and the runner: test/docs/examples.ts; the answers are written by
 * `npx tsx scripts/docs-examples.ts`.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareAnswers, parseExamples, type Example } from './examples.js';
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

  it('compares printed lines with ids and numbers left out', () => {
    const out = 'transaction: gw_Ab-x\ncost: 130 credits = 0.00013 USD';
    expect(compareAnswers(ts, out, 'transaction: gw_Qz_y\ncost: 7 credits = 0.000007 USD')).toEqual([]);
    expect(compareAnswers(ts, out, 'transaction: gw_Ab-x\ncost: 130 credits')).toHaveLength(1);
    expect(compareAnswers(ts, out, out + '\nmore')).toHaveLength(1);
  });
});
