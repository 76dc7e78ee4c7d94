/** POST /v1/chat/completions and /v1/messages (8 MiB bodies), for project and customer keys. */
import express, { Router } from 'express';
import { authOf, requireKeyType } from '../http/auth.js';
import { jsonBody } from '../http/validate.js';
import type { Endpoint, GatewayService } from './service.js';

export const body_bytes_max_gateway = 8 * 1024 * 1024;

export function gatewayRoutes(gateway: GatewayService): Router {
  const r = Router();
  // Counts the body's bytes: they bound the prompt's tokens for the hold.
  const parse = express.json({
    limit: body_bytes_max_gateway,
    strict: false,
    type: ['application/json', 'application/*+json'],
    verify: (req, _res, buf) => {
      (req as unknown as { rawBytes: number }).rawBytes = buf.length;
    },
  });
  const callers = requireKeyType('project', 'customer');
  const route = (endpoint: Endpoint) =>
    [
      parse,
      callers,
      async (req: express.Request, res: express.Response) => {
        jsonBody(req);
        await gateway.handle(req, res, authOf(res), endpoint, (req as unknown as { rawBytes?: number }).rawBytes ?? 0);
      },
    ] as const;
  r.post('/v1/chat/completions', ...route('chat.completions'));
  r.post('/v1/messages', ...route('messages'));
  return r;
}
