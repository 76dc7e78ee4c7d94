/**
 * References into the docs resolve. Two kinds:
 *
 * - Markdown links to a .md file, with or without an anchor (`[text](OPERATIONS.md#metrics)`,
 *   `(#metrics)`), in any file under docs/ and in README.md: the file exists, and has a
 *   heading whose GitHub anchor is the anchor.
 * - Section names quoted after docs/ARCHITECTURE.md or docs/PERFORMANCE.md in code
 *   comments, tests, scripts, benches and the other docs: `docs/ARCHITECTURE.md, "When a
 *   store fails"`, `docs/ARCHITECTURE.md ("Sources")`, `docs/ARCHITECTURE.md, Gateway`,
 *   across comment line breaks: a heading of that file starts with the name.
 *
 * docs/history/ is left out of the second kind: it keeps the earlier texts as they were,
 * with the section names of their day.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const mapped_docs = ['ARCHITECTURE.md', 'PERFORMANCE.md'];
const source_dirs = ['src', 'test', 'workers', 'scripts', 'bench', 'lua', 'docs'];
const source_files = ['README.md', '.dependency-cruiser.cjs'];
const source_ext = /\.(ts|cjs|mjs|js|lua|sh|sql|md)$/;

function filesUnder(dir: string): string[] {
  return readdirSync(resolve(root, dir), { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => source_ext.test(f) && !f.includes('node_modules'));
}

/** The headings of a Markdown file, outside fenced code, without their `#`s. */
function headings(file: string): string[] {
  const out: string[] = [];
  let fenced = false;
  for (const line of readFileSync(resolve(root, file), 'utf8').split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = /^#{1,6} (.+)$/.exec(line);
    if (!fenced && m) out.push(m[1]!.trim());
  }
  return out;
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
function anchorOf(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

describe('docs references', () => {
  it('every Markdown link to a .md file finds it, and its anchor a heading there', () => {
    const broken: string[] = [];
    const docs = [...filesUnder('docs').filter((f) => f.endsWith('.md')), 'README.md'];
    for (const file of docs) {
      const text = readFileSync(resolve(root, file), 'utf8');
      for (const m of text.matchAll(/\]\(([^)\s#]*)(?:#([^)\s]+))?\)/g)) {
        const [link, path, anchor] = m;
        if (path && !path.endsWith('.md')) continue;
        if (!path && anchor === undefined) continue;
        const target = path ? relative(root, resolve(root, file, '..', path)) : file;
        if (!existsSync(resolve(root, target))) broken.push(`${file}: ${link} (no such file)`);
        else if (anchor !== undefined && !headings(target).map(anchorOf).includes(anchor)) broken.push(`${file}: ${link}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('every section name quoted after ARCHITECTURE.md or PERFORMANCE.md is a heading there', () => {
    const sections = new Map(mapped_docs.map((d) => [d, headings(join('docs', d))]));
    const sources = [...source_dirs.flatMap(filesUnder), ...source_files].filter(
      (f) => !f.startsWith('docs/history/') && f !== relative(root, import.meta.filename),
    );
    const broken: string[] = [];
    let checked = 0;
    for (const file of sources) {
      const text = readFileSync(resolve(root, file), 'utf8');
      for (const m of text.matchAll(/(ARCHITECTURE|PERFORMANCE)\.md/g)) {
        // The text after the file name, with comment markers and line breaks folded away.
        const after = text
          .slice(m.index + m[0].length, m.index + m[0].length + 160)
          .replace(/\n\s*(\*|\/\/|--)?\s*/g, ' ');
        const name = /^,? ?\(?"([^"]+)"/.exec(after)?.[1] ?? /^, ([A-Z][a-z]+)[,).]/.exec(after)?.[1];
        if (name === undefined) continue;
        checked++;
        if (!sections.get(`${m[1]}.md`)!.some((h) => h.startsWith(name))) broken.push(`${file}: ${m[0]} "${name}"`);
      }
    }
    expect(broken).toEqual([]);
    expect(checked).toBeGreaterThan(10);
  });
});
