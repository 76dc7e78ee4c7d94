/**
 * The floor of the gateway benchmark: a bare Express 5 pass-through proxy for
 * POST /v1/chat/completions. It parses the JSON body with the gateway's parser settings,
 * sends it upstream with the gateway's own UpstreamClient (the same undici Pool, pooling
 * and timeouts) and pipes the answer back as it arrives, streamed or not. No auth, no
 * billing, no logging: what the gateway costs on top of this is what its product costs.
 * With ACCESS_LOG=1 it writes the API's access log (src/http/access-log.ts, through the
 * API's logger at LOG_LEVEL, default info), so the price of that log shows beside it.
 *
 *   PORT, HOST (127.0.0.1), UPSTREAM_BASE_URL (e.g. http://127.0.0.1:4010/v1), ACCESS_LOG (0), LOG_LEVEL (info),
 *   UPSTREAM_CONNECTIONS (the pool's size per origin, as the API reads it; the client's default when unset)
 */
import { pipeline } from 'node:stream/promises';
import express from 'express';
import { body_bytes_max_gateway } from '../../src/gateway/routes.js';
import { UpstreamClient } from '../../src/gateway/upstream.js';
import { accessLogFromEnv } from '../lib/access-log.js';

const port = Number(process.env.PORT ?? 3998);
const host = process.env.HOST ?? '127.0.0.1';
const upstreamBaseUrl = process.env.UPSTREAM_BASE_URL;
if (!upstreamBaseUrl) throw new Error('UPSTREAM_BASE_URL is required');

// The bench's mock upstream listens on 127.0.0.1; this proxy relays only to the URL the bench gives it.
const connections = process.env.UPSTREAM_CONNECTIONS;
const upstream = new UpstreamClient({ allowPrivate: true, ...(connections ? { connections: Number(connections) } : {}) });
const app = express();
app.disable('x-powered-by');
app.set('etag', false);
const logAccess = accessLogFromEnv();
if (logAccess !== null) app.use(logAccess);
app.use(express.json({ limit: body_bytes_max_gateway, strict: false, type: ['application/json', 'application/*+json'] }));

app.post('/v1/chat/completions', async (req, res) => {
  const body = req.body as Record<string, unknown>;
  // The caller's own upstream key, passed through.
  const apiKey = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
  const abort = new AbortController();
  res.once('close', () => abort.abort());
  let answer;
  try {
    answer = await upstream.send({ format: 'openai', baseUrl: upstreamBaseUrl, apiKey }, body, { stream: body.stream === true, signal: abort.signal });
  } catch {
    res.status(502).json({ error: { message: 'upstream unreachable', type: 'upstream_error' } });
    return;
  }
  res.status(answer.status);
  res.setHeader('Content-Type', String(answer.headers['content-type'] ?? 'application/json'));
  const length = answer.headers['content-length'];
  if (length !== undefined) res.setHeader('Content-Length', String(length));
  // A client gone mid-answer ends the pipeline with an error; nothing is left to answer.
  await pipeline(answer.body, res).catch(() => undefined);
});

// The API's accept queue (listen_backlog in src/server.ts, not imported: it would load the
// whole API here), so that both take 1,000 connections at once alike.
const server = app.listen({ port, host, backlog: 4_096 });
server.keepAliveTimeout = 65_000;
const shutdown = () => {
  server.close(() => void upstream.close().finally(() => process.exit(0)));
  server.closeAllConnections();
};
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);
