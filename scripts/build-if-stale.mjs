#!/usr/bin/env node
/**
 * Runs `npm run build` when dist/ is missing or older than the TypeScript it is compiled
 * from: any file or directory under src/ or workers/ (a directory's time changes when a
 * file in it is added, removed or renamed), or the tsconfig files. The build writes
 * dist/.built last, after tsc succeeded, so its time is the build's. Nothing to do costs
 * one walk of the sources' metadata, a few milliseconds.
 *
 * Callers that find dist/ stale at the same time (two test files running npm scripts, two
 * `npm run web`) build one after the other under a lock directory, and the second finds
 * dist/ fresh: the build starts by removing dist/, which must not happen under a process
 * that is loading it.
 *
 * Used by `npm start` and the other npm scripts that run the service, by the benches and
 * by the test of the compiled service; production builds once at deploy
 * (docs/OPERATIONS.md) and its Procfile runs dist/ directly.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

// A project directory as the argument is checked and built instead of this repository:
// test/build/start-path.test.ts gives it small projects whose build only writes dist/.built.
const root = process.argv[2] ? resolve(process.argv[2]) : join(dirname(fileURLToPath(import.meta.url)), '..');
const inputs = ['src', 'workers', 'tsconfig.json', 'tsconfig.build.json'];
const lockDir = join(root, '.tmp', 'build.lock');
const lock_poll_ms = 100;
const lock_abandoned_ms = 10 * 60_000;

/** The newest modification time of `path` and, for a directory, of everything under it. */
function newestMtime(path) {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let newest = stat.mtimeMs;
  for (const name of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, name)));
  return newest;
}

/** Why dist/ must be built, or null when it is newer than every input. */
function staleness() {
  let built;
  try {
    built = statSync(join(root, 'dist', '.built')).mtimeMs;
  } catch {
    return 'dist/ is missing';
  }
  const sources = Math.max(...inputs.map((p) => newestMtime(join(root, p))));
  return sources > built ? 'dist/ is older than the sources' : null;
}

function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/**
 * Takes the lock directory, first removing one left by a builder that died holding it (its
 * pid gone, or the lock older than any build takes, should the pid have been reused).
 */
async function lock() {
  mkdirSync(dirname(lockDir), { recursive: true });
  let said = false;
  for (;;) {
    try {
      mkdirSync(lockDir);
      writeFileSync(join(lockDir, 'pid'), String(process.pid));
      return;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    let owner = null;
    let takenAt = Date.now();
    try {
      takenAt = statSync(lockDir).mtimeMs;
      owner = Number(readFileSync(join(lockDir, 'pid'), 'utf8'));
    } catch {
      // taken a moment ago, its pid not written yet, or released since
    }
    if ((owner && !isAlive(owner)) || Date.now() - takenAt > lock_abandoned_ms) {
      rmSync(lockDir, { recursive: true, force: true });
      continue;
    }
    if (!said) console.error(`waiting for the build of pid ${owner ?? '?'} (${lockDir})`);
    said = true;
    await sleep(lock_poll_ms);
  }
}

function build(reason) {
  console.error(`${reason}: building`);
  try {
    // Everything the build prints goes to stderr: `npm run bootstrap -- --json` prints only JSON.
    execFileSync('npm', ['run', 'build', '--loglevel=warn'], { cwd: root, stdio: ['ignore', 2, 2] });
  } catch (err) {
    // tsc printed why; the caller (npm start, a bench) must not run an old or missing build.
    console.error(`npm run build failed (${err.status ?? err.message})`);
    process.exitCode = 1;
  }
}

if (staleness() !== null) {
  await lock();
  try {
    // Another caller may have built while this one waited.
    const reason = staleness();
    if (reason !== null) build(reason);
  } finally {
    rmSync(lockDir, { recursive: true, force: true });
  }
}
