/**
 * Bar charts as inline SVG made on the server: no chart library, no script, and the CSP
 * allows them as they are (presentation attributes, no inline style). The SVG stretches
 * to its box (preserveAspectRatio="none"), which would stretch text too: its labels (the
 * first and last day, the largest value) are HTML around it, in the page's font.
 */
import { count } from './format.js';
import { html, type Html } from './html.js';

export interface Bar {
  /** The x label: a day, `YYYY-MM-DD`. */
  label: string;
  value: number;
}

const width = 720;
const height = 200;
const pad = { top: 4, right: 8, bottom: 4, left: 8 };

/** Every day of the `days` days ending today (UTC), with the values given and 0 elsewhere. */
export function lastDays(values: ReadonlyMap<string, number>, days: number, nowMs = Date.now()): Bar[] {
  const bars: Bar[] = [];
  for (let i = days - 1; i >= 0; i--) {
    const label = new Date(nowMs - i * 86_400_000).toISOString().slice(0, 10);
    bars.push({ label, value: values.get(label) ?? 0 });
  }
  return bars;
}

export function barChart(o: { testid: string; title: string; bars: readonly Bar[]; format?: (v: number) => string }): Html {
  const format = o.format ?? count;
  const max = Math.max(1, ...o.bars.map((b) => b.value));
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const slot = plotW / Math.max(1, o.bars.length);
  const barW = Math.max(1, slot * 0.8);
  const rects = o.bars.map((b, i) => {
    const h = b.value === 0 ? 0 : Math.max(1, (b.value / max) * plotH);
    const x = pad.left + i * slot + (slot - barW) / 2;
    const y = pad.top + plotH - h;
    return html`<rect class="bar" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${barW.toFixed(1)}" height="${h.toFixed(1)}"><title>${b.label}: ${format(b.value)}</title></rect>`;
  });
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
<figcaption>${o.title}: ${format(total)} over ${o.bars.length} days</figcaption>
</figure>`;
}
