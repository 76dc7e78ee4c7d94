/**
 * How the page shows numbers, amounts and times: every count, credit amount and USD
 * amount of every screen goes through this module, so all have thousands separators
 * (`1,234,567`); credits come with their USD value, times in UTC.
 */
import { creditsToUsd } from '../ledger/amounts.js';
import { html, type Html } from './html.js';

const grouping = new Intl.NumberFormat('en-US');

/** A number with thousands separators: `25,000,000`. */
export function count(n: number): string {
  return grouping.format(n);
}

/** A limit in words: `5 members`, `any number of members` (null: unlimited). */
export function limitText(max: number | null, one: string, many: string): string {
  return max === null ? `any number of ${many}` : `${count(max)} ${max === 1 ? one : many}`;
}

/**
 * An exact decimal text (`"1234567.000125"`, as the API writes USD amounts) with
 * thousands separators and every digit kept: `1,234,567.000125`.
 */
function decimal(text: string): string {
  const negative = text.startsWith('-');
  const [whole, fraction] = text.replace(/^-/, '').split('.');
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return `${negative ? '-' : ''}${grouped}${fraction === undefined ? '' : `.${fraction}`}`;
}

/** An exact decimal USD amount (`"1234.5"`, as the API writes them) as `$1,234.50`: cents always, smaller digits only when not zero. */
export function dollars(text: string): string {
  const [whole, fraction = ''] = text.split('.');
  const digits = fraction.padEnd(2, '0').replace(/(\d{2}\d*?)0+$/, '$1');
  return `$${decimal(`${whole}.${digits}`)}`.replace('$-', '-$');
}

/** An integer of credits and its exact USD value (1 USD = 10^6 credits). */
export function usd(credits: number): string {
  return dollars(creditsToUsd(credits));
}

/**
 * A price per million tokens (integer credits) as credits per token, exactly:
 * 2,500,000 is `2.5`. (A millionth of credits is the same shift as credits to USD.)
 */
export function perToken(pricePerMillion: number): string {
  return decimal(creditsToUsd(pricePerMillion));
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
