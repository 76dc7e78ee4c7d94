/**
 * The two watches of a relayed answer's socket (src/gateway/relay.ts): TurnCork, which
 * gathers the events of one turn of the event loop into one socket write, and ClientWatch,
 * which says when the client left and aborts the upstream call.
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type { Response } from 'express';

/** The longest a relayed event waits in the socket for the answer's end (TurnCork.keep). */
const held_events_ms_max = 10;

/**
 * Holds the relayed events in the response's socket until the end of the event loop's
 * turn (setImmediate), instead of the end of the tick as Node's own cork does. When the
 * upstream's end arrives in the same turn as its last events, as it does for an answer the
 * upstream sent at once, `keep` holds them on until the answer's end, whose trailers wait
 * for the settlement (a Redis round trip), and they go out together in one write instead
 * of two (a socket write was 6% of the API's CPU per streamed call). They wait
 * held_events_ms_max at most, whatever the settlement does. Every path must `release`:
 * a socket left corked would hold the next answer on its connection.
 */
export class TurnCork {
  private corked = false;
  private kept: NodeJS.Timeout | null = null;

  constructor(private readonly socket: Socket | null) {}

  /** Before a write: the socket is corked until the end of this turn. */
  hold(): void {
    if (this.corked || this.socket === null) return;
    this.socket.cork();
    this.corked = true;
    setImmediate(this.endOfTurn);
  }

  /** The upstream ended: what this turn wrote waits for the answer's end. */
  keep(): void {
    if (this.corked && this.kept === null) this.kept = setTimeout(this.release, held_events_ms_max);
  }

  /** Writes what is held. */
  readonly release = (): void => {
    if (this.kept !== null) clearTimeout(this.kept);
    this.kept = null;
    if (!this.corked) return;
    this.corked = false;
    this.socket!.uncork();
  };

  private readonly endOfTurn = (): void => {
    if (this.kept === null) this.release();
  };
}

/**
 * Watches for the client leaving before its answer is written: `gone` says so, and the
 * upstream call, whose abort signal this is (undici takes an EventEmitter that emits
 * `abort` and says `aborted`), is aborted. An AbortController and undici's listeners on
 * its EventTarget cost about 4.6 us per call, this about 0.2. `stop` once the answer no
 * longer needs it.
 */
export class ClientWatch extends EventEmitter {
  gone = false;
  private readonly onClose = (): void => {
    if (this.res.writableFinished) return;
    this.gone = true;
    this.emit('abort');
  };

  constructor(private readonly res: Response) {
    super();
    res.on('close', this.onClose);
  }

  /** The gateway itself ends the call (an incremental hold that cannot grow): the upstream call is aborted, the client stays. */
  private cut = false;

  get aborted(): boolean {
    return this.gone || this.cut;
  }

  cutUpstream(): void {
    if (this.aborted) return;
    this.cut = true;
    this.emit('abort');
  }

  stop(): void {
    this.res.off('close', this.onClose);
  }
}
