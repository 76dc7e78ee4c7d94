/**
 * The whole project type-checks (tsconfig.json: src, workers, test, bench). Vitest runs
 * TypeScript without checking types, so without this a type error would pass the suite.
 */
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

describe('the project', () => {
  it('type-checks with tsc --noEmit', async () => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await promisify(execFile)(process.execPath, [tsc, '--noEmit', '-p', root], { cwd: root }).then(
      () => '',
      (err: { stdout?: string; message: string }) => err.stdout || err.message,
    );
    expect(result).toBe('');
  }, 120_000);
});
