/**
 * The command line of the operator CLIs (reconcile, quarantine, plan): node's parseArgs,
 * strict, with `--help` printing the usage and exiting 0, and `fail`, which says what is
 * wrong on stderr and exits: 2 (a bad argument: the usage follows) unless told otherwise.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;

export interface CommandLine<T extends Options> {
  values: ReturnType<typeof parseArgs<{ options: T; strict: true; allowPositionals: true }>>['values'];
  positionals: string[];
  fail: (message: string, exitCode?: number) => never;
}

export function commandLine<T extends Options>(name: string, usage: string, options: T, o: { positionals: boolean } = { positionals: true }): CommandLine<T> {
  const fail = (message: string, exitCode = 2): never => {
    process.stderr.write(`${name}: ${message}\n${exitCode === 2 ? `${usage}\n` : ''}`);
    process.exit(exitCode);
  };
  let parsed;
  try {
    parsed = parseArgs({ options: { ...options, help: { type: 'boolean', default: false } }, strict: true, allowPositionals: true });
  } catch (err) {
    return fail((err as Error).message);
  }
  if ((parsed.values as { help?: boolean }).help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  if (!o.positionals && parsed.positionals.length > 0) fail(`unexpected argument ${JSON.stringify(parsed.positionals[0])}`);
  return { values: parsed.values as CommandLine<T>['values'], positionals: parsed.positionals, fail };
}
