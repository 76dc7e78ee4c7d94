/**
 * Every example of docs/API.md and docs/GUIDE.md runs against a live service, in document
 * order, and answers what the docs show: the same status, header names, JSON keys and
 * value types, stream events, printed lines (ids, keys, timestamps and amounts may differ).
 * The format and the runner: test/docs/examples.ts; the answers are written by
 * `npx tsx scripts/docs-examples.ts`.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareAnswers, parseExamples } from './examples.js';
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
