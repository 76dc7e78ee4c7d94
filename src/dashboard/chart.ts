/**
 * Bar charts as inline SVG made on the server: no chart library, no script, and the CSP
 * allows them as they are (presentation attributes, no inline style). A bar may be split
 * into parts, one per series (a model, a customer), stacked in the series' colours with
 * a legend under the chart. The SVG stretches to its box (preserveAspectRatio="none"),
 * which would stretch text too: its labels (the first and last day, the largest value)
 * are HTML around it, in the page's font.
 */
import { count } from './format.js';
import { html, type Html } from './html.js';

export interface Bar {
  /** The x label: a day, `YYYY-MM-DD`. */
  label: string;
  value: number;
  /** The bar split by series: the index of each part's series (in `series`) and its value; they add up to `value`. */
  parts?: readonly { series: number; value: number }[];
}

/** Series colours, told apart in light and dark themes; more series than colours reuse them. */
const palette = ['#2563eb', '#f59e0b', '#10b981', '#ef4444', '#8b5cf6', '#06b6d4', '#ec4899', '#84cc16', '#6b7280'];

const width = 720;
const height = 200;
const pad = { top: 4, right: 8, bottom: 4, left: 8 };

/** Every day (UTC, `YYYY-MM-DD`) from `first` to `last`, both included. */
export function daysFrom(first: string, last: string): string[] {
  const out: string[] = [];
  for (let ms = Date.parse(`${first}T00:00:00Z`); ms <= Date.parse(`${last}T00:00:00Z`); ms += 86_400_000) out.push(new Date(ms).toISOString().slice(0, 10));
  return out;
}

/** Every day of the `days` days ending today (UTC), with the values given and 0 elsewhere. */
export function lastDays(values: ReadonlyMap<string, number>, days: number, nowMs = Date.now()): Bar[] {
  const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
  return daysFrom(day(nowMs - (days - 1) * 86_400_000), day(nowMs)).map((label) => ({ label, value: values.get(label) ?? 0 }));
}

export function barChart(o: { testid: string; title: string; bars: readonly Bar[]; format?: (v: number) => string; series?: readonly string[] }): Html {
  const format = o.format ?? count;
  const max = Math.max(1, ...o.bars.map((b) => b.value));
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const slot = plotW / Math.max(1, o.bars.length);
  const barW = Math.max(1, slot * 0.8);
  const series = o.series ?? [];
  const rects = o.bars.map((b, i) => {
    const x = pad.left + i * slot + (slot - barW) / 2;
    if (b.parts === undefined) {
      const h = b.value === 0 ? 0 : Math.max(1, (b.value / max) * plotH);
      const y = pad.top + plotH - h;
      return html`<rect class="bar" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${barW.toFixed(1)}" height="${h.toFixed(1)}"><title>${b.label}: ${format(b.value)}</title></rect>`;
    }
    let top = pad.top + plotH;
    return b.parts
      .filter((p) => p.value > 0)
      .map((p) => {
        const h = Math.max(1, (p.value / max) * plotH);
        top -= h;
        return html`<rect class="part" data-series="${series[p.series]}" fill="${palette[p.series % palette.length]}" x="${x.toFixed(1)}" y="${top.toFixed(1)}" width="${barW.toFixed(1)}" height="${h.toFixed(1)}"><title>${b.label} · ${series[p.series]}: ${format(p.value)}</title></rect>`;
      });
  });
  const legend =
    series.length === 0
      ? ''
      : html`<ul class="legend" data-testid="${o.testid}-legend">${series.map(
          (name, i) => html`<li><svg viewBox="0 0 10 10" width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="${palette[i % palette.length]}"></rect></svg> ${name}</li>`,
        )}</ul>`;
  const first = o.bars[0]?.label ?? '';
  const last = o.bars[o.bars.length - 1]?.label ?? '';
  const total = o.bars.reduce((a, b) => a + b.value, 0);
  return html`<figure class="chart">
<div class="ticks" aria-hidden="true"><span>max ${format(max === 1 && total === 0 ? 0 : max)}</span></div>
<svg data-testid="${o.testid}" role="img" viewBox="0 0 ${width} ${height}" preserveAspectRatio="none" aria-label="${o.title}: ${format(total)} in total">
<title>${o.title}</title>
<line class="axis" x1="${pad.left}" y1="${pad.top + plotH}" x2="${width - pad.right}" y2="${pad.top + plotH}"></line>
${rects}
</svg>
<div class="ticks" aria-hidden="true"><span>${first}</span><span>${last}</span></div>
${legend}
<figcaption>${o.title}: ${format(total)} over ${o.bars.length} days</figcaption>
</figure>`;
}
