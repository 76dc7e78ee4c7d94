/**
 * HTML from tagged templates. Every interpolated value goes through `escapeHtml` unless it
 * is already `Html` (the output of another template), so a value from a caller, a customer
 * or the database can never become markup: the one place the page turns text into HTML.
 * Templates quote every attribute with double quotes, which the escaping covers.
 */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

export type HtmlValue = Html | string | number | boolean | null | undefined | readonly HtmlValue[];

const escapes: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => escapes[c]);
}

/** A value as HTML: markup as it is, lists joined, nothing for null, undefined and false. */
function render(v: HtmlValue): string {
  if (v instanceof Html) return v.text;
  if (Array.isArray(v)) return v.map(render).join('');
  if (v === null || v === undefined || v === false) return '';
  return escapeHtml(String(v));
}

export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): Html {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new Html(out);
}

/** A path under /dashboard from segments, each percent-encoded: ids never change a URL's shape. */
export function pagePath(...segments: string[]): string {
  return `/dashboard/${segments.map(encodeURIComponent).join('/')}`;
}

/** `path` with the query parameters that have a value. */
export function withQuery(path: string, query: Record<string, string | null | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const text = q.toString();
  return text === '' ? path : `${path}?${text}`;
}
