/**
 * The OpenAI embeddings wire format of the mock upstream (`POST /v1/embeddings`): the
 * request's checks, its deterministic token count and vectors, and the answer, each
 * vector as floats or as base64 of little-endian float32 (what `openai`'s
 * `embeddings.create` asks for by default, and decodes). See docs/MOCK_UPSTREAM.md.
 */
import { countWords } from './controls.js';

/** Dimensions of a vector when the request names none. */
export const embedding_dimensions_default = 8;

type EmbeddingInput = string | number[];

function isTokenArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === 'number' && Number.isInteger(t) && t >= 0);
}

/** The inputs of a request, one per vector, or null when `input` is not one of OpenAI's four shapes. */
export function embeddingInputs(input: unknown): EmbeddingInput[] | null {
  if (typeof input === 'string') return input.length > 0 ? [input] : null;
  if (!Array.isArray(input) || input.length === 0) return null;
  if (input.every((s) => typeof s === 'string' && s.length > 0)) return input as string[];
  if (isTokenArray(input)) return [input];
  if (input.every(isTokenArray)) return input as number[][];
  return null;
}

/** The texts of a request's `input`, where directives are read. */
export function embeddingTexts(body: unknown): string[] {
  const inputs = embeddingInputs((body as { input?: unknown } | null)?.input);
  return inputs === null ? [] : inputs.filter((i): i is string => typeof i === 'string');
}

/** Input tokens: the words of each text (directives removed), the length of each token array. */
export function embeddingTokens(inputs: readonly EmbeddingInput[]): number {
  let tokens = 0;
  for (const i of inputs) tokens += typeof i === 'string' ? countWords(i) : i.length;
  return tokens;
}

/** Why a request is refused as OpenAI would (400): [message, param], or null. */
export function invalidEmbeddings(b: Record<string, unknown>): [message: string, param: string] | null {
  if (b.input === undefined) return ["'input' is a required property", 'input'];
  if (embeddingInputs(b.input) === null) return ["'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.", 'input'];
  const f = b.encoding_format;
  if (f !== undefined && f !== null && f !== 'float' && f !== 'base64') return [`Invalid value: '${String(f)}'. Supported values are: 'float' and 'base64'.`, 'encoding_format'];
  const d = b.dimensions;
  if (d !== undefined && d !== null && !(typeof d === 'number' && Number.isInteger(d) && d >= 1)) return ["Invalid 'dimensions': expected an integer of at least 1.", 'dimensions'];
  return null;
}

/**
 * A deterministic vector of an input: each value a multiple of 1/1024 in [-1, 1), exact as
 * a float32, so the float and base64 answers decode to the same numbers.
 */
export function mockVector(input: EmbeddingInput, dimensions: number): number[] {
  const text = typeof input === 'string' ? input : input.join(',');
  let seed = 2166136261;
  for (let i = 0; i < text.length; i++) seed = Math.imul(seed ^ text.charCodeAt(i), 16777619) >>> 0;
  return Array.from({ length: dimensions }, (_, j) => ((Math.imul(seed + j * 31, 2654435761) >>> 0) % 2048 - 1024) / 1024);
}

/** The answer to an embeddings request; without usage when `tokens` is null (the `no_usage` control). */
export function embeddingsJson(b: Record<string, unknown> & { model: string }, inputs: readonly EmbeddingInput[], tokens: number | null): string {
  const dimensions = typeof b.dimensions === 'number' ? b.dimensions : embedding_dimensions_default;
  const base64 = b.encoding_format === 'base64';
  return JSON.stringify({
    object: 'list',
    data: inputs.map((input, index) => {
      const vector = mockVector(input, dimensions);
      return { object: 'embedding', index, embedding: base64 ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector };
    }),
    model: b.model,
    ...(tokens === null ? {} : { usage: { prompt_tokens: tokens, total_tokens: tokens } }),
  });
}
