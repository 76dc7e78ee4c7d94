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
