// The last line of a CI run: "N passed, N failed", summed over the runs named on the
// command line as triples (vitest JSON report, exit code, progress file), plus the failed
// checks (tsc, build, lint) given first.
//
// - A run with its JSON report: its passed and failed tests; a file that failed to load or
//   whose hooks failed counts as one failure, as does a failing run that reports none.
// - A run cut by its time limit has no JSON report: the progress file
//   (test/support/progress-reporter.ts) still has every file that ended; each file that
//   started and never ended is named and counts as one failure, and so does the cut.
// - A run with neither counts as one failure.
import { existsSync, readFileSync } from 'node:fs';

const [checksFailed, ...args] = process.argv.slice(2);
let passed = 0;
let failed = Number(checksFailed);
let skipped = 0;

for (let i = 0; i < args.length; i += 3) {
  const [report, rc, progress] = [args[i], Number(args[i + 1]), args[i + 2]];
  if (existsSync(report)) {
    const r = JSON.parse(readFileSync(report, 'utf8'));
    const brokenFiles = (r.testResults || []).filter(
      (f) => f.status === 'failed' && (f.assertionResults || []).every((a) => a.status !== 'failed'),
    ).length;
    let runFailed = r.numFailedTests + brokenFiles;
    if (rc !== 0 && runFailed === 0) runFailed = 1;
    passed += r.numPassedTests;
    failed += runFailed;
    skipped += (r.numPendingTests || 0) + (r.numTodoTests || 0);
    continue;
  }
  if (progress && existsSync(progress)) {
    const open = new Map();
    for (const line of readFileSync(progress, 'utf8').split('\n')) {
      if (!line) continue;
      const e = JSON.parse(line);
      if (e.event === 'start') open.set(e.file, e.t);
      if (e.event !== 'end') continue;
      open.delete(e.file);
      passed += e.passed;
      failed += e.failed + (e.broken ? 1 : 0);
      skipped += e.skipped;
    }
    console.log(`no JSON report: ${report} (exit code ${rc}); counted from ${progress}`);
    for (const [file, since] of open) console.log(`did not finish: ${file} (started ${since})`);
    failed += open.size + 1;
    continue;
  }
  console.log(`no report: ${report} (exit code ${rc})`);
  failed += 1;
}
if (skipped) console.log(`${skipped} skipped`);
console.log(`${passed} passed, ${failed} failed`);
