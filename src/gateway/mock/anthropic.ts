/**
 * The Anthropic Messages wire format of the mock upstream: the JSON message, its SSE
 * events, the usage object and the error bodies.
 */
import { mockOutputText, mockToolArguments } from './controls.js';
import { base62, type Plan } from './plan.js';

function anthropicErrorType(status: number): string {
  switch (status) {
    case 401: return 'authentication_error';
    case 402: return 'billing_error';
    case 403: return 'permission_error';
    case 404: return 'not_found_error';
    case 408: case 504: return 'timeout_error';
    case 409: return 'conflict_error';
    case 429: return 'rate_limit_error';
    case 529: return 'overloaded_error';
    default: return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

export function anthropicErrorBody(status: number, requestId: string, message?: string): string {
  const type = anthropicErrorType(status);
  const defMsg =
    status === 401 ? 'invalid x-api-key'
    : status === 429 ? 'Number of requests has exceeded your rate limit (mock).'
    : status === 529 ? 'Overloaded'
    : status >= 500 ? 'Internal server error'
    : `Mock upstream error (HTTP ${status}).`;
  return JSON.stringify({ type: 'error', error: { type, message: message ?? defMsg }, request_id: requestId });
}

function anthropicUsage(p: Plan, outputTokens: number) {
  return {
    input_tokens: p.input,
    cache_creation_input_tokens: p.cacheWrite,
    cache_read_input_tokens: p.cacheRead,
    cache_creation: { ephemeral_5m_input_tokens: p.cacheWrite, ephemeral_1h_input_tokens: 0 },
    output_tokens: outputTokens,
    service_tier: 'standard',
  };
}

export function anthropicMessage(p: Plan, streamingStart: boolean) {
  return {
    id: `msg_01${base62(22)}`,
    type: 'message',
    role: 'assistant',
    model: p.model,
    content: streamingStart ? [] : p.tool === null ? [{ type: 'text', text: mockOutputText(p.output) }] : [{ type: 'tool_use', id: 'toolu_01mock', name: p.tool, input: JSON.parse(mockToolArguments(p.output).json) as unknown }],
    stop_reason: streamingStart ? null : stopReason(p),
    stop_sequence: null,
    stop_details: null,
    container: null,
    diagnostics: null,
    ...(p.usage ? { usage: anthropicUsage(p, streamingStart ? Math.min(1, p.output) : p.output) } : {}),
  };
}

function stopReason(p: Plan): string {
  return p.truncated ? 'max_tokens' : p.tool === null ? 'end_turn' : 'tool_use';
}

function sse(type: string, json: string): string {
  return `event: ${type}\ndata: ${json}\n\n`;
}

export function anthropicEvents(p: Plan): { events: string[]; preamble: number } {
  const block = p.tool === null ? '{"type":"text","text":""}' : `{"type":"tool_use","id":"toolu_01mock","name":${JSON.stringify(p.tool)},"input":{}}`;
  const events = [
    sse('message_start', JSON.stringify({ type: 'message_start', message: anthropicMessage(p, true) })),
    sse('content_block_start', `{"type":"content_block_start","index":0,"content_block":${block}}`),
    sse('ping', '{"type": "ping"}'),
  ];
  if (p.tool !== null) {
    // The tool's input as JSON in pieces, as Anthropic streams it.
    for (const piece of mockToolArguments(p.output).pieces) {
      events.push(sse('content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(piece)}}}`));
    }
  }
  for (let i = 1; p.tool === null && i <= p.output; i++) {
    events.push(
      sse('content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${i === 1 ? '' : ' '}tok${i}"}}`),
    );
  }
  events.push(sse('content_block_stop', '{"type":"content_block_stop","index":0}'));
  events.push(
    sse(
      'message_delta',
      JSON.stringify({
        type: 'message_delta',
        delta: { stop_reason: stopReason(p), stop_sequence: null, stop_details: null, container: null },
        ...(p.usage
          ? {
              usage: {
                input_tokens: p.input,
                cache_creation_input_tokens: p.cacheWrite,
                cache_read_input_tokens: p.cacheRead,
                output_tokens: p.output,
              },
            }
          : {}),
      }),
    ),
  );
  events.push(sse('message_stop', '{"type":"message_stop"}'));
  return { events, preamble: 3 };
}
