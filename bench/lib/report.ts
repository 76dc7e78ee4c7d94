/**
 * Bench output: markdown tables, the machine a run happened on, and a named section of a
 * markdown file that each bench rewrites without touching the others' sections.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';

export type Cell = string | number;

/** A GitHub markdown table; numbers are right-aligned. */
export function markdownTable(header: string[], rows: Cell[][]): string {
  const text = rows.map((r) => r.map(String));
  const widths = header.map((h, i) => Math.max(h.length, 3, ...text.map((r) => (r[i] ?? '').length)));
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || /^[\d.,x%<>= -]*$/.test(String(r[i] ?? ''))));
  const line = (cells: string[]) => `| ${cells.map((c, i) => (numeric[i] ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (numeric[i] ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`;
  return [line(header), rule, ...text.map(line)].join('\n');
}

export const fmt = {
  int: (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-'),
  ms: (n: number) => (Number.isFinite(n) ? n.toFixed(2) : '-'),
  ratio: (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}x` : '-'),
};

export interface MachineInfo {
  cpus: number;
  cpuModel: string;
  node: string;
  /** `uptime` output: load averages over 1, 5 and 15 minutes. */
  uptime: string;
}

export function uptime(): string {
  try {
    return execFileSync('uptime', { encoding: 'utf8' }).trim();
  } catch {
    return `load average: ${loadavg().map((l) => l.toFixed(2)).join(', ')}`;
  }
}

export function machineInfo(): MachineInfo {
  return { cpus: availableParallelism(), cpuModel: cpus()[0]?.model ?? 'unknown', node: process.version, uptime: uptime() };
}

const markers = (name: string) => [`<!-- bench:${name}:start -->`, `<!-- bench:${name}:end -->`] as const;

/**
 * Replaces the text between the `bench:<name>` markers of a markdown file, appending the
 * marked section when the file has none, and creating the file when missing.
 */
export function writeSection(path: string, name: string, body: string, fileTitle = '# Performance'): void {
  const [start, end] = markers(name);
  const block = `${start}\n${body.trim()}\n${end}`;
  const current = existsSync(path) ? readFileSync(path, 'utf8') : `${fileTitle}\n`;
  const from = current.indexOf(start);
  const to = current.indexOf(end);
  const next =
    from >= 0 && to > from ? `${current.slice(0, from)}${block}${current.slice(to + end.length)}` : `${current.trimEnd()}\n\n${block}\n`;
  writeFileSync(path, next);
}
