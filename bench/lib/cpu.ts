/**
 * CPU accounting for a measurement: how many CPU seconds each part of the system (the
 * server under test, workers, PostgreSQL backends, RedisClient, the load generator) used while
 * it ran. On a shared machine this is steadier than throughput, and per request it says
 * where the time goes.
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { RedisClient } from '../../src/redis/client.js';
import { redisCpuSeconds } from './redis.js';

/** Cumulative CPU seconds, per process (or other counter) id. */
export type CpuCounters = Map<string, number>;

export interface CpuSource {
  name: string;
  read(): Promise<CpuCounters>;
}

/**
 * CPU seconds (user + system) a process has used, from /proc/<pid>/stat (Linux; NaN
 * elsewhere or when the process is gone).
 */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which is in parentheses and may contain spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // USER_HZ, which Linux fixes at 100 for user space.
    const ticksPerSecond = 100;
    return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** Pids whose command line matches, e.g. PostgreSQL backends of one database. */
export function pidsMatching(pattern: RegExp): number[] {
  const pids: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return pids;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (pattern.test(readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' '))) pids.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

export function processCpu(name: string, pid: number): CpuSource {
  return { name, read: async () => new Map([[String(pid), cpuSeconds(pid)]]) };
}

/** Processes that come and go (a database's backends); one that exits mid-run loses its share. */
export function matchingProcessesCpu(name: string, pattern: RegExp): CpuSource {
  return {
    name,
    read: async () => new Map(pidsMatching(pattern).map((pid) => [String(pid), cpuSeconds(pid)] as const).filter(([, s]) => Number.isFinite(s))),
  };
}

export function redisCpu(name: string, redis: RedisClient): CpuSource {
  return { name, read: async () => new Map([['redis', await redisCpuSeconds(redis)]]) };
}

export function selfCpu(name: string): CpuSource {
  return {
    name,
    read: async () => {
      const u = process.cpuUsage();
      return new Map([['self', (u.user + u.system) / 1e6]]);
    },
  };
}

/** CPU seconds used between two readings; counters that appeared in between count from 0. */
export function cpuDelta(before: CpuCounters, after: CpuCounters): number {
  let total = 0;
  for (const [id, seconds] of after) total += seconds - (before.get(id) ?? 0);
  return total;
}

/** Reads every source before and after `work`; returns CPU seconds per source name. */
export async function withCpu<T>(sources: CpuSource[], work: () => Promise<T>): Promise<{ result: T; cpu: Record<string, number>; wallS: number }> {
  const before = await Promise.all(sources.map((s) => s.read()));
  const t0 = performance.now();
  const result = await work();
  const wallS = (performance.now() - t0) / 1000;
  const after = await Promise.all(sources.map((s) => s.read()));
  const cpu: Record<string, number> = {};
  sources.forEach((s, i) => (cpu[s.name] = cpuDelta(before[i], after[i])));
  return { result, cpu, wallS };
}

/** Clock ticks of all CPUs since boot (/proc/stat): all of them, and those stolen by the hypervisor. */
export interface MachineTicks {
  total: number;
  steal: number;
}

/** NaN fields off Linux. */
export function machineTicks(): MachineTicks {
  try {
    // cpu user nice system idle iowait irq softirq steal guest guest_nice; guest time is
    // already counted in user.
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
    return { total: fields.reduce((a, b) => a + b, 0), steal: fields[7] };
  } catch {
    return { total: Number.NaN, steal: Number.NaN };
  }
}

/**
 * The share of a VM's CPU time the hypervisor gave to others between two readings: a
 * process that was runnable then simply did not run, which shows as latency and lost
 * throughput that no code change explains.
 */
export function stealShare(before: MachineTicks, after: MachineTicks): number {
  return (after.steal - before.steal) / (after.total - before.total);
}
