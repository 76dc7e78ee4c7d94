/**
 * The gateway's money rules (docs/API.md, "Gateway"): a call's cost is the exact sum over
 * token kinds of tokens x price per million credits / 10^6, rounded up to a whole credit
 * once per call; its hold is an upper bound of that cost.
 */
import type { Usage } from './adapters.js';
import type { PartCounts } from './wire/format.js';

export interface Prices {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
}

const MILLION = 1_000_000n;

function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/** Exact cost in credits (BigInt inside: tokens x price can pass 2^53). */
export function costOf(usage: Usage, prices: Prices): number {
  const micro =
    BigInt(usage.input) * BigInt(prices.input) +
    BigInt(usage.output) * BigInt(prices.output) +
    BigInt(usage.cacheRead) * BigInt(prices.cacheRead) +
    BigInt(usage.cacheWrite) * BigInt(prices.cacheWrite);
  return Number(ceilDiv(micro, MILLION));
}

/**
 * Upper bound of the input side of a call. A token is at least one byte of the request,
 * so the body's size bounds the prompt, whatever part of it the upstream reads from its
 * cache, at the dearest of the input-side prices. What bytes do not bound (an image or a
 * file named by a URL or an id) comes in `partTokens` (partTokensBound).
 */
export function inputCostBound(requestBytes: number, prices: Prices, partTokens = 0): number {
  const dearest = Math.max(prices.input, prices.cacheRead, prices.cacheWrite);
  return Number(ceilDiv(BigInt(requestBytes + partTokens) * BigInt(dearest), MILLION));
}

/** Tokens one image part and one file part of a request may cost at most (a model's `image_token_bound`, `file_token_bound`). */
export interface PartTokenBounds {
  image: number;
  file: number;
}

/**
 * A PDF's pages the providers read at most (Anthropic and OpenAI: 100 pages per request),
 * and the text tokens of one page (Anthropic: 1,500 to 3,000 per page); each page is also
 * read as an image.
 */
const document_pages_max = 100;
const document_page_text_tokens_max = 3_000;

/**
 * The per-part bounds of a model that sets none: the largest of the providers' published
 * sizing rules (docs/API.md, "What bytes do not bound"), whatever the model's wire format
 * (an OpenAI-format upstream may serve another provider's models):
 * - OpenAI images: the tile rule (85 + 170 per 512 px tile of an image scaled into
 *   2048 x 768: 1,445) and the patch rule (at most 1,536 patches of 32 px, times the
 *   model's multiplier, up to 2.46: 3,779).
 * - Anthropic images: about width x height / 750, the long edge at most 2,576 px on the
 *   high-resolution models: about 4,784 tokens (1,600 on the others).
 * - Files (PDFs): every page's text and its image, at the page cap.
 */
export const image_token_bound_default = 4_784;
export const file_token_bound_default = document_pages_max * (document_page_text_tokens_max + image_token_bound_default);


/**
 * Tokens the parts of a request may cost beyond their bytes: each part at its model's
 * bound, and all of them together at most the model's context window (a prompt the
 * upstream accepts fits in it).
 */
export function partTokensBound(parts: PartCounts, bounds: PartTokenBounds, contextWindow: number): number {
  if (parts.images === 0 && parts.files === 0) return 0;
  return Math.min(parts.images * bounds.image + parts.files * bounds.file, contextWindow);
}
