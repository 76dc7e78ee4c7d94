/**
 * The one fixture that starts a test file's service and projects. `useTestService()`, called
 * at the top of a test file, starts a test service (test/helpers.ts, startTestService) before
 * the file's tests with one project of each contract variant asked for, and closes it after
 * them. The service and the projects are this module's exports, set by that beforeAll: each
 * test file has its own copy of this module (vitest isolates test files), so the `svc` and
 * `p` a file imports are its own.
 *
 *     import { p, svc, useTestService } from '../support/service.js';
 *     useTestService({ workers: true });
 *
 * Files that need something else (several services, processes of their own, a service
 * started per test) call startTestService themselves.
 */
import { afterAll, beforeAll } from 'vitest';
import type { Config } from '../../src/config/index.js';
import { startTestService, type TestProject, type TestService } from '../helpers.js';

export interface ServiceFixtureOptions {
  /** Start the workers too (persistence, expirations): `svc.drained()` needs them. */
  workers?: boolean;
  /** Config overrides, or a function returning them when they are known only in beforeAll. */
  config?: Partial<Config> | (() => Partial<Config>);
  /** The projects to create, one per contract variant; `p` is the first. Default: B; none: []. */
  variants?: readonly ('A' | 'B')[];
}

/** The file's service, once its beforeAll ran. */
export let svc: TestService;
/** The project of the first variant asked for. */
export let p: TestProject;
/** The variant A project, when asked for. */
export let pA: TestProject;
/** The variant B project, when asked for. */
export let pB: TestProject;
/** The projects by variant, for tests run once per variant (`describe.each(['A', 'B'])`). */
export const projects = {} as Record<'A' | 'B', TestProject>;

export function useTestService(opts: ServiceFixtureOptions = {}): void {
  beforeAll(async () => {
    const config = typeof opts.config === 'function' ? opts.config() : opts.config;
    svc = await startTestService({ workers: opts.workers, config });
    const variants = opts.variants ?? ['B'];
    for (const variant of variants) {
      const project = await svc.project(variant);
      projects[variant] = project;
      if (variant === 'A') pA = project;
      else pB = project;
    }
    if (variants.length > 0) p = projects[variants[0]];
  });
  afterAll(async () => {
    await svc?.close();
  });
}
