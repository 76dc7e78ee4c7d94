/** How the page shows amounts and times: credits with their USD value, times in UTC. */
import { creditsToUsd } from '../ledger/amounts.js';
import { html, type Html } from './html.js';

const grouping = new Intl.NumberFormat('en-US');

export function count(n: number): string {
  return grouping.format(n);
}

/** A limit in words: `5 members`, `any number of members` (null: unlimited). */
export function limitText(max: number | null, one: string, many: string): string {
  return max === null ? `any number of ${many}` : `${count(max)} ${max === 1 ? one : many}`;
}

/** An integer of credits and its exact USD value (1 USD = 10^6 credits). */
export function usd(credits: number): string {
  const [whole, fraction = ''] = creditsToUsd(credits).split('.');
  // Cents always; smaller digits only when they are not zero.
  const digits = fraction.padEnd(2, '0').replace(/(\d{2}\d*?)0+$/, '$1');
  return `$${grouping.format(Number(whole))}.${digits}`.replace('$-', '-$');
}

export function credits(n: number): Html {
  return html`<span class="amount">${count(n)} credits <span class="usd">(${usd(n)})</span></span>`;
}

export function cents(n: number): string {
  return usd(n * 10_000);
}

/** An ISO time as `YYYY-MM-DD HH:MM UTC`; a dash for none. */
export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}

export function day(iso: string): string {
  return iso.slice(0, 10);
}
