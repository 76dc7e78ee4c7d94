/**
 * The Usage screen's search and chart: the date range (UTC days, both included) and the
 * filters read from the address, which the table, the chart and the CSV export all use,
 * and the chart of gateway spend per day over that range (GET /usage, grouped by day and,
 * when chosen, by model or by customer, drawn as stacked bars).
 */
import type { Request } from 'express';
import { barChart, daysFrom, type Bar } from '../chart.js';
import type { PageContext } from '../context.js';
import { count } from '../format.js';
import { queryParam } from '../forms.js';
import type { Html } from '../html.js';

/** How the chart splits each day's bar. */
export type Split = 'none' | 'model' | 'customer';
export const splits: readonly [Split, string][] = [
  ['none', 'no split'],
  ['model', 'by model'],
  ['customer', 'by customer'],
];

/** The range shown when none is asked for: the last 30 days, today included. */
const range_days_default = 30;
/** The longest range one chart draws (a year and a day, as GET /usage/daily). */
const range_days_max = 366;
/** The series drawn apart; the rest is one "other" series. */
const series_max = 8;
/** GET /usage's largest page, and how many pages one chart reads at most. */
const groups_page = 500;
const group_pages_max = 20;

const day_ms = 86_400_000;
const dayPattern = /^\d{4}-\d{2}-\d{2}$/;

export interface UsageSearch {
  trace_id?: string;
  customer_id?: string;
  model?: string;
  /** The first and the last day, `YYYY-MM-DD` (UTC), both included. */
  from: string;
  to: string;
  split: Split;
  /** Why the range asked for was not taken (the default range is shown instead), or null. */
  problem: string | null;
}

const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);
const isDay = (v: string) => dayPattern.test(v) && dayOf(Date.parse(`${v}T00:00:00Z`)) === v;

/** The search of the address: filters, range (checked; a bad one answers the default with a problem) and split. */
export function searchOf(req: Request, nowMs = Date.now()): UsageSearch {
  const filters = { trace_id: queryParam(req, 'trace_id'), customer_id: queryParam(req, 'customer_id'), model: queryParam(req, 'model') };
  const splitAsked = queryParam(req, 'split');
  const split = splits.find(([s]) => s === splitAsked)?.[0] ?? 'none';
  const today = dayOf(nowMs);
  const fallback = { from: dayOf(nowMs - (range_days_default - 1) * day_ms), to: today };
  const from = queryParam(req, 'from');
  const to = queryParam(req, 'to');
  const bad = [['from', from], ['to', to]].find(([, v]) => v !== undefined && !isDay(v));
  if (bad) return { ...filters, ...fallback, split, problem: `${bad[0]} must be a date, YYYY-MM-DD (UTC): the last ${range_days_default} days are shown` };
  const last = to ?? today;
  const first = from ?? dayOf(Date.parse(`${last}T00:00:00Z`) - (range_days_default - 1) * day_ms);
  if (first > last) return { ...filters, ...fallback, split, problem: `from (${first}) is after to (${last}): the last ${range_days_default} days are shown` };
  const days = (Date.parse(`${last}T00:00:00Z`) - Date.parse(`${first}T00:00:00Z`)) / day_ms + 1;
  if (days > range_days_max) {
    return { ...filters, ...fallback, split, problem: `${count(days)} days is more than one chart draws (${range_days_max}): the last ${range_days_default} days are shown` };
  }
  return { ...filters, from: first, to: last, split, problem: null };
}

/** The API's query for the search: its filters, and the range as ISO times (`to` exclusive: the day after the last). */
export function apiQuery(s: UsageSearch): Record<string, string | undefined> {
  return {
    trace_id: s.trace_id,
    customer_id: s.customer_id,
    model: s.model,
    from: `${s.from}T00:00:00Z`,
    to: `${dayOf(Date.parse(`${s.to}T00:00:00Z`) + day_ms)}T00:00:00Z`,
  };
}

/** The search as the address writes it (for links: the pager, the CSV export). */
export function addressQuery(s: UsageSearch): Record<string, string | undefined> {
  return { trace_id: s.trace_id, customer_id: s.customer_id, model: s.model, from: s.from, to: s.to, split: s.split === 'none' ? undefined : s.split };
}

interface UsageGroup {
  date: string | null;
  customer_id: string | null;
  model: string | null;
  cost_credits: number;
}

/** The gateway spend of the search per day (and model or customer), read page after page of GET /usage. */
async function spendGroups(ctx: PageContext, projectId: string, s: UsageSearch): Promise<UsageGroup[]> {
  const query = { ...apiQuery(s), project_id: projectId, group_by: s.split === 'none' ? 'day' : `day,${s.split}`, limit: String(groups_page) };
  const groups: UsageGroup[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < group_pages_max; page++) {
    const { body } = await ctx.api<{ data: UsageGroup[]; next_cursor: string | null }>('GET', '/usage', { query: { ...query, cursor } });
    groups.push(...body.data);
    if (body.next_cursor === null) break;
    cursor = body.next_cursor;
  }
  return groups;
}

/**
 * The chart of the search: gateway spend per day over its range, split as chosen. The
 * series with the most spend are drawn apart, the rest as one "other".
 */
export async function spendChart(ctx: PageContext, projectId: string, s: UsageSearch): Promise<{ chart: Html; total: number }> {
  const groups = await spendGroups(ctx, projectId, s);
  const total = groups.reduce((a, g) => a + g.cost_credits, 0);
  const title = 'Gateway spend per day (credits)';
  const format = (v: number) => `${count(v)} credits`;
  const days = daysFrom(s.from, s.to);
  if (s.split === 'none') {
    const byDay = new Map(groups.map((g) => [g.date ?? '', g.cost_credits]));
    return { chart: barChart({ testid: 'usage-daily-chart', title, bars: days.map((label) => ({ label, value: byDay.get(label) ?? 0 })), format }), total };
  }
  const keyOf = (g: UsageGroup) => (s.split === 'model' ? g.model : g.customer_id) ?? '';
  const spendOf = new Map<string, number>();
  for (const g of groups) spendOf.set(keyOf(g), (spendOf.get(keyOf(g)) ?? 0) + g.cost_credits);
  const ranked = [...spendOf.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([k]) => k);
  const apart = ranked.length <= series_max ? ranked : ranked.slice(0, series_max - 1);
  const series = ranked.length <= series_max ? apart : [...apart, `other (${count(ranked.length - apart.length)} more)`];
  const indexOf = (key: string) => (apart.includes(key) ? apart.indexOf(key) : series.length - 1);
  const byDay = new Map<string, UsageGroup[]>();
  for (const g of groups) {
    const list = byDay.get(g.date ?? '');
    if (list) list.push(g);
    else byDay.set(g.date ?? '', [g]);
  }
  const bars: Bar[] = days.map((label) => {
    const parts = new Map<number, number>();
    for (const g of byDay.get(label) ?? []) parts.set(indexOf(keyOf(g)), (parts.get(indexOf(keyOf(g))) ?? 0) + g.cost_credits);
    const list = [...parts.entries()].sort((a, b) => a[0] - b[0]).map(([i, value]) => ({ series: i, value }));
    return { label, value: list.reduce((a, p) => a + p.value, 0), parts: list };
  });
  return { chart: barChart({ testid: 'usage-daily-chart', title: `${title}, ${s.split === 'model' ? 'by model' : 'by customer'}`, bars, format, series }), total };
}
