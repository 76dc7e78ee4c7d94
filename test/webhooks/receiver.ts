/**
 * A webhook receiver for the tests: an HTTP server on loopback that verifies every
 * delivery's signature with the `standardwebhooks` package (the secret of each path is
 * registered with `expect`), records what it got, and answers as each path's script says
 * (a status, or a hang past the sender's timeout).
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The parsed event, verified against the path's secret. */
  event: { id: string; type: string; created_at: string; project_id: string; data: Record<string, unknown> };
}

/** What a path answers: an HTTP status, or `hang` (no answer until the test ends). */
type Reply = number | 'hang';

export interface Receiver {
  url: string;
  received: Received[];
  /** Deliveries whose signature did not verify (none, in a passing test). */
  unverified: { path: string; error: string }[];
  /** Registers a path: its secret and its answers in order (the last one repeats). */
  expect(path: string, secret: string, replies: Reply[]): void;
  /** Changes a path's answers from now on. */
  reply(path: string, replies: Reply[]): void;
  on(path: string): Received[];
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const secrets = new Map<string, string>();
  const scripts = new Map<string, Reply[]>();
  const received: Received[] = [];
  const unverified: { path: string; error: string }[] = [];
  const hanging = new Set<() => void>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '/';
      const body = Buffer.concat(chunks).toString('utf8');
      const secret = secrets.get(path);
      try {
        if (secret === undefined) throw new Error('no secret for this path');
        const event = new Webhook(secret).verify(body, req.headers as Record<string, string>) as Received['event'];
        received.push({ path, headers: req.headers, body, event });
      } catch (err) {
        unverified.push({ path, error: (err as Error).message });
      }
      const script = scripts.get(path) ?? [200];
      const reply = script.length > 1 ? script.shift()! : script[0];
      if (reply === 'hang') {
        const end = () => res.destroy();
        hanging.add(end);
        return;
      }
      res.writeHead(reply, { 'content-type': 'text/plain' }).end(`answer ${reply} `.repeat(200));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    unverified,
    expect(path, secret, replies) {
      secrets.set(path, secret);
      scripts.set(path, [...replies]);
    },
    reply(path, replies) {
      scripts.set(path, [...replies]);
    },
    on: (path) => received.filter((r) => r.path === path),
    async close() {
      for (const end of hanging) end();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
