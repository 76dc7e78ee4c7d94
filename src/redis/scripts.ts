/**
 * Loads lua/<name>-<keys>.lua, splices `--@include <file>` from lua/includes and
 * `--@script <name>` (another script under lua/, as the rest of this one: the bound
 * scripts run their operation's script after their binding step), and runs each as a
 * Redis function (FCALL), loading its library (FUNCTION LOAD) when Redis answers that it
 * has no such function: a function that Redis does not know was not run, so calling it
 * again once loaded is safe.
 *
 * Why functions and not EVALSHA: an EVAL script runs all of its text on every call, and the
 * includes define some forty local functions, each a closure made again on every call,
 * with its upvalues looked up in a list as long as the include's locals: 55,000 of the
 * 360,000 instructions of a deduct (bench/profile/redis-script.ts). A library runs its
 * text once, when it is loaded; a call runs only the function registered at its end. So an
 * include's text is the library's, except its `--@per-call` ... `--@end` blocks (the KEYS
 * and ARGV it reads, the state a call starts from), which open the registered function,
 * followed by the script's own text. Run as one EVAL text instead (`lua` below, which the
 * header test reads), the same code means the same: the blocks run where they stand.
 *
 * Libraries and functions are named by the script and the SHA-1 of the library's text
 * (`svc_deduct_<12 hex>`), so two deployments with different script versions can share
 * one Redis; a version no process uses any more stays loaded until an operator deletes it
 * (FUNCTION DELETE, docs/OPERATIONS.md). Redis keeps functions in its RDB and append-only
 * files and replicates them, so a restart from its files does not lose them; an emptied
 * Redis answers "Function not found", and the call loads the library again. On a cluster
 * the library is loaded on every master at once.
 *
 * Not ioredis defineCommand: ioredis copies every script defined that way onto each
 * auto-pipeline it makes, about 14.5 us per pipeline with two dozen scripts, which at one
 * connection is one pipeline per command.
 */
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { isCluster, type RedisClient } from './client.js';
import type { BindingKeys } from './keys.js';
import { ApiError, type ErrorCode } from '../errors/catalogue.js';
import { projectRoot } from '../root.js';

const luaDir = join(projectRoot, 'lua');

/** Status codes returned first by every customer script (lua/includes/customer.lua). */
export enum ScriptStatus {
  Ok = 0,
  Replay = 1,
  CustomerNotFound = 10,
  Conflict = 11,
  Insufficient = 12,
  InsufficientSelected = 13,
  NoConsumable = 14,
  AlreadyConsumed = 15,
  NoUnfreezable = 16,
  ExceedsFrozen = 17,
  InvalidExpires = 18,
  UsageLimit = 19,
  AccountNotFound = 20,
  DepositLimit = 21,
  /** The binding read that led here is older than the grace and the record is absent: nothing applied, start over from the binding. */
  StaleBinding = 22,
  /** A bound script's consume or unfreeze named another customer than the id's binding: nothing written. */
  ScopeMismatch = 23,
  /** A bound script's id is not bound and the Bloom filter may have it archived: nothing written, take the two steps. */
  BindingArchived = 24,
  /** A spending budget would be exceeded (lua/includes/budget.lua): nothing applied. */
  BudgetExceeded = 40,
}

/**
 * The one map from script status to API error. null: not an error (Ok, Replay), or not one
 * a caller may answer with (StaleBinding: nothing applied, the caller starts over from the
 * binding; BindingArchived: nothing written, the caller takes the two steps, which ask
 * PostgreSQL).
 */
export const scriptStatusErrors: Readonly<Record<ScriptStatus, ErrorCode | null>> = {
  [ScriptStatus.Ok]: null,
  [ScriptStatus.Replay]: null,
  [ScriptStatus.CustomerNotFound]: 'customer_not_found',
  [ScriptStatus.Conflict]: 'transaction_conflict',
  [ScriptStatus.Insufficient]: 'insufficient_balance',
  [ScriptStatus.InsufficientSelected]: 'insufficient_balance_in_selected_credit_types',
  [ScriptStatus.NoConsumable]: 'no_consumable_freeze_records',
  [ScriptStatus.AlreadyConsumed]: 'freeze_records_already_consumed',
  [ScriptStatus.NoUnfreezable]: 'no_unfreezable_records',
  [ScriptStatus.ExceedsFrozen]: 'actual_amount_exceeds_frozen_amount',
  [ScriptStatus.InvalidExpires]: 'invalid_expires_at',
  [ScriptStatus.UsageLimit]: 'usage_limit_exceeded',
  [ScriptStatus.AccountNotFound]: 'billing_account_not_found',
  [ScriptStatus.DepositLimit]: 'invalid_amount',
  [ScriptStatus.StaleBinding]: null,
  [ScriptStatus.ScopeMismatch]: 'customer_scope_mismatch',
  [ScriptStatus.BindingArchived]: null,
  [ScriptStatus.BudgetExceeded]: 'budget_exceeded',
};

