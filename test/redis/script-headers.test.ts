/**
 * The typed script layer (src/redis/scripts.ts) against the Lua files it calls: each
 * script's header lists its KEYS and ARGV (`-- KEYS[n] name`, `-- ARGV[n] name: ...`), and
 * lua/includes/customer.lua its status codes. A bound script (lua/bound_<op>-12.lua) takes
 * its operation's KEYS and ARGV and the bucket after them (lua/includes/bound.lua). A
 * wrapper that passes arguments in another order or count, or a status without its place
 * in the error map, fails here.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  bound_script_bucket_keys, boundOperations, boundScriptName, customer_script_args, customer_script_base_args, customer_script_keys,
  customerScriptNames, other_scripts, scriptSource, scriptStatusErrors, ScriptStatus,
} from '../../src/redis/scripts.js';
import { errorCatalogue } from '../../src/errors/catalogue.js';

const luaDir = join(import.meta.dirname, '..', '..', 'lua');
const camel = (s: string) => s.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

interface Header {
  keyCount: number;
  keys: string[];
  args: string[];
  /** The name of `-- ARGV[n..] name:`, a list that follows the named ARGV. */
  rest: string | null;
}

function header(text: string, firstArg: number): Header {
  const keys: string[] = [];
  const args: string[] = [];
  let rest: string | null = null;
  for (const m of text.matchAll(/^--\s+KEYS\[(\d+)\]\s+(\w+)/gm)) keys[Number(m[1]) - 1] = m[2];
  for (const m of text.matchAll(/^--\s+ARGV\[(\d+)(\.\.)?\]\s+(\w+):/gm)) {
    if (m[2]) rest = camel(m[3]);
    else args[Number(m[1]) - firstArg] = camel(m[3]);
  }
  return { keyCount: keys.length, keys, args, rest };
}

const files = readdirSync(luaDir).filter((f) => /^[a-z_]+-\d+\.lua$/.test(f));
const byName = new Map(files.map((f) => {
  const m = /^([a-z_]+)-(\d+)\.lua$/.exec(f)!;
  return [m[1], { file: f, keyCount: Number(m[2]), text: readFileSync(join(luaDir, f), 'utf8') }] as const;
}));
const customerLua = readFileSync(join(luaDir, 'includes', 'customer.lua'), 'utf8');
const boundLua = readFileSync(join(luaDir, 'includes', 'bound.lua'), 'utf8');

