/**
 * The repository root, where the files read at runtime live (lua/, migrations/, assets/). The code
 * runs from src/ (tsx: the tests, `npm run dev`) or compiled from dist/src/ (`npm run
 * build`, which emits only JavaScript), one directory deeper, so the root is found as the
 * nearest directory above this file that holds package.json rather than by a fixed `..`.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

function rootAbove(dir: string): string {
  if (existsSync(join(dir, 'package.json'))) return dir;
  const parent = dirname(dir);
  if (parent === dir) throw new Error(`no package.json above ${fileURLToPath(import.meta.url)}`);
  return rootAbove(parent);
}

export const projectRoot = rootAbove(dirname(fileURLToPath(import.meta.url)));
