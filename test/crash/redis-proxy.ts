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
  /** Scripts sent while replies are swallowed, whose replies have not come yet. */
  scriptsSent: number;
}

/** A script call in RESP: the command name as a bulk string. */
const script_command = /\r\neval(sha)?\r\n/gi;

export class RedisProxy {
  private server: net.Server | null = null;
  private readonly pairs = new Set<Pair>();
  /** Replies swallowed so far, in bytes: a drop that swallowed nothing proves nothing. */
  swallowedBytes = 0;
  /** Scripts that reached Redis while replies were swallowed, and whose reply data came back and was swallowed. */
  swallowedScripts = 0;
  port = 0;

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
      if (pair.swallowing) pair.scriptsSent += chunk.toString('latin1').match(script_command)?.length ?? 0;
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
   * Swallows every reply while requests still reach Redis, for at least `minMs` and
   * until the reply of at least one script was swallowed (or `maxMs`), then cuts every
   * connection that was open when the drop began.
   */
  async dropReplies(minMs: number, maxMs: number): Promise<void> {
    const victims = [...this.pairs];
    for (const p of victims) p.swallowing = true;
    const before = this.swallowedScripts;
    const startedAt = Date.now();
    while (Date.now() - startedAt < minMs || (this.swallowedScripts === before && Date.now() - startedAt < maxMs)) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    for (const p of victims) {
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