/**
 * The API error of a script status, with `opts` (param, message, HTTP status); a status
 * that is not an error, or an unknown one, throws: a programming error.
 */
export function scriptError(script: string, status: number, opts: ConstructorParameters<typeof ApiError>[1] = {}): ApiError {
  const code = scriptStatusErrors[status as ScriptStatus] ?? null;
  if (code === null) throw new Error(`${script} answered status ${status}`);
  return new ApiError(code, opts);
}

export const customerScriptNames = [
  'deposit', 'deduct', 'freeze', 'consume', 'unfreeze', 'expire', 'view', 'gateway_hold', 'gateway_settle', 'gateway_release',
  'gateway_extend', 'trim_sources',
] as const;
export type CustomerScriptName = (typeof customerScriptNames)[number];

interface LoadedScript {
  /** SHA-1 of `lua`. */
  sha1: string;
  numberOfKeys: number;
  /** The script as one EVAL text, includes spliced where they are named. */
  lua: string;
  /** The function FCALL names, and its library's name. */
  fn: string;
  /** The library FUNCTION LOAD takes. */
  library: string;
}

/** The line of lua/includes/customer.lua that loadScripts sets to the configured grace. */
const binding_grace_line = /^local BINDING_GRACE_MS = \d+$/m;

/**
 * The scripts under lua/, with the customer scripts' binding grace set to `bindingGraceMs`
 * (ARCHIVE_GRACE_MS) when given; the function names follow, so that processes with
 * different graces never share a function.
 */
