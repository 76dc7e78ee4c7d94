/**
 * The OpenAI Chat Completions wire format of the mock upstream: the JSON answer, its SSE
 * chunks, the usage object and the error bodies.
 */
import { mockOutputText, mockToolArguments } from './controls.js';
import { base62, type Plan } from './plan.js';

const SYSTEM_FINGERPRINT = 'fp_mock0a1b2c3';

export function openaiErrorBody(status: number, message?: string, code?: string | null, param: string | null = null): string {
  let type = 'invalid_request_error';
  let defCode: string | null = null;
  let defMsg = `Mock upstream error (HTTP ${status}).`;
  if (status === 401) {
    defCode = 'invalid_api_key';
    defMsg = 'Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.';
  } else if (status === 404) {
    defCode = 'model_not_found';
    defMsg = 'The model does not exist or you do not have access to it.';
  } else if (status === 429) {
    type = 'requests';
    defCode = 'rate_limit_exceeded';
    defMsg = 'Rate limit reached for requests (mock). Please try again in 1s.';
  } else if (status >= 500) {
    type = 'server_error';
    defMsg = 'The server had an error while processing your request. Sorry about that!';
  }
  return JSON.stringify({ error: { message: message ?? defMsg, type, param, code: code === undefined ? defCode : code } });
}

function openaiUsage(p: Plan) {
  const prompt = p.input + p.cacheRead;
  const completion = p.output * p.answers;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: p.cacheRead, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

export function openaiJson(p: Plan): string {
  return JSON.stringify({
    id: `chatcmpl-${base62(29)}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: p.model,
    choices: Array.from({ length: p.answers }, (_, index) => ({
      index,
      message: p.tool === null
        ? { role: 'assistant', content: mockOutputText(p.output), refusal: null, annotations: [] }
        : { role: 'assistant', content: null, refusal: null, annotations: [], tool_calls: [{ id: `call_${index}mock`, type: 'function', function: { name: p.tool, arguments: mockToolArguments(p.output).json } }] },
      logprobs: null,
      finish_reason: p.truncated ? 'length' : p.tool === null ? 'stop' : 'tool_calls',
    })),
    ...(p.usage ? { usage: openaiUsage(p) } : {}),
    service_tier: 'default',
    system_fingerprint: SYSTEM_FINGERPRINT,
  });
}

/** Returns the SSE events and how many of them come before the first token delta. */
export function openaiEvents(p: Plan): { events: string[]; preamble: number } {
  const head =
    `data: {"id":"chatcmpl-${base62(29)}","object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},` +
    `"model":${JSON.stringify(p.model)},"service_tier":"default","system_fingerprint":"${SYSTEM_FINGERPRINT}","choices":`;
  const tail = p.includeUsage ? ',"usage":null}\n\n' : '}\n\n';
  const choice = (index: number, delta: string, finish: string | null) =>
    `[{"index":${index},"delta":${delta},"logprobs":null,"finish_reason":${finish === null ? 'null' : `"${finish}"`}}]`;
  const events: string[] = [];
  // Each answer in turn, as OpenAI may send them (the index tells them apart).
  for (let a = 0; a < p.answers; a++) {
    if (p.tool !== null) {
      // A tool call: its id and name first, then the arguments in pieces, as OpenAI streams them.
      events.push(head + choice(a, `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_${a}mock","type":"function","function":{"name":${JSON.stringify(p.tool)},"arguments":""}}],"refusal":null}`, null) + tail);
      for (const piece of mockToolArguments(p.output).pieces) {
        events.push(head + choice(a, `{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(piece)}}}]}`, null) + tail);
      }
      events.push(head + choice(a, '{}', p.truncated ? 'length' : 'tool_calls') + tail);
      continue;
    }
    events.push(head + choice(a, '{"role":"assistant","content":"","refusal":null}', null) + tail);
    for (let i = 1; i <= p.output; i++) {
      events.push(head + choice(a, `{"content":"${i === 1 ? '' : ' '}tok${i}"}`, null) + tail);
    }
    events.push(head + choice(a, '{}', p.truncated ? 'length' : 'stop') + tail);
  }
  if (p.includeUsage && p.usage) events.push(head + '[],"usage":' + JSON.stringify(openaiUsage(p)) + '}\n\n');
  events.push('data: [DONE]\n\n');
  return { events, preamble: 1 };
}
