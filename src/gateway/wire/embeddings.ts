/**
 * OpenAI embeddings (`POST /v1/embeddings`): what billing reads of a client's body, the
 * body sent upstream and the usage of the answer. Served by OpenAI-format models only,
 * billed per input token at the model's input price: an embedding generates no output
 * (docs/API.md, "POST /v1/embeddings"). Pure code: no I/O, no clock.
 */
import { copyOf, isCount, isObject, readModel, refused, type BodyFields, type Json, type Usage } from './format.js';

/** Appended to a model's `upstream_base_url`. */
export const embeddings_upstream_path = '/embeddings';

/** Whether `v` is a token array: integers, at least one. */
function isTokenArray(v: unknown): boolean {
  return Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === 'number' && Number.isSafeInteger(t) && t >= 0);
}

/**
 * `input`: a string, an array of strings, a token array, or an array of token arrays, none
 * of them empty. Each token of a token array takes at least a byte of the body, as each
 * token of a text does: the body's bytes bound the input's tokens either way.
 */
function readInput(body: Json): void {
  const input = body.input;
  const valid =
    (typeof input === 'string' && input.length > 0) ||
    (Array.isArray(input) &&
      input.length > 0 &&
      (input.every((s) => typeof s === 'string' && s.length > 0) || isTokenArray(input) || input.every(isTokenArray)));
  if (!valid) throw refused('input', 'input must be a non-empty string, an array of non-empty strings, a token array or an array of token arrays');
}

function readEncodingFormat(body: Json): void {
  const f = body.encoding_format;
  if (f !== undefined && f !== null && f !== 'float' && f !== 'base64') throw refused('encoding_format', 'encoding_format must be float or base64');
}

function readDimensions(body: Json): void {
  const d = body.dimensions;
  if (d !== undefined && d !== null && (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 1)) throw refused('dimensions', 'dimensions must be a positive integer');
}

const no_parts = { images: 0, files: 0 } as const;

/** The body fields billing reads: no stream, no output (limit 0), one answer, no parts. */
export function readEmbeddingsBody(body: Json): BodyFields {
  const model = readModel(body);
  readInput(body);
  readEncodingFormat(body);
  readDimensions(body);
  return { model, stream: false, limit: 0, answers: 1, parts: { ...no_parts } };
}

/** Each check of readEmbeddingsBody on its own, in its order (the 400 lists every invalid field). */
export const embeddingsBodyChecks: readonly ((body: Json) => unknown)[] = [readModel, readInput, readEncodingFormat, readDimensions];

/** The body sent upstream: the client's, with the upstream's model name. */
export function embeddingsUpstreamBody(clientBody: Json, upstreamModel: string): Json {
  const body = copyOf(clientBody);
  body.model = upstreamModel;
  return body;
}

/** `usage.prompt_tokens` of an embeddings answer, all input; null when it has none. */
export function embeddingsUsage(json: unknown): Usage | null {
  if (!isObject(json) || !isObject(json.usage) || !isCount(json.usage.prompt_tokens)) return null;
  return { input: json.usage.prompt_tokens, output: 0, cacheRead: 0, cacheWrite: 0 };
}