function loadScripts(bindingGraceMs?: number): Map<string, LoadedScript> {
  const withGrace = (text: string) => (bindingGraceMs === undefined ? text : text.replace(binding_grace_line, `local BINDING_GRACE_MS = ${bindingGraceMs}`));
  if (!binding_grace_line.test(readFileSync(join(luaDir, 'includes', 'customer.lua'), 'utf8'))) {
    throw new Error('lua/includes/customer.lua has no BINDING_GRACE_MS line to set');
  }
  const files = new Map<string, { file: string; numberOfKeys: number }>();
  for (const file of readdirSync(luaDir)) {
    const m = /^([a-z_]+)-(\d+)\.lua$/.exec(file);
    if (m) files.set(m[1], { file, numberOfKeys: Number(m[2]) });
  }
  const scripts = new Map<string, LoadedScript>();
  for (const [name, { file, numberOfKeys }] of files) {
    const text = readFileSync(join(luaDir, file), 'utf8');
    const lua = withGrace(assemble(text, files, new Set()));
    const includes: string[] = [];
    const body = assemble(text, files, new Set(), includes);
    const perCall: string[] = [];
    const once = includes.map((inc) =>
      inc.replace(/^--@per-call\s*\n([\s\S]*?)^--@end\s*$/gm, (_, block: string) => {
        perCall.push(block);
        return '';
      }),
    );
    const code = withGrace(`${once.join('\n')}\nredis.register_function('FN', function(KEYS, ARGV)\n${perCall.join('')}${body}\nend)\n`);
    const fn = `svc_${name}_${createHash('sha1').update(code).digest('hex').slice(0, 12)}`;
    const library = `#!lua name=${fn}\n${code.replace("redis.register_function('FN'", `redis.register_function('${fn}'`)}`;
    scripts.set(name, { sha1: createHash('sha1').update(lua).digest('hex'), numberOfKeys, lua, fn, library });
  }
  return scripts;
}

/**
 * Splices the includes and scripts a Lua text names, and theirs in turn, each once per
 * script (`spliced`): the operation script a bound script splices says `--@include
 * customer` too, which the bound script included already. An include's text, its own
 * includes spliced, goes where it is named, or, given `includes`, is taken out and
 * appended there instead (an include's own includes before it): what is left is the
 * script's own text, its `--@script` spliced in turn.
 */
function assemble(text: string, files: ReadonlyMap<string, { file: string }>, spliced: Set<string>, includes?: string[]): string {
  return text.replace(/^--@(include|script) (\w+)\s*$/gm, (_, what: string, name: string) => {
    const id = `${what}:${name}`;
    if (spliced.has(id)) return '';
    spliced.add(id);
    const script = files.get(name);
    if (what === 'script' && !script) throw new Error(`--@script ${name}: no script lua/${name}-<keys>.lua`);
    const path = what === 'include' ? join(luaDir, 'includes', `${name}.lua`) : join(luaDir, script!.file);
    const spliceText = assemble(readFileSync(path, 'utf8'), files, spliced, includes);
    if (what === 'include' && includes) {
      includes.push(spliceText);
      return '';
    }
    return spliceText;
  });
}

/** Loaded scripts by binding grace (undefined: as lua/ has it). */
const cached = new Map<number | undefined, Map<string, LoadedScript>>();

function scriptsWithGrace(bindingGraceMs?: number): Map<string, LoadedScript> {
  let scripts = cached.get(bindingGraceMs);
  if (!scripts) cached.set(bindingGraceMs, (scripts = loadScripts(bindingGraceMs)));
  return scripts;
}

/** {status, result JSON, TTL auto-consumes applied, TTL ledger entries written, ...}. */
export type ScriptReply = [number, string, number, number, ...unknown[]];

export interface Scripts {
  run(name: CustomerScriptName, keys: string[], args: (string | number)[]): Promise<ScriptReply>;
  /** Any other script under lua/, by name, with its own reply shape. */
  runOther<T = unknown[]>(name: string, keys: string[], args: (string | number)[]): Promise<T>;
}

/**
 * Sends script calls once per turn of the event loop instead of once per request. ioredis's
 * auto-pipeline writes the commands of one tick together, but every request arrives in an
 * I/O callback of its own, with ticks in between: under load, each script call was a write
 * system call of its own in the API (writev was 8% of its CPU on the deduct route) and a
 * read of its own in Redis. Calls made during one poll phase are sent together when it
 * ends (setImmediate), which ioredis writes as one pipeline, and Redis reads as one. At low
 * load the poll phase holds one request and its call goes out at once.
 */
class TurnBatch {
  private queued: (() => void)[] = [];
  private scheduled = false;

  send<T>(sendNow: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queued.push(() => sendNow().then(resolve, reject));
      if (this.scheduled) return;
      this.scheduled = true;
      setImmediate(this.flush);
    });
  }

  private readonly flush = () => {
    const calls = this.queued;
    this.queued = [];
    this.scheduled = false;
    for (const call of calls) call();
  };
}

/** Redis's answer to an FCALL of a function it does not have. */
const isFunctionNotFound = (err: unknown): boolean => err instanceof Error && /^ERR Function not found/.test(err.message);

/**
 * Loads a library on the Redis (every master of a cluster). A library with that name is
 * there already when another process loaded it meanwhile: its name is its content's, so it
 * is the same.
 */
async function loadLibrary(redis: RedisClient, library: string): Promise<void> {
  const nodes = isCluster(redis) ? redis.nodes('master') : [redis];
  await Promise.all(
    nodes.map((node) =>
      (node.call('FUNCTION', 'LOAD', library) as Promise<unknown>).catch((err: unknown) => {
        if (!(err instanceof Error && /already exists/.test(err.message))) throw err;
      }),
    ),
  );
}

/**
 * The scripts on a Redis connection. `bindingGraceMs` (ARCHIVE_GRACE_MS) must be given
 * wherever customer scripts run; callers that run only other scripts may leave it out.
 */
