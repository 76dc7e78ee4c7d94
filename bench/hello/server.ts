/**
 * The baseline of the benches: a bare Express 5 app with the same JSON parser settings as
 * the API (src/app.ts) and nothing else, so a ratio against it shows what auth,
 * validation, logging and Redis cost on top of Express on the same machine.
 *
 * With ACCESS_LOG=1 it also writes the API's access log (src/http/access-log.ts, through
 * the API's logger at LOG_LEVEL, default info, on stdout): the same baseline with the
 * price of that log in it, measured beside the plain one.
 *
 *   PORT (3999), HOST (127.0.0.1), ACCESS_LOG (0), LOG_LEVEL (info)
 */
import express from 'express';
import { accessLogFromEnv } from '../lib/access-log.js';

const port = Number(process.env.PORT ?? 3999);
const host = process.env.HOST ?? '127.0.0.1';

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
const logAccess = accessLogFromEnv();
if (logAccess !== null) app.use(logAccess);
app.use(express.json({ limit: 1024 * 1024, strict: false }));

app.get('/hello', (_req, res) => {
  res.json({ ok: true });
});

app.post('/hello', (req, res) => {
  const body = req.body as Record<string, unknown> | undefined;
  res.json({ ok: true, fields: body && typeof body === 'object' ? Object.keys(body).length : 0 });
});

const server = app.listen(port, host);
server.keepAliveTimeout = 65_000;
const shutdown = () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
};
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);
