/**
 * Writes the answers of the executable examples in docs/API.md and docs/GUIDE.md from a
 * real run: starts a service as the docs test does (the `npm start` demo on a mock
 * upstream), runs every example in order and replaces each answer block with what it
 * answered. `TEST_DATABASE_URL` names the database, as for the tests:
 *
 *     TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/svc_test npx tsx scripts/docs-examples.ts
 *
 * test/docs/examples.test.ts checks the answers stay true.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { migrate } from '../src/db/migrate.js';
import { parseExamples, writeAnswers } from '../test/docs/examples.js';
import { doc_files, startDocsFixture } from '../test/docs/fixture.js';

const root = resolve(import.meta.dirname, '..');
process.env.TEST_DATABASE_URL ??= 'postgres://postgres@127.0.0.1:5432/svc_test';
// As the tests' global setup does: the database has every migration.
await migrate(process.env.TEST_DATABASE_URL);
const fixture = await startDocsFixture(root);
try {
  for (const file of doc_files) {
    const path = resolve(root, file);
    const markdown = readFileSync(path, 'utf8');
    const examples = parseExamples(file, markdown);
    const answers = new Map<string, string>();
    for (const ex of examples) {
      answers.set(ex.name, await fixture.run(ex));
      process.stdout.write(`${file} ${ex.name}\n`);
    }
    writeFileSync(path, writeAnswers(markdown, examples, answers));
  }
} finally {
  await fixture.close();
}