export function registerScripts(redis: RedisClient, bindingGraceMs?: number): Scripts {
  const scripts = scriptsWithGrace(bindingGraceMs);
  const batch = new TurnBatch();
  const call = <T>(name: string, keys: string[], args: (string | number)[]): Promise<T> => {
    const s = scripts.get(name);
    if (!s) throw new Error(`no Lua script named ${name}`);
    if (keys.length !== s.numberOfKeys) throw new Error(`${name} takes ${s.numberOfKeys} keys, got ${keys.length}`);
    const send = () =>
      (redis.fcall(s.fn, s.numberOfKeys, ...keys, ...args) as Promise<T>).catch(async (err: unknown) => {
        if (!isFunctionNotFound(err)) throw err;
        await loadLibrary(redis, s.library);
        return redis.fcall(s.fn, s.numberOfKeys, ...keys, ...args) as Promise<T>;
      });
    return batch.send(send);
  };
  return {
    run: (name, keys, args) => call<ScriptReply>(name, keys, args),
    runOther: (name, keys, args) => call(name, keys, args),
  };
}

/**
 * How a script under lua/ appears: FCALL names its function `fn`, FUNCTION LOAD sends its
 * `library`; `lua` is the same script as one EVAL text (the header test reads it).
 */
export function scriptSource(name: string, bindingGraceMs?: number): { sha1: string; lua: string; fn: string; library: string } {
  const s = scriptsWithGrace(bindingGraceMs).get(name);
  if (!s) throw new Error(`no Lua script named ${name}`);
  return { sha1: s.sha1, lua: s.lua, fn: s.fn, library: s.library };
}

// ---------------------------------------------------------------- the typed script layer
//
// One function per script under lua/, with named arguments: callers never build ARGV or
// KEYS arrays themselves. Each list below is the script's header (`-- ARGV[n] name:` and
// `-- KEYS[n] name` lines), names in camelCase; test/redis/script-headers.test.ts checks
// them against the Lua files.

/** KEYS of every customer script, in order (lua/includes/customer.lua). */
export const customer_script_keys = ['meta', 'src', 'tx', 'dep', 'ttl', 'outbox', 'live', 'dead', 'spent', 'fin'] as const;

/** ARGV[1..4] of every customer script; the last ARGV is `bindingReadAtMs`. */
export const customer_script_base_args = ['clockOffsetMs', 'projectId', 'customerId', 'entryIdBase'] as const;

/** The named ARGV of each customer script, after ARGV[1..4] and before the binding read time. */
export const customer_script_args = {
  deposit: [
    'idempotencyKey', 'requestHash', 'amount', 'wallet', 'label', 'startsAtMs', 'expiresAtMs', 'name', 'email', 'metadata', 'description',
    'sourceId', 'requestFields',
  ],
  deduct: ['transactionId', 'amount', 'requestHash', 'walletFilter', 'entryWallet', 'businessType', 'description', 'admitted', 'keyBudget', 'requestFields'],
  freeze: [
    'transactionId', 'amount', 'requestHash', 'walletFilter', 'entryWallet', 'businessType', 'description', 'ttlKind', 'ttlSeconds', 'admitted', 'keyBudget',
    'requestFields',
  ],
  consume: ['transactionId', 'amount', 'description', 'admitted'],
  unfreeze: ['transactionId', 'description'],
  expire: [],
  view: ['listSources'],
  gateway_hold: [
    'transactionId', 'wallet', 'inputCostBound', 'outputPrice', 'outputTokens', 'explicitMax', 'holdTtlSeconds', 'admitted', 'answers',
    'idempotencyKey', 'keyBudget',
  ],
  gateway_settle: ['transactionId', 'cost', 'usageRecord', 'modelId'],
  gateway_release: ['transactionId', 'usageRecord'],
  gateway_extend: ['transactionId', 'extension', 'outputPrice', 'outputTokens', 'keyBudget', 'answers'],
  trim_sources: ['retentionMs', 'countMax'],
} as const satisfies Record<CustomerScriptName, readonly string[]>;

/**
 * Operations that a single Redis runs with the binding of their id, in one script:
 * lua/bound_<op>-12.lua binds (or reads the binding of) ARGV[5], then runs lua/<op>-10.lua
 * (lua/includes/bound.lua); the gateway hold runs first and writes its call's receipt
 * index entry when it applied (lua/bound_gateway_hold-12.lua). Their ARGV are the
 * operation's; the last one is '' (no grace: the binding is read in the same script).
 */
