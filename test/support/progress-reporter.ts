/**
 * A vitest reporter for CI (.ci/run): it appends one JSON line per test file as the file
 * starts and as it ends, to the file named by VITEST_PROGRESS_FILE, so that a run cut by
 * CI's time limit still tells what passed, what failed and which files never finished.
 * vitest's own JSON report is written only when the whole run ends.
 *
 * It also names, on stderr, every file still running after VITEST_SLOW_FILE_S seconds
 * (default 300), once a minute, so that a hang is visible while it happens.
 */
import { appendFileSync } from 'node:fs';
import type { Reporter, TestModule } from 'vitest/node';

type Counts = { passed: number; failed: number; skipped: number };

function counts(module: TestModule): Counts {
  const c: Counts = { passed: 0, failed: 0, skipped: 0 };
  for (const test of module.children.allTests()) {
    const state = test.result().state;
    if (state === 'passed') c.passed += 1;
    else if (state === 'failed') c.failed += 1;
    else c.skipped += 1;
  }
  return c;
}

export default class ProgressReporter implements Reporter {
  private readonly file = process.env.VITEST_PROGRESS_FILE;
  private readonly slowAfterMs = Number(process.env.VITEST_SLOW_FILE_S ?? 300) * 1000;
  private readonly running = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;

  onTestRunStart(): void {
    this.timer = setInterval(() => this.sayStuck(), 60_000);
    this.timer.unref();
  }

  onTestModuleStart(module: TestModule): void {
    this.running.set(module.relativeModuleId, Date.now());
    this.write({ event: 'start', file: module.relativeModuleId });
  }

  onTestModuleEnd(module: TestModule): void {
    const started = this.running.get(module.relativeModuleId);
    this.running.delete(module.relativeModuleId);
    const c = counts(module);
    this.write({
      event: 'end',
      file: module.relativeModuleId,
      ms: started === undefined ? null : Date.now() - started,
      // A file that fails to load, or whose hooks fail, has no failed test: it counts as one.
      broken: module.state() === 'failed' && c.failed === 0,
      ...c,
    });
  }

  onTestRunEnd(): void {
    if (this.timer) clearInterval(this.timer);
    this.write({ event: 'run-end' });
  }

  private sayStuck(): void {
    const now = Date.now();
    for (const [file, started] of this.running) {
      if (now - started >= this.slowAfterMs) {
        process.stderr.write(`[progress] ${file} still running after ${Math.round((now - started) / 1000)} s\n`);
      }
    }
  }

  private write(line: Record<string, unknown>): void {
    if (!this.file) return;
    appendFileSync(this.file, `${JSON.stringify({ t: new Date().toISOString(), ...line })}\n`);
  }
}
