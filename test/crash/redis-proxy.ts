/**
 * A TCP proxy in front of Redis for the crash test. It forwards bytes both ways, and on
 * request it loses replies on purpose: `dropReplies` keeps forwarding what clients send
 * (so Redis runs their scripts) but swallows what Redis answers, then cuts every
 * connection. That is the "applied, but the reply never came" case, which a kill only
 * hits by chance. `refuse` then closes the listening socket for a while, so reconnects
 * fail the way they do when Redis itself is gone.
 */
import net from 'node:net';

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
  /** Replies from Redis are discarded instead of forwarded. */
  swallowing: boolean;
  /** Money scripts sent while replies are swallowed, whose replies have not come yet. */
  scriptsSent: number;
}

/** A script call in RESP: the command name as a bulk string. */
const script_command = /\r\neval(sha)?\r\n/i;
/** A money script names its customer's outbox stream among its keys, once. */
const outbox_key = /:outbox\r\n/g;

export class RedisProxy {
  private server: net.Server | null = null;
  private readonly pairs = new Set<Pair>();
  /** Replies swallowed so far, in bytes: a drop that swallowed nothing proves nothing. */
  swallowedBytes = 0;
  /**
   * Money scripts (the ones that name a customer's outbox) that reached Redis while
   * replies were swallowed, and whose reply data came back and was swallowed.
   */
  swallowedScripts = 0;
  port = 0;
  /** A drop waits for the next money script to begin. */
  private armed = false;

  /** `target` is the Redis unix socket path. */
  constructor(private readonly target: string) {}

  /** Listens on a free port the first time, then on the same port again. */
  async listen(): Promise<void> {
    const server = net.createServer((client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  private accept(client: net.Socket): void {
    const upstream = net.connect(this.target);
    const pair: Pair = { client, upstream, swallowing: false, scriptsSent: 0 };
    this.pairs.add(pair);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (chunk: Buffer) => {
      const text = this.armed || pair.swallowing ? chunk.toString('latin1') : '';
      const scripts = script_command.test(text) ? (text.match(outbox_key)?.length ?? 0) : 0;
      if (this.armed && scripts > 0) {
        // The drop begins with this money script: it reaches Redis, its reply will not.
        this.armed = false;
        for (const p of this.pairs) p.swallowing = true;
      }
      if (pair.swallowing) pair.scriptsSent += scripts;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!pair.swallowing) {
        client.write(chunk);
        return;
      }
      // Replies come in order: reply data after a script was sent means Redis got that
      // far, so that script ran (or failed) and its answer is lost.
      this.swallowedBytes += chunk.length;
      this.swallowedScripts += pair.scriptsSent;
      pair.scriptsSent = 0;
    });
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  }

  /**
   * Waits (up to `maxWaitMs`) for the next money script a client sends, lets it reach
   * Redis, and from that moment swallows every reply on every connection for `ms`; then
   * cuts the connections. Without a money script in time, the drop begins anyway.
   */
  async dropReplies(ms: number, maxWaitMs: number): Promise<void> {
    this.armed = true;
    const deadline = Date.now() + maxWaitMs;
    while (this.armed && Date.now() < deadline) await sleep(2);
    this.armed = false;
    for (const p of this.pairs) p.swallowing = true;
    await sleep(ms);
    for (const p of [...this.pairs]) {
      p.client.destroy();
      p.upstream.destroy();
    }
  }

  /** Stops accepting connections and cuts the open ones; `listen` opens again. */
  async refuse(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const p of this.pairs) {
      p.client.destroy();
      p.upstream.destroy();
    }
    await closed;
  }

  async close(): Promise<void> {
    await this.refuse();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
