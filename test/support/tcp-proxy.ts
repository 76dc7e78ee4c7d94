/**
 * A TCP proxy between the service and a store (Redis, PostgreSQL) that a test can break
 * on purpose: forward, swallow the server's replies while still forwarding requests (a
 * reply lost after the command ran), swallow a request and all that follows it (a command
 * written by the client that never ran), cut every connection, and refuse new ones. It binds
 * port 0 on its first start and keeps that port when it accepts again.
 */
import net from 'node:net';

/** Client-to-server bytes kept for `dropRepliesWhen`; a command is matched within them. */
const request_window_bytes = 64 * 1024;

export class TcpProxy {
  private readonly sockets = new Set<net.Socket>();
  private server: net.Server | null = null;
  private dropping = false;
  /** Requests are swallowed too (loseRequestsWhen), from the one that matched. */
  private losingRequests = false;
  private losing = false;
  private trigger: ((requests: string) => boolean) | null = null;
  private requests = '';
  /** The port clients connect to; 0 until the first `start()`. */
  port = 0;
  /** Bytes from the server that were swallowed since the last `dropReplies*`. */
  swallowedBytes = 0;
  /** Connections accepted so far. */
  accepted = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** `redis://host:port` or `postgres://...@host:port/db` as the target. */
  static to(url: string, defaultPort: number): TcpProxy {
    const u = new URL(url);
    return new TcpProxy(u.hostname, Number(u.port || defaultPort));
  }

  /** `url` with its host and port replaced by the proxy's. */
  via(url: string): string {
    const u = new URL(url);
    u.host = `127.0.0.1:${this.port}`;
    return u.toString();
  }

  /** Listens (again) and accepts connections; on the same port after the first time. */
  async start(): Promise<void> {
    if (this.server) return;
    const server = net.createServer((client) => this.pair(client));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.port = (server.address() as net.AddressInfo).port;
  }

  /**
   * Stops listening: new connections are refused (ECONNREFUSED). Open ones stay (`cut`
   * ends them). Resolves once the port is released, without waiting for open connections.
   */
  async refuse(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = null;
    server.close();
    await new Promise<void>((resolve) => setImmediate(resolve));
  }

  /** Destroys every open connection, both sides. */
  cut(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  /** Forwards both ways again (replies included). */
  forward(): void {
    this.dropping = false;
    this.losing = false;
    this.losingRequests = false;
    this.trigger = null;
    this.requests = '';
  }

  /** From now on, swallows every byte the server sends; requests are still forwarded. */
  dropReplies(): void {
    this.dropping = true;
    this.trigger = null;
    this.swallowedBytes = 0;
  }

  /**
   * Forwards until the requests sent from now on (all connections, as latin1 text, the
   * last 64 KiB) satisfy `matches`; from the request that made them match, swallows every
   * byte the server sends, so that request reaches the server and its reply is lost.
   */
  dropRepliesWhen(matches: (requests: string) => boolean): void {
    this.dropping = false;
    this.requests = '';
    this.swallowedBytes = 0;
    this.trigger = matches;
    this.losingRequests = false;
  }

  /**
   * As dropRepliesWhen, but the request that made them match is swallowed too, with every
   * request after it: the client wrote a command that the server never ran.
   */
  loseRequestsWhen(matches: (requests: string) => boolean): void {
    this.dropRepliesWhen(matches);
    this.losingRequests = true;
  }

  /** True once replies are being swallowed. */
  get droppingReplies(): boolean {
    return this.dropping;
  }

  async close(): Promise<void> {
    this.cut();
    await this.refuse();
  }

  private pair(client: net.Socket): void {
    this.accepted++;
    const server = net.connect(this.targetPort, this.targetHost);
    for (const s of [client, server]) {
      this.sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        this.sockets.delete(s);
        // One side gone: the other goes too, as a real broken connection would.
        (s === client ? server : client).destroy();
      });
    }
    client.on('data', (chunk: Buffer) => {
      if (this.trigger) {
        this.requests = (this.requests + chunk.toString('latin1')).slice(-request_window_bytes);
        if (this.trigger(this.requests)) {
          this.trigger = null;
          this.dropping = true;
          this.losing = this.losingRequests;
        }
      }
      if (!this.losing) server.write(chunk);
    });
    server.on('data', (chunk: Buffer) => {
      if (this.dropping) {
        this.swallowedBytes += chunk.length;
        return;
      }
      client.write(chunk);
    });
  }
}
