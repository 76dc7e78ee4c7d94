/**
 * A process's resident memory while a bench runs: VmRSS from /proc/<pid>/status, read once
 * at the start (idle) and every sample_interval_ms after it (the peak).
 */
import { readFileSync } from 'node:fs';

export const sample_interval_ms = 20;

export interface RssReading {
  idleMb: number;
  peakMb: number;
}

/** VmRSS in MB, or NaN (not Linux, or the process is gone). */
export function rssMb(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

export function rssSampler(pid: number): { stop(): RssReading } {
  const idleMb = rssMb(pid);
  let peakMb = idleMb;
  const timer = setInterval(() => {
    const now = rssMb(pid);
    if (now > peakMb) peakMb = now;
  }, sample_interval_ms);
  return {
    stop() {
      clearInterval(timer);
      return { idleMb, peakMb: Math.max(peakMb, rssMb(pid)) };
    },
  };
}
