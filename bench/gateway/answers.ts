/**
 * What every contender of the gateway bench is sent and what it must answer: one OpenAI
 * chat completion (or, for the Responses API rows, one response), whole or streamed, and a
 * check that the answer is the mock upstream's, token for token, with its usage. A contender that answers anything else (an error, a
 * truncated stream, a body of its own) fails the check, so it cannot pass for fast.
 */
import { mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';

/** The mock's default output length (docs/MOCK_UPSTREAM.md); the request asks for no other. */
export const output_tokens = 12;
/** The client's output limit: the gateway holds credits for this many output tokens. */
export const max_completion_tokens = 64;

/** The OpenAI API a contender is called with: chat completions, or the Responses API. */
export type Api = 'chat' | 'responses';

/** The path of each API. */
export const api_paths: Record<Api, string> = { chat: '/v1/chat/completions', responses: '/v1/responses' };

const prompt = 'Summarize how metered billing works in one sentence.';

/** The request body; `latencyMs` asks the mock, through the message text, to wait that long. */
export function requestBody(model: string, stream: boolean, latencyMs = 0, api: Api = 'chat'): string {
  const directive = latencyMs > 0 ? ` ${mockDirective({ latency_ms: latencyMs })}` : '';
  // The Responses API sends its usage in every stream: nothing to ask for.
  if (api === 'responses') return JSON.stringify({ model, input: `${prompt}${directive}`, max_output_tokens: max_completion_tokens, ...(stream ? { stream: true } : {}) });
  return JSON.stringify({
    model,
    messages: [{ role: 'user', content: `${prompt}${directive}` }],
    max_completion_tokens,
    // The usage chunk is asked for by every client, so every contender relays the same stream.
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
}

/** The fields of a chat completion, or of one of its chunks, that the check reads. */
interface Completion {
  model?: unknown;
  choices?: { message?: { content?: unknown }; delta?: { content?: unknown } }[];
  usage?: { completion_tokens?: unknown };
}

/** Returns null when `text` is the mock's answer for `model`, else what is wrong with it. */
export function checkAnswer(stream: boolean, model: string, api: Api = 'chat'): (status: number, text: string) => string | null {
  const expected = mockOutputText(output_tokens);
  const read = api === 'responses' ? (stream ? streamedResponse : wholeResponse) : stream ? streamedAnswer : wholeAnswer;
  return (status, text) => {
    if (status !== 200) return `status ${status}: ${text.slice(0, 300)}`;
    try {
      const got = read(text);
      if (got.model !== model) return `model ${JSON.stringify(got.model)}, expected ${JSON.stringify(model)}`;
      if (got.content !== expected) return `content ${JSON.stringify(typeof got.content === 'string' ? got.content.slice(0, 100) : got.content)}, expected ${JSON.stringify(expected)}`;
      if (got.completionTokens !== output_tokens) return `usage.completion_tokens ${got.completionTokens}, expected ${output_tokens}`;
      return null;
    } catch (err) {
      return `unreadable answer (${(err as Error).message}): ${text.slice(0, 300)}`;
    }
  };
}

interface Answer {
  model: unknown;
  content: unknown;
  completionTokens: unknown;
}

function wholeAnswer(text: string): Answer {
  const body = JSON.parse(text) as Completion;
  return { model: body.model, content: body.choices?.[0]?.message?.content, completionTokens: body.usage?.completion_tokens };
}

function streamedAnswer(text: string): Answer {
  let model: unknown;
  let content = '';
  let completionTokens: unknown;
  let done = false;
  for (const event of text.split(/\r?\n\r?\n/)) {
    for (const line of event.split(/\r?\n/)) {
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      const chunk = JSON.parse(data) as Completion;
      model ??= chunk.model;
      const delta = chunk.choices?.[0]?.delta?.content;
      if (typeof delta === 'string') content += delta;
      if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
    }
  }
  if (!done) throw new Error('the stream has no [DONE]');
  return { model, content, completionTokens };
}

/** The fields of a Responses API answer, or of one of its events, that the check reads. */
interface ResponseFields {
  model?: unknown;
  output?: { content?: { text?: unknown }[] }[];
  usage?: { output_tokens?: unknown };
}

function wholeResponse(text: string): Answer {
  const body = JSON.parse(text) as ResponseFields;
  return { model: body.model, content: body.output?.[0]?.content?.[0]?.text, completionTokens: body.usage?.output_tokens };
}

/** The text deltas of a Responses stream, and the model and usage of its `response.completed`. */
function streamedResponse(text: string): Answer {
  let content = '';
  let final: ResponseFields | undefined;
  for (const event of text.split(/\r?\n\r?\n/)) {
    const data = event.split(/\r?\n/).find((line) => line.startsWith('data:'));
    if (data === undefined) continue;
    const e = JSON.parse(data.slice(5)) as { type?: unknown; delta?: unknown; response?: ResponseFields };
    if (e.type === 'response.output_text.delta' && typeof e.delta === 'string') content += e.delta;
    if (e.type === 'response.completed') final = e.response;
  }
  if (final === undefined) throw new Error('the stream has no response.completed');
  return { model: final.model, content, completionTokens: final.usage?.output_tokens };
}
