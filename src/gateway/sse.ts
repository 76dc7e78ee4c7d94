/**
 * Byte-exact framing of a server-sent-events stream. The framer cuts raw bytes into
 * complete events, each ending with its blank line, without decoding them, so a relay
 * can forward every event as the upstream wrote it. Reading the fields of an event is
 * left to eventsource-parser (see StreamRelay in adapters.ts).
 *
 * Line ends follow the SSE spec: LF, CR LF or a lone CR. A CR that is the last byte seen
 * so far is held back until the next byte shows whether an LF belongs to it, so an event
 * never ends between the two bytes of a CR LF.
 */

const LF = 0x0a;
const CR = 0x0d;
const EMPTY = Buffer.alloc(0);

export class SseFramer {
  /** Bytes of the event not yet complete. */
  private pending: Buffer = EMPTY;
  /** Where scanning resumes inside `pending` (everything before it is already scanned). */
  private scanFrom = 0;
  /** Whether the byte at `scanFrom` starts a line, so that a line end there ends the event. */
  private atLineStart = true;

  /**
   * Adds upstream bytes; returns the events completed by them, in order, each with its
   * terminating blank line. The returned buffers are views of the input (no copy when no
   * event was pending), so the caller must not reuse `chunk`'s memory while it holds them.
   */
  push(chunk: Uint8Array): Buffer[] {
    const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const buf = this.pending.length === 0 ? bytes : Buffer.concat([this.pending, bytes]);
    const events: Buffer[] = [];
    let start = 0;
    let i = this.scanFrom;
    let atLineStart = this.atLineStart;
    if (buf.indexOf(CR, i) < 0) {
      // No CR (the usual stream): each LF is found by a native search instead of byte by byte.
      for (;;) {
        const lf = buf.indexOf(LF, i);
        if (lf < 0) {
          if (i < buf.length) atLineStart = false;
          i = buf.length;
          break;
        }
        if (lf === i && atLineStart) {
          events.push(buf.subarray(start, lf + 1));
          start = lf + 1;
        }
        atLineStart = true;
        i = lf + 1;
      }
    } else {
      while (i < buf.length) {
        const b = buf[i]!;
        if (b !== LF && b !== CR) {
          atLineStart = false;
          i++;
          continue;
        }
        let end = i + 1;
        if (b === CR) {
          if (end === buf.length) break;
          if (buf[end] === LF) end++;
        }
        if (atLineStart) {
          events.push(buf.subarray(start, end));
          start = end;
        }
        atLineStart = true;
        i = end;
      }
    }
    this.pending = buf.subarray(start);
    this.scanFrom = i - start;
    this.atLineStart = atLineStart;
    return events;
  }

  /** Size of the unfinished event held back, in bytes (for a limit on it). */
  pendingBytes(): number {
    return this.pending.length;
  }

  /** Returns the bytes of an unfinished event (the stream ended without its blank line) and forgets them. */
  end(): Buffer {
    const rest = this.pending;
    this.pending = EMPTY;
    this.scanFrom = 0;
    this.atLineStart = true;
    return rest;
  }
}
