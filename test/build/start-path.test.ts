/**
 * The compiled start path, without a build of the service: scripts/build-if-stale.mjs
 * decides on small projects of its own (given as its argument) whose `npm run build` only
 * counts its runs and writes dist/.built; the Procfile's processes and `npm start` run
 * the build with `node`, never tsx, which is a devDependency only. compiled.test.ts runs
 * the real build.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const script = join(root, 'scripts', 'build-if-stale.mjs');
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** Seconds since the epoch, well in the past: the time every input starts with. */
const t0 = Math.floor(Date.now() / 1000) - 1_000;

/** Sets the modification time of a file or directory (seconds). */
function touch(path: string, seconds: number): void {
  utimesSync(path, seconds, seconds);
}

/** A project with the inputs build-if-stale walks, all of them at t0, and a build that logs its runs. */
function project(build = 'mkdir -p dist && touch dist/.built'): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-build-if-stale-'));
  made.push(dir);
  const files = ['src/main.ts', 'src/nested/a.ts', 'src/nested/b.ts', 'workers/main.ts', 'tsconfig.json', 'tsconfig.build.json'];
  for (const f of files) {
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    writeFileSync(join(dir, f), '{}\n');
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ private: true, scripts: { build: `echo run >> builds.log && ${build}` } }));
  for (const p of [...files, 'src/nested', 'src', 'workers']) touch(join(dir, p), t0);
  return dir;
}

/** Builds the project's dist/ had so far. */
function builds(dir: string): number {
  return existsSync(join(dir, 'builds.log')) ? readFileSync(join(dir, 'builds.log'), 'utf8').split('\n').filter(Boolean).length : 0;
}

/** Runs build-if-stale on `dir`: its exit code and the first line it said (npm's banner of the build follows it). */
function run(dir: string): Promise<{ code: number; said: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [script, dir], { cwd: dir }, (err, _stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, said: stderr.split('\n')[0]!, stderr });
    });
  });
}

const fresh = { code: 0, said: '', stderr: '' };

/** A project built at t0 + 10: fresh. */
async function built(): Promise<string> {
  const dir = project();
  expect(await run(dir)).toMatchObject({ code: 0, said: 'dist/ is missing: building' });
  touch(join(dir, 'dist', '.built'), t0 + 10);
  return dir;
}

describe('scripts/build-if-stale.mjs', () => {
  it('builds when dist/ is missing, then not again while dist/ is newer than every input', async () => {
    const dir = await built();
    expect(builds(dir)).toBe(1);
    expect(existsSync(join(dir, '.tmp', 'build.lock'))).toBe(false);
    expect(await run(dir)).toEqual(fresh);
    expect(builds(dir)).toBe(1);
  });

  it.each([
    ['a source changed in a nested directory', (dir: string) => touch(join(dir, 'src', 'nested', 'b.ts'), t0 + 20)],
    ['a worker source changed', (dir: string) => touch(join(dir, 'workers', 'main.ts'), t0 + 20)],
    ['tsconfig.build.json changed', (dir: string) => touch(join(dir, 'tsconfig.build.json'), t0 + 20)],
    // Nothing left to be newer but the directory the file was in.
    ['a source removed', (dir: string) => unlinkSync(join(dir, 'src', 'nested', 'a.ts'))],
  ])('builds again when %s', async (_what, change) => {
    const dir = await built();
    change(dir);
    expect(await run(dir)).toMatchObject({ code: 0, said: 'dist/ is older than the sources: building' });
    expect(builds(dir)).toBe(2);
    // Built now: fresh again.
    expect(await run(dir)).toEqual(fresh);
    expect(builds(dir)).toBe(2);
  });

  it('ignores what is not an input (tests, docs)', async () => {
    const dir = await built();
    mkdirSync(join(dir, 'test'));
    writeFileSync(join(dir, 'test', 'x.test.ts'), '{}\n');
    expect(await run(dir)).toEqual(fresh);
    expect(builds(dir)).toBe(1);
  });

  it('builds once for two callers that find dist/ missing at the same time', async () => {
    const dir = project('sleep 1 && mkdir -p dist && touch dist/.built');
    const [a, b] = await Promise.all([run(dir), run(dir)]);
    expect([a.code, b.code]).toEqual([0, 0]);
    expect(builds(dir)).toBe(1);
    // One built; the other waited for it and found dist/ fresh.
    const [builder, waiter] = a.said.startsWith('waiting') ? [b, a] : [a, b];
    expect(builder.said).toBe('dist/ is missing: building');
    expect(waiter.stderr).toMatch(/^waiting for the build of pid \d+ \(.*build\.lock\)\n$/);
  });

  it('exits 1 when the build fails, so that `&& node dist/...` does not run', async () => {
    const dir = project('exit 3');
    const r = await run(dir);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('npm run build failed (3)');
    expect(existsSync(join(dir, '.tmp', 'build.lock'))).toBe(false);
    // Still stale: the next caller tries again.
    expect((await run(dir)).said).toBe('dist/ is missing: building');
  });

  it('is what the real build feeds: it removes dist/ first and writes dist/.built last', () => {
    const { scripts } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(scripts.build).toMatch(/^rm -rf dist && tsc -p tsconfig\.build\.json && .* && touch dist\/\.built$/);
  });
});