export const boundOperations = ['deposit', 'deduct', 'freeze', 'consume', 'unfreeze', 'gateway_hold'] as const satisfies readonly CustomerScriptName[];
export type BoundOperation = (typeof boundOperations)[number];
export const boundScriptName = <N extends BoundOperation>(op: N): `bound_${N}` => `bound_${op}`;
/** KEYS[11..12] of a bound script, after the customer's ten: the bucket of the operation's id. */
export const bound_script_bucket_keys = ['ids', 'bloom'] as const;

/**
 * The other scripts: their KEYS and ARGV by name. `rest` names a list of ARGV that follows
 * the named ones (`-- ARGV[n..] name:`). The trim (lua/trim-5.lua) has two modes with
 * their own ARGV; its wrappers are trimScan and trimMark.
 */
export const other_scripts = {
  bind: { keys: ['ids', 'bloom'], args: ['id', 'owner', 'force'] },
  unbind: { keys: ['ids', 'bloom'], args: ['owner'], rest: 'ids' },
  unclaim: { keys: ['ids'], args: ['id', 'owner'] },
  restore: { keys: ['tx', 'dep', 'fin', 'arch'], args: ['member', 'record'] },
  trim: { keys: ['tx', 'dep', 'fin', 'arch', 'outbox'], args: null },
  trim_due: { keys: ['due'], args: ['base', 'score', 'nextDueMs'] },
  plan_commit: { keys: ['counter', 'pending'], args: ['member'] },
  plan_reserve: { keys: ['plan', 'counter', 'pending'], args: ['nowMs', 'member', 'deadlineMs'] },
  plan_lease: {
    keys: ['plan', 'counter', 'pending'],
    args: ['nowMs', 'lease', 'weight', 'consumed', 'inFlight', 'keep', 'want', 'divisor', 'grantMin', 'deadlineMs'],
  },
} as const;

type ScriptArg = string | number;
type Named<A extends readonly string[]> = { [K in A[number]]: ScriptArg };

/** Where a customer script runs and who calls it: its KEYS and ARGV[1..4], and the last ARGV. */
export interface CustomerCall {
  /** The customer's keys, in customer_script_keys order (scriptKeys in src/redis/keys.ts). */
  keys: readonly string[];
  clockOffsetMs: number;
  projectId: string;
  customerId: string;
  entryIdBase: string;
  /** When the binding that named this customer was read (Redis ms), null when none did. */
  bindingReadAtMs: number | null;
}

/** Where a bound script runs: a customer call without a binding read time, and the bucket of the operation's id. */
interface BoundCall extends Omit<CustomerCall, 'bindingReadAtMs'> {
  bucket: BindingKeys;
}

export type CustomerScriptArgs<N extends CustomerScriptName> = Named<(typeof customer_script_args)[N]>;
type OtherName = Exclude<keyof typeof other_scripts, 'trim'>;
type OtherKeys<N extends keyof typeof other_scripts> = { [K in (typeof other_scripts)[N]['keys'][number]]: string };
type OtherArgs<N extends OtherName> = Named<(typeof other_scripts)[N]['args']> &
  ((typeof other_scripts)[N] extends { rest: infer R extends string } ? { [K in R]: readonly ScriptArg[] } : unknown);

/** Orders named arguments as a script's header lists them; a missing one is a programming error. */
function ordered(script: string, names: readonly string[], args: Record<string, unknown>): ScriptArg[] {
  return names.map((n) => {
    const v = args[n];
    if (typeof v !== 'string' && typeof v !== 'number') throw new Error(`${script}: argument ${n} is missing`);
    return v;
  });
}

