/**
 * What every contender of the gateway bench is sent and what it must answer: one OpenAI
 * chat completion, whole or streamed, and a check that the answer is the mock upstream's,
 * token for token, with its usage. A contender that answers anything else (an error, a
 * truncated stream, a body of its own) fails the check, so it cannot pass for fast.
 */
import { mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';

/** The mock's default output length (docs/MOCK_UPSTREAM.md); the request asks for no other. */
export const output_tokens = 12;
/** The client's output limit: the gateway holds credits for this many output tokens. */
export const max_completion_tokens = 64;

/** The request body; `latencyMs` asks the mock, through the message text, to wait that long. */
export function requestBody(model: string, stream: boolean, latencyMs = 0): string {
  const directive = latencyMs > 0 ? ` ${mockDirective({ latency_ms: latencyMs })}` : '';
  return JSON.stringify({
    model,
    messages: [{ role: 'user', content: `Summarize how metered billing works in one sentence.${directive}` }],
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
export function checkAnswer(stream: boolean, model: string): (status: number, text: string) => string | null {
  const expected = mockOutputText(output_tokens);
  return (status, text) => {
    if (status !== 200) return `status ${status}: ${text.slice(0, 300)}`;
    try {
      const got = stream ? streamedAnswer(text) : wholeAnswer(text);
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