describe('the start path runs the build with node', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
    dependencies?: Record<string, string>;
    devDependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
  };
  const build = JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')) as { compilerOptions: { rootDir: string; outDir: string }; include: string[] };

  /** The source a dist/ file is compiled from (tsconfig.build.json: rootDir ".", outDir "dist"). */
  const sourceOf = (compiled: string) => compiled.replace(/^dist\//, '').replace(/\.js$/, '.ts');

  it('the Procfile runs dist/ with node: web and worker, compiled from sources the build includes', () => {
    expect(build.compilerOptions).toMatchObject({ rootDir: '.', outDir: 'dist' });
    const lines = readFileSync(join(root, 'Procfile'), 'utf8').split('\n').filter((l) => l.trim() !== '');
    const processes = Object.fromEntries(lines.map((l) => {
      const m = /^(\w+):\s*(.+)$/.exec(l);
      expect(m, l).not.toBeNull();
      return [m![1], m![2].trim()];
    }));
    expect(processes).toEqual({ web: 'node dist/src/web.js', worker: 'node dist/workers/main.js' });
    for (const command of Object.values(processes)) {
      const compiled = command.split(' ')[1]!;
      const source = sourceOf(compiled);
      expect(statSync(join(root, source)).isFile(), source).toBe(true);
      expect(build.include.some((dir) => source.startsWith(`${dir}/`)), source).toBe(true);
    }
  });

  it('npm start, web and worker build if stale, then run the compiled entry with node', () => {
    const entries = { start: 'dist/src/main.js', web: 'dist/src/web.js', worker: 'dist/workers/main.js' };
    for (const [name, compiled] of Object.entries(entries)) {
      expect(pkg.scripts[name], name).toMatch(new RegExp(`(^|&& )node scripts/build-if-stale\\.mjs && node ${compiled.replace(/\./g, '\\.')}$`));
      expect(statSync(join(root, sourceOf(compiled))).isFile(), compiled).toBe(true);
    }
    // Every script that runs the service or its commands: none through tsx.
    for (const name of ['start', 'web', 'worker', 'migrate', 'bootstrap', 'reconcile', 'quarantine', 'plan', 'openapi', 'mock-upstream']) {
      expect(pkg.scripts[name], name).toContain('node scripts/build-if-stale.mjs && node dist/');
      expect(pkg.scripts[name], name).not.toMatch(/\btsx\b/);
    }
  });

  it('tsx is a devDependency only, and nothing compiled loads it', () => {
    expect(pkg.devDependencies?.tsx).toBeDefined();
    for (const deps of [pkg.dependencies, pkg.optionalDependencies, pkg.peerDependencies]) expect(deps?.tsx).toBeUndefined();
    const sources = (dir: string): string[] =>
      readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
    const loading = build.include.flatMap(sources).filter((f) => /(from\s+|import\s*\(\s*|require\s*\(\s*)['"]tsx(\/[^'"]*)?['"]/.test(readFileSync(join(root, f), 'utf8')));
    expect(loading).toEqual([]);
  });
});
