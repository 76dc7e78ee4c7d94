/** POST /v1/chat/completions and /v1/messages (8 MiB bodies), for project and customer keys. */
import type { Request, Response } from 'express';
import { authOf, requireKeyType } from '../http/auth.js';
import type { Route } from '../http/router.js';
import { bodyBytes, jsonBody, measuredJson } from '../http/validate.js';
import type { Endpoint, GatewayService } from './service.js';

export const body_bytes_max_gateway = 8 * 1024 * 1024;

/** Both are hot routes (src/http/router.ts). */
export function gatewayRoutes(gateway: GatewayService): Route[] {
  // The body's bytes bound the prompt's tokens for the hold. The parser skips a body that
  // the app's parser already read, and that one measures too: the hold always comes from
  // the bytes of the body the gateway is handed.
  const parse = measuredJson(body_bytes_max_gateway);
  const callers = requireKeyType('project', 'customer');
  const route = (path: string, endpoint: Endpoint): Route => ({
    method: 'POST',
    path,
    hot: true,
    handlers: [
      parse,
      callers,
      async (req: Request, res: Response) => {
        // Counted until settled or released, for a graceful shutdown (src/shutdown.ts).
        gateway.inFlight.begin();
        try {
          jsonBody(req);
          await gateway.handle(req, res, authOf(res), endpoint, bodyBytes(req));
        } finally {
          gateway.inFlight.end();
        }
      },
    ],
  });
  return [route('/v1/chat/completions', 'chat.completions'), route('/v1/messages', 'messages')];
}
