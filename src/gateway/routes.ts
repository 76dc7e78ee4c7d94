/** POST /v1/chat/completions and /v1/messages (8 MiB bodies), for project and customer keys. */
import type { Request, Response, Router } from 'express';
import { authOf, requireKeyType } from '../http/auth.js';
import { exactRouter } from '../http/router.js';
import { bodyBytes, jsonBody, measuredJson } from '../http/validate.js';
import type { Endpoint, GatewayService } from './service.js';

export const body_bytes_max_gateway = 8 * 1024 * 1024;

export function gatewayRoutes(gateway: GatewayService): Router {
  const r = exactRouter();
  // The body's bytes bound the prompt's tokens for the hold. The parser skips a body that
  // the app's parser already read, and that one measures too: the hold always comes from
  // the bytes of the body the gateway is handed.
  const parse = measuredJson(body_bytes_max_gateway);
  const callers = requireKeyType('project', 'customer');
  const route = (endpoint: Endpoint) =>
    [
      parse,
      callers,
      async (req: Request, res: Response) => {
        jsonBody(req);
        await gateway.handle(req, res, authOf(res), endpoint, bodyBytes(req));
      },
    ] as const;
  r.post('/v1/chat/completions', ...route('chat.completions'));
  r.post('/v1/messages', ...route('messages'));
  return r;
}
