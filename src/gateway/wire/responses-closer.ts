/**
 * How the gateway ends a Responses API stream itself (an incremental hold the wallet could
 * not extend, docs/API.md "Incremental holds"): as the upstream would have ended it at its
 * output limit, so that `client.responses.stream()` of the `openai` package assembles the
 * answer. The open text part, content part and output item are closed with their whole
 * text, then `response.incomplete` (`incomplete_details.reason: "max_output_tokens"`)
 * carries every output item and the usage billed. Pure code.
 */
import { isObject, sseEvent, type Json, type StreamCloser, type Usage } from './format.js';

interface OpenItem {
  index: number;
  item: Json;
  /** The content part open in it (message items), with its text so far. */
  part: { index: number; text: string } | null;
}

export class ResponsesCloser implements StreamCloser {
  /** The response of `response.created` (then of later lifecycle events), the base of the last event. */
  private response: Json = {};
  /** Output items by output_index, as the stream has made them so far. */
  private readonly items = new Map<number, Json>();
  private open: OpenItem | null = null;
  private sequence = 0;

  see(event: Json): void {
    if (typeof event.sequence_number === 'number') this.sequence = event.sequence_number;
    const index = typeof event.output_index === 'number' ? event.output_index : -1;
    switch (event.type) {
      case 'response.created':
      case 'response.in_progress':
        if (isObject(event.response)) this.response = event.response;
        break;
      case 'response.output_item.added':
        if (isObject(event.item)) {
          const item = { ...event.item };
          this.items.set(index, item);
          this.open = { index, item, part: null };
        }
        break;
      case 'response.content_part.added':
        if (this.open !== null && typeof event.content_index === 'number') this.open.part = { index: event.content_index, text: '' };
        break;
      case 'response.output_text.delta':
        if (this.open?.part && typeof event.delta === 'string') this.open.part.text += event.delta;
        break;
      case 'response.content_part.done':
        if (this.open !== null) this.open.part = null;
        break;
      case 'response.output_item.done':
        if (isObject(event.item)) this.items.set(index, event.item);
        this.open = null;
        break;
    }
  }

  close(usage: Usage, extra: Json | null): string {
    let out = '';
    const next = (data: Json) => {
      this.sequence += 1;
      out += sseEvent({ ...data, sequence_number: this.sequence }, data.type as string);
    };
    const open = this.open;
    if (open !== null) {
      const itemId = open.item.id;
      if (open.part !== null) {
        const part = { type: 'output_text', text: open.part.text, annotations: [] };
        next({ type: 'response.output_text.done', item_id: itemId, output_index: open.index, content_index: open.part.index, text: open.part.text, logprobs: [] });
        next({ type: 'response.content_part.done', item_id: itemId, output_index: open.index, content_index: open.part.index, part });
        const content = Array.isArray(open.item.content) ? [...(open.item.content as unknown[])] : [];
        content[open.part.index] = part;
        open.item.content = content;
      }
      open.item.status = 'incomplete';
      next({ type: 'response.output_item.done', output_index: open.index, item: open.item });
    }
    const output = [...this.items.entries()].sort((a, b) => a[0] - b[0]).map(([, item]) => item);
    const input = usage.input + usage.cacheRead + usage.cacheWrite;
    const response = {
      ...this.response,
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      output,
      usage: {
        input_tokens: input,
        input_tokens_details: { cached_tokens: usage.cacheRead },
        output_tokens: usage.output,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: input + usage.output,
      },
    };
    next({ type: 'response.incomplete', response, ...extra });
    return out;
  }
}