describe('script headers', () => {
  it('every script under lua/ has a typed wrapper, and every wrapper a script', () => {
    const wrapped = [...customerScriptNames, ...Object.keys(other_scripts), ...boundOperations.map(boundScriptName)].sort();
    expect([...byName.keys()].sort()).toEqual(wrapped);
  });

  it('customer scripts: the ten KEYS and ARGV[1..4] and the last ARGV of customer.lua', () => {
    const h = header(customerLua, 1);
    expect(h.keys).toEqual([...customer_script_keys]);
    expect(h.args).toEqual([...customer_script_base_args]);
    expect(customerLua).toMatch(/^--\s+ARGV\[#ARGV\]\s+binding_read_at_ms:/m);
  });

  it.each([...customerScriptNames])('%s: ARGV[5..] in the wrapper\'s order and count', (name) => {
    const s = byName.get(name)!;
    expect(s.keyCount).toBe(customer_script_keys.length);
    expect(s.text).toMatch(/^--\s+KEYS\[1\.\.10\] and ARGV\[1\.\.4\]: see includes\/customer\.lua/m);
    expect(s.text).toMatch(/^--@include customer$/m);
    expect(header(s.text, 5).args).toEqual([...customer_script_args[name]]);
  });

  it('bound scripts: the bucket after the ten KEYS, and the operation\'s id in ARGV[5]', () => {
    expect(header(boundLua, 1).keys.slice(customer_script_keys.length)).toEqual([...bound_script_bucket_keys]);
    expect(boundLua).toMatch(/^--\s+KEYS\[11\] ids\s/m);
    expect(boundLua).toMatch(/^K_bucket_ids, K_bucket_bloom, bound_id = KEYS\[11\], KEYS\[12\], ARGV\[5\]$/m);
    expect(boundLua).toMatch(/bind_id\(K_bucket_ids, K_bucket_bloom, bound_id, owner, false\)/);
    // ARGV[5] is the id each operation binds: its transaction id or deposit key.
    for (const op of boundOperations) expect(customer_script_args[op][0], op).toMatch(/^(transactionId|idempotencyKey)$/);
  });

  it.each([...boundOperations])('bound_%s: its binding step and its operation\'s script, spliced whole', (op) => {
    const s = byName.get(boundScriptName(op))!;
    expect(s.keyCount).toBe(customer_script_keys.length + bound_script_bucket_keys.length);
    expect(header(s.text, 1).keys.slice(customer_script_keys.length)).toEqual([...bound_script_bucket_keys]);
    expect(s.text).toMatch(new RegExp(`^-- KEYS\\[1\\.\\.10\\] and ARGV: as lua/${op}-10\\.lua; the last ARGV is ''`, 'm'));
    const assembled = scriptSource(boundScriptName(op)).lua;
    const operation = scriptSource(op).lua;
    // Spliced: the operation's own text, its `--@include customer` already there.
    const body = operation.slice(operation.indexOf('local now = now_ms()'));
    if (op === 'gateway_hold') {
      // The hold runs first, in a function whose reply says whether it applied: only then
      // is its call's index entry written.
      expect(s.text.trimEnd()).toMatch(/\nlocal reply = \(function\(\)\n--@script gateway_hold\nend\)\(\)\nif reply\[1\] == OK then index_call\(\) end\nreturn reply$/);
      expect(assembled.endsWith(`${body}\nend)()\nif reply[1] == OK then index_call() end\nreturn reply\n`)).toBe(true);
    } else {
      // The binding step returns before the operation: the operation is the script's last part.
      expect(s.text.trimEnd()).toMatch(new RegExp(`\\nlocal refused = (bind_to_customer\\(\\)|bound_to_customer\\(E_[A-Z_]+\\))\\nif refused then return refused end\\n\\n--@script ${op}$`));
      expect(assembled.endsWith(body)).toBe(true);
    }
    expect(assembled.match(/^local function now_ms\(\)/gm)).toHaveLength(1);
  });

  it.each(Object.keys(other_scripts) as (keyof typeof other_scripts)[])('%s: KEYS and ARGV as the wrapper passes them', (name) => {
    const s = byName.get(name)!;
    const spec = other_scripts[name] as { keys: readonly string[]; args: readonly string[] | null; rest?: string };
    const h = header(s.text, 1);
    expect(h.keyCount).toBe(s.keyCount);
    expect(h.keys).toEqual(spec.keys.map((k) => k));
    // The trim's two modes list their ARGV in prose; trimScan and trimMark follow it.
    if (spec.args === null) {
      expect(s.text).toMatch(/^-- scan: ARGV\[1\] 'scan', ARGV\[2\] retention ms, ARGV\[3\] most records/m);
      expect(s.text).toMatch(/^-- mark: ARGV\[1\] 'mark', ARGV\[2\] the cutoff of the scan, ARGV\[3\] deletion time \(ms\),\n--\s+ARGV\[4\.\.\] members/m);
      return;
    }
    expect(h.args).toEqual([...spec.args]);
    expect(h.rest).toBe(spec.rest ?? null);
  });

  it('every status code of customer.lua is in ScriptStatus, and mapped', () => {
    const codes = [...customerLua.matchAll(/^local (OK|REPLAY|E_[A-Z_]+) = (\d+)$/gm)].map((m) => [m[1], Number(m[2])] as const);
    expect(codes.length).toBeGreaterThan(10);
    const enumValues = Object.values(ScriptStatus).filter((v): v is number => typeof v === 'number').sort((a, b) => a - b);
    expect(codes.map(([, n]) => n).sort((a, b) => a - b)).toEqual(enumValues);
    for (const [name, n] of codes) {
      const enumName = ScriptStatus[n];
      // E_INSUFFICIENT_SELECTED is InsufficientSelected, E_STALE_BINDING StaleBinding ...
      expect(camel(name.replace(/^E_/, '').toLowerCase()).toLowerCase(), name).toBe(enumName.toLowerCase());
      expect(n in scriptStatusErrors, name).toBe(true);
      const code = scriptStatusErrors[n as ScriptStatus];
      if (code !== null) expect(errorCatalogue[code], name).toBeDefined();
    }
    // Errors are the E_ statuses but two the service handles itself: a stale binding (it
    // starts over from the binding) and an archived one (it takes the two steps).
    for (const [name, n] of codes) {
      expect(scriptStatusErrors[n as ScriptStatus] === null, name).toBe(!name.startsWith('E_') || name === 'E_STALE_BINDING' || name === 'E_BINDING_ARCHIVED');
    }
  });

  // Scripts run as Redis functions: an include's text runs once, when its library is
  // loaded, except its --@per-call blocks, which open every call (src/redis/scripts.ts).
  // KEYS or ARGV read anywhere else in an include would be the first call's, for good.
  it.each(readdirSync(join(luaDir, 'includes')))('includes/%s reads KEYS and ARGV only in its --@per-call blocks', (file) => {
    const text = readFileSync(join(luaDir, 'includes', file), 'utf8');
    const outside = text.replace(/^--@per-call\s*\n[\s\S]*?^--@end\s*$/gm, '');
    const code = outside.split('\n').filter((line) => !/^\s*--/.test(line)).map((line) => line.replace(/--.*$/, ''));
    expect(code.filter((line) => /\b(KEYS|ARGV)\b/.test(line))).toEqual([]);
    // A per-call block assigns what the include declared before it, never a new local.
    for (const block of text.matchAll(/^--@per-call\s*\n([\s\S]*?)^--@end\s*$/gm)) expect(block[1]).not.toMatch(/^\s*local\b/m);
  });
});
