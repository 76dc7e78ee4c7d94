/**
 * Loads lua/<name>-<keys>.lua, splices `--@include <file>` from lua/includes, and
 * registers each script with ioredis defineCommand under a versioned name
 * (`svc_<name>_<sha8>`), so two deployments with different script versions can share one
 * Redis. ioredis sends EVALSHA and falls back to EVAL when Redis lost its script cache.
 */
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RedisClient } from './client.js';

const luaDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'lua');

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
}

export const customerScriptNames = [
  'deposit', 'deduct', 'freeze', 'consume', 'unfreeze', 'expire', 'view', 'gateway_hold', 'gateway_settle', 'gateway_release',
  'trim_sources',
] as const;
export type CustomerScriptName = (typeof customerScriptNames)[number];

interface LoadedScript {
  command: string;
  numberOfKeys: number;
  lua: string;
}

function loadScripts(): Map<string, LoadedScript> {
  const scripts = new Map<string, LoadedScript>();
  for (const file of readdirSync(luaDir)) {
    const m = /^([a-z_]+)-(\d+)\.lua$/.exec(file);
    if (!m) continue;
    const lua = readFileSync(join(luaDir, file), 'utf8').replace(/^--@include (\w+)\s*$/gm, (_, inc: string) =>
      readFileSync(join(luaDir, 'includes', `${inc}.lua`), 'utf8'),
    );
    const sha8 = createHash('sha1').update(lua).digest('hex').slice(0, 8);
    scripts.set(m[1], { command: `svc_${m[1]}_${sha8}`, numberOfKeys: Number(m[2]), lua });
  }
  return scripts;
}

let cached: Map<string, LoadedScript> | undefined;

/** {status, result JSON, TTL auto-consumes applied, TTL ledger entries written, ...}. */
export type ScriptReply = [number, string, number, number, ...unknown[]];

export interface Scripts {
  run(name: CustomerScriptName, keys: string[], args: (string | number)[]): Promise<ScriptReply>;
  /** Any other script under lua/, by name, with its own reply shape. */
  runOther<T = unknown[]>(name: string, keys: string[], args: (string | number)[]): Promise<T>;
}

export function registerScripts(redis: RedisClient): Scripts {
  cached ??= loadScripts();
  const scripts = cached;
  for (const s of scripts.values()) {
    if (!(s.command in redis)) redis.defineCommand(s.command, { numberOfKeys: s.numberOfKeys, lua: s.lua });
  }
  const call = <T>(name: string, keys: string[], args: (string | number)[]): Promise<T> => {
    const s = scripts.get(name);
    if (!s) throw new Error(`no Lua script named ${name}`);
    if (keys.length !== s.numberOfKeys) throw new Error(`${name} takes ${s.numberOfKeys} keys, got ${keys.length}`);
    const fn = (redis as unknown as Record<string, (...a: (string | number)[]) => Promise<T>>)[s.command];
    return fn.call(redis, ...keys, ...args);
  };
  return {
    run: (name, keys, args) => call<ScriptReply>(name, keys, args),
    runOther: (name, keys, args) => call(name, keys, args),
  };
}

/**
 * How a script under lua/ appears on the wire: EVALSHA names it by its SHA1, and ioredis
 * sends the source itself (EVAL) the first time a connection runs it. Tests find its
 * call that way.
 */
export function scriptSource(name: string): { sha1: string; lua: string } {
  cached ??= loadScripts();
  const s = cached.get(name);
  if (!s) throw new Error(`no Lua script named ${name}`);
  return { sha1: createHash('sha1').update(s.lua).digest('hex'), lua: s.lua };
}
