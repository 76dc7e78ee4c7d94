/**
 * README.md's "Configuration" table against src/config/index.ts: every variable the
 * configuration reads has a row, with the default the configuration applies when the
 * variable is unset (the first `code` of its default cell, or "unset" for none), and
 * every other row names a variable that a script or the service still reads. The table
 * is the one list of the settings: docs/OPERATIONS.md links to it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { config_variables, loadConfig } from '../../src/config/index.js';

const root = resolve(import.meta.dirname, '../..');

/** The rows of README.md's Configuration table: variable -> default cell. */
function configurationTable(): Map<string, string> {
  const readme = readFileSync(resolve(root, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Configuration\n');
  expect(start, 'README.md has a "Configuration" section').toBeGreaterThan(0);
  const next = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, next === -1 ? undefined : next);
  const rows = new Map<string, string>();
  for (const m of section.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \| ([^|]*) \|/gm)) {
    expect(rows.has(m[1]), `${m[1]} has one row`).toBe(false);
    rows.set(m[1], m[2].trim());
  }
  return rows;
}

/** How the default cell must begin for a parsed default value. */
function expectedDefault(value: unknown): string[] {
  if (value === undefined) return ['unset'];
  // A boolean off by default is written 0 (TRUST_PROXY's false is its unset).
  if (value === false) return ['`0`', 'unset'];
  if (value === true) return ['`1`'];
  if (Array.isArray(value)) return [`\`${value.join(',')}\``];
  return [`\`${String(value)}\``];
}

function sourceText(dir: string): string {
  return readdirSync(resolve(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.(ts|mjs|sh)$/.test(f))
    .map((f) => readFileSync(join(root, dir, f), 'utf8'))
    .join('\n');
}

describe("README.md's configuration table", () => {
  const table = configurationTable();

  it('has a row for every variable src/config reads', () => {
    const missing = config_variables.filter((name) => !table.has(name));
    expect(missing, 'variables read in src/config/index.ts without a row in README.md, "Configuration"').toEqual([]);
  });

  it("gives each variable the default the configuration applies", () => {
    const defaults = loadConfig({}) as Record<string, unknown>;
    const wrong = config_variables
      .filter((name) => table.has(name))
      .filter((name) => !expectedDefault(defaults[name]).some((start) => table.get(name)!.startsWith(start)))
      .map((name) => `${name}: the table says ${table.get(name)}, the default is ${expectedDefault(defaults[name]).join(' or ')}`);
    expect(wrong).toEqual([]);
  });

  it('names no variable that nothing reads any more', () => {
    const sources = ['src', 'scripts', 'workers', 'test'].map(sourceText).join('\n');
    const stale = [...table.keys()].filter((name) => !(config_variables as string[]).includes(name) && !new RegExp(`\\b${name}\\b`).test(sources));
    expect(stale).toEqual([]);
  });
});
