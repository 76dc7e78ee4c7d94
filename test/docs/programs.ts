/**
 * The programs of the docs, run the way the docs tell a reader to run them (the Markdown
 * convention: test/docs/examples.ts). A program's example names the file to save it as,
 * then after the program a `sh` block: its `npm install name@MAJOR ...` line (none when it
 * imports only Node's own modules) and, last, the command that runs it.
 *
 * programProblems holds what that says to the program: the install line names exactly the
 * packages the program imports, each at the major version this project installs and so
 * tests (its node_modules), and the run command names the saved file.
 *
 * ProgramFolder runs them: a fresh folder under the OS's temporary directory, outside the
 * project, where none of the packages can be found before the install (no node_modules in
 * it or above it); one `npm install` there of every program's packages, which is what
 * running their install lines one after the other does (`--prefer-offline --no-audit
 * --no-fund` added, for speed: the packages are in npm's cache); then each program saved
 * under its name and its run command run there by bash, in an environment without npm's
 * or the test runner's variables, with `BASE_URL` and `API_KEY` (what the docs tell the
 * reader to export, and all a program may read) set to the live service's.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, relative } from 'node:path';
import { promisify } from 'node:util';
import type { Example, ExampleEnv, ProgramSteps } from './examples.js';

const run = promisify(execFile);

const install_line = /^npm install((?: \S+)+)$/;
const package_spec = /^((?:@[a-z0-9][\w.-]*\/)?[a-z0-9][\w.-]*)@(\d+)$/;

/** The packages (name -> major version) a program's install lines name, and what in them is not `npm install name@MAJOR ...`. */
function installedPackages(steps: ProgramSteps): { packages: Map<string, string>; problems: string[] } {
  const packages = new Map<string, string>();
  const problems: string[] = [];
  for (const line of steps.install) {
    const m = install_line.exec(line);
    if (!m) {
      problems.push(`"${line}": each line before the run command is "npm install name@MAJOR ..."`);
      continue;
    }
    for (const spec of m[1].trim().split(' ')) {
      const s = package_spec.exec(spec);
      if (s) packages.set(s[1], s[2]);
      else problems.push(`"${spec}": a package is installed as name@MAJOR (npm install openai@6)`);
    }
  }
  return { packages, problems };
}

/** The packages a program imports: the names of its bare specifiers, Node's own modules left out. */
export function importedPackages(source: string): string[] {
  const specifiers = [
    ...source.matchAll(/^\s*(?:import|export)\b[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/gm),
  ].map((m) => m[1] ?? m[2] ?? m[3]);
  const names = specifiers
    .filter((s) => !s.startsWith('.') && !s.startsWith('/') && !s.startsWith('node:') && !builtinModules.includes(s.split('/')[0]))
    .map((s) => s.split('/').slice(0, s.startsWith('@') ? 2 : 1).join('/'));
  return [...new Set(names)].sort();
}

/** The major version of a package this project installs (and so tests), or null. */
function testedMajor(repoRoot: string, name: string): { version: string; major: string } | null {
  const file = join(repoRoot, 'node_modules', name, 'package.json');
  if (!existsSync(file)) return null;
  const version = (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
  return { version, major: version.split('.')[0] };
}

/** What a program's steps get wrong, in words (empty: nothing). */
export function programProblems(ex: Example, repoRoot: string): string[] {
  if (!ex.program) return [];
  const where = `${ex.file} example ${ex.name}`;
  const { packages, problems } = installedPackages(ex.program);
  const out = problems.map((p) => `${where}: ${p}`);
  for (const [name, major] of packages) {
    const tested = testedMajor(repoRoot, name);
    if (!tested) out.push(`${where}: installs ${name}, which this project does not install, so no test covers its version`);
    else if (tested.major !== major) out.push(`${where}: installs ${name}@${major}; the project tests ${name} ${tested.version}`);
  }
  const imported = importedPackages(ex.command);
  const installed = [...packages.keys()].sort();
  if (JSON.stringify(imported) !== JSON.stringify(installed)) {
    out.push(`${where}: imports [${imported.join(', ')}] but its install line installs [${installed.join(', ')}]`);
  }
  if (!ex.program.run.split(/\s+/).includes(ex.program.file)) {
    out.push(`${where}: the run command "${ex.program.run}" does not name the file it is saved as, ${ex.program.file}`);
  }
  return out;
}

/** The environment of a reader's shell: this process's, without npm's or the test runner's variables. */
function readerEnv(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(?:npm_|vitest|test_)|^(?:node_options|node_path|node_env|init_cwd)$/i.test(k)) env[k] = v;
  }
  return { ...env, ...vars };
}

/** A folder outside the project where the docs' programs are installed and run, as a reader would. */
export class ProgramFolder {
  private constructor(readonly dir: string) {}

  /** Makes the folder and runs one `npm install` of every package the programs' install lines name. */
  static async create(programs: Example[], repoRoot: string): Promise<ProgramFolder> {
    const dir = mkdtempSync(join(tmpdir(), 'docs-programs-'));
    const folder = new ProgramFolder(dir);
    try {
      const inProject = relative(repoRoot, dir);
      if (!inProject.startsWith('..') && !isAbsolute(inProject)) throw new Error(`${dir} is inside the project`);
      const majors = new Map<string, string>();
      for (const ex of programs) {
        for (const [name, major] of installedPackages(ex.program!).packages) {
          if ((majors.get(name) ?? major) !== major) throw new Error(`${name} is installed as @${majors.get(name)} and @${major} by the docs' programs`);
          majors.set(name, major);
        }
      }
      // ESM finds a package in node_modules of the program's folder or above it, nowhere else.
      for (let d = dir; ; d = dirname(d)) {
        for (const name of majors.keys()) {
          if (existsSync(join(d, 'node_modules', name))) throw new Error(`${name} is found from ${dir} before any install (${d}/node_modules)`);
        }
        if (dirname(d) === d) break;
      }
      const specs = [...majors].map(([name, major]) => `${name}@${major}`);
      if (specs.length > 0) {
        await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', ...specs], { cwd: dir, env: readerEnv({}), timeout: 180_000 });
      }
      return folder;
    } catch (err) {
      folder.close();
      throw err;
    }
  }

  /** Saves the program under its name and runs its run command; answers what it printed. */
  async run(ex: Example, env: ExampleEnv): Promise<string> {
    if (!ex.program) throw new Error(`example ${ex.name}: not a program`);
    writeFileSync(join(this.dir, ex.program.file), ex.command);
    const childEnv = readerEnv({ BASE_URL: env.BASE_URL, API_KEY: env.API_KEY });
    const { stdout } = await run('bash', ['-c', ex.program.run], { cwd: this.dir, env: childEnv, timeout: 60_000 });
    return stdout.replace(/\n+$/, '');
  }

  close(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
