/**
 * The translated stream's own reading of whole LF-ended SSE events (readLfEvents in
 * src/gateway/translate/stream.ts) gives what eventsource-parser gives for the same text.
 */
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { describe, expect, it } from 'vitest';
import { readLfEvents } from '../../src/gateway/translate/stream.js';

function byParser(text: string): { event?: string; data: string }[] {
  const out: { event?: string; data: string }[] = [];
  createParser({ onEvent: (e: EventSourceMessage) => out.push({ event: e.event, data: e.data }) }).feed(text);
  return out;
}

function byOwnReading(text: string): { event?: string; data: string }[] | null {
  const out: { event?: string; data: string }[] = [];
  return readLfEvents(text, (e) => out.push({ event: e.event, data: e.data })) ? out : null;
}

describe('readLfEvents', () => {
  const cases: Record<string, string> = {
    'one data line': 'data: {"a":1}\n\n',
    'named events': 'event: message_start\ndata: {"type":"message_start"}\n\nevent: ping\ndata: {"type":"ping"}\n\n',
    'no space after the colon': 'event:x\ndata:{"b":2}\n\n',
    'several data lines': 'data: {"a":\ndata: 1}\n\n',
    'comments, id and retry': ': keep-alive\nid: 7\nretry: 1000\ndata: [DONE]\n\n',
    'an event without data': 'event: nothing\n\ndata: {"c":3}\n\n',
    'blank lines between events': 'data: 1\n\n\n\ndata: 2\n\n',
    'a data field without a colon': 'data\ndata: x\n\n',
    'a colon in the value': 'data: {"url":"http://a:1"}\n\n',
  };
  for (const [name, text] of Object.entries(cases)) {
    it(`reads ${name} as eventsource-parser does`, () => {
      expect(byOwnReading(text)).toEqual(byParser(text));
    });
  }

  it('reads nothing from text that does not end with a blank line (the parser reads it then)', () => {
    expect(byOwnReading('data: {"a":1}\n')).toBeNull();
  });
});

describe('a translated Anthropic stream to a chat client, its text deltas by the cheap path', () => {
  it('writes each chunk as JSON.stringify would, whatever the text holds', async () => {
    const { CallTranslation } = await import('../../src/gateway/translate/call.js');
    const ev = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
    const texts = ['plain', ' "quoted" ', 'back\\slash', 'new\nline', 'é ü 🙂', '</script>', ''];
    let upstream = ev('message_start', { type: 'message_start', message: { id: 'msg_01X', type: 'message', role: 'assistant', model: 'claude-x', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } });
    upstream += ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    for (const text of texts) upstream += ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } });
    upstream += ev('content_block_stop', { type: 'content_block_stop', index: 0 });
    upstream += ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 7 } });
    upstream += ev('message_stop', { type: 'message_stop' });
    const relay = CallTranslation.of('openai', 'anthropic', { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true }).translation.streamRelay(false);
    let out = '';
    for (const part of upstream.split(/(?<=\n\n)/)) out += Buffer.from(relay.push(Buffer.from(part))).toString('utf8');
    out += Buffer.from(relay.end()).toString('utf8');
    const data = out.split('\n\n').filter((e) => e.startsWith('data: ') && e !== 'data: [DONE]').map((e) => e.slice('data: '.length));
    for (const d of data) expect(JSON.stringify(JSON.parse(d))).toBe(d);
    const chunks = data.map((d) => JSON.parse(d) as { id: string; created: number; choices: { delta: { content?: string } }[] });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(texts.join(''));
    expect(new Set(chunks.map((c) => c.id))).toEqual(new Set(['chatcmpl-01X']));
    expect(chunks.every((c) => c.created > 0)).toBe(true);
    expect(out.endsWith('data: [DONE]\n\n')).toBe(true);
  });
});
