/**
 * Model prices from the @pydantic/genai-prices catalogue (docs/API.md, "Prices from the
 * catalogue"), resolved when a model is written, never per call: the catalogue's USD per
 * million tokens converted exactly to credits per million tokens (decimal arithmetic; a
 * fraction of a credit rounds up, never down). What one stored price per kind cannot say is
 * refused for the kinds it touches unless the writer gives them: a price that changes with
 * the prompt's size (tiers), with the time of day, or with the tokens' modality (audio,
 * image, video). A cache write's price is the dearest of its durations (5 minutes, 1 hour);
 * a cache price the catalogue lacks is its input price (the upstream bills those tokens as
 * input). Prices per request, search, page or hour are not token prices: not taken.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { calcPrice, findProvider, type ModelInfo, type ModelPrice, type PriceCalculation } from '@pydantic/genai-prices';
import { ApiError } from '../errors/catalogue.js';
import { closestModelId } from '../gateway/model-not-found.js';
import { credits_per_usd, model_price_kinds, price_per_million_credits_max, type ModelPriceKind, type PriceCatalogueRef } from './models.js';

const packageDir = dirname(dirname(createRequire(import.meta.url).resolve('@pydantic/genai-prices')));
/** The catalogue version stored with a model's catalogue prices. */
export const catalogue_version: string = (JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as { version: string }).version;

/** A catalogue price in credits per million tokens, or why it cannot be one stored number. */
type Resolved = { credits: number } | { refused: string };

/** The catalogue's prices of one model, per kind, and the entry they came from. */
export interface CataloguePrices {
  ref: PriceCatalogueRef;
  prices: Record<ModelPriceKind, Resolved>;
}

/**
 * `usd` (a catalogue price: USD per million tokens) in credits per million tokens, exact:
 * the number's shortest decimal form times 10^6, a fraction of a credit rounded up.
 */
export function usdToCreditsRoundedUp(usd: number): number {
  const m = /^(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/.exec(String(usd));
  if (!m || !Number.isFinite(usd)) throw new Error(`not a catalogue price: ${usd}`);
  const digits = BigInt(`${m[1]}${m[2] ?? ''}`);
  const exponent = Number(m[3] ?? 0) - (m[2]?.length ?? 0) + Math.log10(credits_per_usd);
  if (exponent >= 0) return Number(digits * 10n ** BigInt(exponent));
  const scale = 10n ** BigInt(-exponent);
  return Number((digits + scale - 1n) / scale);
}

const variantPattern = /(audio|image|video)/;

/** The catalogue keys that price tokens of `kind` (per million tokens), by name. */
function keysOf(price: ModelPrice, kind: ModelPriceKind): string[] {
  return Object.keys(price).filter((k) => {
    if (!k.endsWith('_mtok') || price[k] === undefined) return false;
    if (kind === 'cache_read') return k.startsWith('cache') && k.includes('read');
    if (kind === 'cache_write') return k.startsWith('cache') && k.includes('write');
    return !k.startsWith('cache') && k.startsWith(kind);
  });
}

/** One kind's stored price from the catalogue's keys for it (see the module comment). */
function resolveKind(price: ModelPrice, kind: ModelPriceKind, field: string): Resolved {
  const keys = keysOf(price, kind);
  const variants = keys.filter((k) => variantPattern.test(k));
  if (variants.length > 0) {
    return { refused: `the catalogue prices ${kind} tokens by modality (${keys.join(', ')}) and the gateway stores one price: give ${field} explicitly` };
  }
  const tiered = keys.find((k) => typeof price[k] === 'object');
  if (tiered !== undefined) {
    const tiers = price[tiered] as { base: number; tiers: { start: number; price: number }[] };
    const dearest = Math.max(tiers.base, ...tiers.tiers.map((t) => t.price));
    return {
      refused: `the catalogue's ${tiered} changes with the prompt's size (from ${tiers.tiers.map((t) => `${t.start} tokens`).join(', ')}) and the gateway stores one price: give ${field} explicitly (the dearest tier is ${usdToCreditsRoundedUp(dearest)} credits)`,
    };
  }
  const usd = keys.map((k) => price[k] as number);
  if (usd.length === 0) {
    if (kind === 'cache_read' || kind === 'cache_write') return resolveKind(price, 'input', field);
    return { refused: `the catalogue has no ${kind} price for this model: give ${field} explicitly` };
  }
  const credits = usdToCreditsRoundedUp(Math.max(...usd));
  if (credits > price_per_million_credits_max) return { refused: `the catalogue's ${kind} price is above ${price_per_million_credits_max} credits per million tokens` };
  return { credits };
}

/** The catalogue model, or the 400 naming `price_catalogue.model` (with the nearest id, if any). */
function lookup(providerId: string, modelId: string): NonNullable<PriceCalculation> {
  const provider = findProvider({ providerId });
  if (provider === undefined || provider.id !== providerId.toLowerCase()) {
    throw new ApiError('invalid_request', {
      param: 'price_catalogue.provider',
      message: `price_catalogue.provider: the price catalogue (genai-prices ${catalogue_version}) has no provider ${providerId}${provider ? `; did you mean ${provider.id}?` : ''}`,
    });
  }
  let found: PriceCalculation | null;
  try {
    found = calcPrice({ input_tokens: 0 }, modelId, { providerId: provider.id });
  } catch {
    found = null; // catalogue data it cannot price: as good as absent
  }
  if (found === null || found.provider.id !== provider.id) {
    const near = closestModelId(modelId, provider.models.map((m: ModelInfo) => m.id));
    throw new ApiError('invalid_request', {
      param: 'price_catalogue.model',
      message: `price_catalogue.model: the price catalogue (genai-prices ${catalogue_version}) has no model ${modelId} for provider ${provider.id}${near === null ? '' : `; did you mean ${near}?`}`,
      extra: { suggested_model: near },
    });
  }
  return found;
}

/** The catalogue's prices of `provider`/`model` today, per kind (each a price or why not). */
export function cataloguePrices(providerId: string, modelId: string): CataloguePrices {
  const found = lookup(providerId, modelId);
  const byTime = Array.isArray(found.model.prices) && found.model.prices.some((p) => p.constraint?.type === 'time_of_date');
  const prices = Object.fromEntries(
    model_price_kinds.map((kind): [ModelPriceKind, Resolved] => {
      const field = `${kind}_price_per_million_credits`;
      if (byTime) return [kind, { refused: `the catalogue's prices of this model change with the time of day and the gateway stores one price: give ${field} explicitly` }];
      return [kind, resolveKind(found.model_price, kind, field)];
    }),
  ) as Record<ModelPriceKind, Resolved>;
  return { ref: { provider: found.provider.id, model: found.model.id, version: catalogue_version }, prices };
}