export type ScriptApi = {
  [N in CustomerScriptName]: (call: CustomerCall, args: CustomerScriptArgs<N>) => Promise<ScriptReply>;
} & {
  [N in BoundOperation as `bound_${N}`]: (call: BoundCall, args: CustomerScriptArgs<N>) => Promise<ScriptReply>;
} & {
  /** Any customer script by name (callers that choose the script at run time). */
  customer<N extends CustomerScriptName>(name: N, call: CustomerCall, args: CustomerScriptArgs<N>): Promise<ScriptReply>;
  /** The bound script of an operation, by the operation's name. */
  bound<N extends BoundOperation>(op: N, call: BoundCall, args: CustomerScriptArgs<N>): Promise<ScriptReply>;
  bind(keys: OtherKeys<'bind'>, args: OtherArgs<'bind'>): Promise<[number, string, string, number]>;
  unbind(keys: OtherKeys<'unbind'>, args: OtherArgs<'unbind'>): Promise<number>;
  unclaim(keys: OtherKeys<'unclaim'>, args: OtherArgs<'unclaim'>): Promise<number>;
  restore(keys: OtherKeys<'restore'>, args: OtherArgs<'restore'>): Promise<unknown>;
  trimScan(keys: OtherKeys<'trim'>, args: { retentionMs: number; countMax: number }): Promise<[string[], string, string, number]>;
  trimMark(keys: OtherKeys<'trim'>, args: { cutoff: string; deleteAtMs: number; members: readonly string[] }): Promise<number>;
  trim_due(keys: OtherKeys<'trim_due'>, args: OtherArgs<'trim_due'>): Promise<unknown>;
  plan_commit(keys: OtherKeys<'plan_commit'>, args: OtherArgs<'plan_commit'>): Promise<unknown>;
  plan_reserve(keys: OtherKeys<'plan_reserve'>, args: OtherArgs<'plan_reserve'>): Promise<[number, number, number]>;
  plan_lease(keys: OtherKeys<'plan_lease'>, args: OtherArgs<'plan_lease'>): Promise<[number, number, number, number, number, number]>;
};

/** The typed functions over a set of registered scripts (registerScripts, or the generation guard's wrapper). */
export function scriptApi(scripts: Scripts): ScriptApi {
  const argv = (name: CustomerScriptName, call: Omit<CustomerCall, 'bindingReadAtMs'>, args: Record<string, unknown>, bindingReadAtMs: number | null) => [
    call.clockOffsetMs, call.projectId, call.customerId, call.entryIdBase,
    ...ordered(name, customer_script_args[name], args),
    bindingReadAtMs ?? '',
  ];
  const customer = <N extends CustomerScriptName>(name: N, call: CustomerCall, args: CustomerScriptArgs<N>): Promise<ScriptReply> =>
    scripts.run(name, [...call.keys], argv(name, call, args, call.bindingReadAtMs));
  const bound = <N extends BoundOperation>(op: N, call: BoundCall, args: CustomerScriptArgs<N>): Promise<ScriptReply> => {
    const a = argv(op, call, args, null);
    // ARGV[5], the id the script binds: a deposit without a key has none, and no bound script.
    if (a[4] === '') throw new Error(`${boundScriptName(op)}: the id to bind (${customer_script_args[op][0]}) is empty`);
    return scripts.runOther<ScriptReply>(boundScriptName(op), [...call.keys, ...bound_script_bucket_keys.map((k) => call.bucket[k])], a);
  };
  const other = <T>(name: OtherName, keys: Record<string, string>, args: Record<string, unknown>): Promise<T> => {
    const spec = other_scripts[name] as { keys: readonly string[]; args: readonly string[]; rest?: string };
    const rest = spec.rest === undefined ? [] : (args[spec.rest] as readonly ScriptArg[]);
    return scripts.runOther<T>(name, spec.keys.map((k) => keys[k]), [...ordered(name, spec.args, args), ...rest]);
  };
  const trimKeys = (k: OtherKeys<'trim'>) => other_scripts.trim.keys.map((n) => k[n]);
  const api: Record<string, unknown> = {
    customer,
    bound,
    trimScan: (k: OtherKeys<'trim'>, a: { retentionMs: number; countMax: number }) => scripts.runOther('trim', trimKeys(k), ['scan', a.retentionMs, a.countMax]),
    trimMark: (k: OtherKeys<'trim'>, a: { cutoff: string; deleteAtMs: number; members: readonly string[] }) =>
      scripts.runOther('trim', trimKeys(k), ['mark', a.cutoff, a.deleteAtMs, ...a.members]),
  };
  for (const name of customerScriptNames) api[name] = (call: CustomerCall, args: Record<string, unknown>) => customer(name, call, args as never);
  for (const op of boundOperations) api[boundScriptName(op)] = (call: BoundCall, args: Record<string, unknown>) => bound(op, call, args as never);
  for (const name of Object.keys(other_scripts) as (keyof typeof other_scripts)[]) {
    if (name !== 'trim') api[name] = (keys: Record<string, string>, args: Record<string, unknown>) => other(name, keys, args);
  }
  return api as ScriptApi;
}
