/**
 * The page's access to the service: the management operations themselves
 * (src/admin/operations/), called in-process. Each call goes through the operation's
 * least role (`requireRole`) and its handler exactly as /dashboard/api and /v1/admin run
 * them, with the signed-in member's Actor, so the page has no authorization rules of its
 * own: what a viewer may not do, or what another organization holds, is refused here by
 * the same code and with the same error (an ApiError) as over HTTP.
 *
 * A handler needs only a request's method, URL, query, path parameters and JSON body, and
 * a response's status, json and locals; the call gives it those.
 */
import type { Request, RequestHandler, Response } from 'express';
import { requireRole } from '../admin/actor.js';
import type { Actor } from '../members/actor.js';
import type { Operation } from '../admin/operations/shared.js';
import type { Method } from '../http/router.js';

interface OperationCall {
  params?: Record<string, string>;
  query?: Record<string, string | null | undefined>;
  body?: Record<string, unknown>;
}

interface Answer<T> {
  status: number;
  body: T;
}

/** Runs the management operations for one actor: `call('GET', '/projects/:project_id/keys', {params})`. */
export type Operations = <T = unknown>(method: Method, path: string, call?: OperationCall) => Promise<Answer<T>>;

export function operationsOf(ops: readonly Operation[]): (actor: Actor) => Operations {
  const byRoute = new Map(ops.map((o) => [`${o.method} ${o.path}`, o]));
  return (actor) =>
    async <T>(method: Method, path: string, call: OperationCall = {}): Promise<Answer<T>> => {
      const op = byRoute.get(`${method} ${path}`);
      // A page naming an operation that does not exist is a bug of the page, not a 404.
      if (!op) throw new Error(`no management operation ${method} ${path}`);
      const query = Object.fromEntries(Object.entries(call.query ?? {}).filter((e): e is [string, string] => e[1] !== undefined && e[1] !== null && e[1] !== ''));
      const search = new URLSearchParams(query).toString();
      const req = {
        method,
        url: search === '' ? path : `${path}?${search}`,
        query,
        params: call.params ?? {},
        body: call.body,
        headers: call.body === undefined ? {} : { 'content-type': 'application/json' },
      } as unknown as Request;
      let answer: Answer<unknown> = { status: 204, body: null };
      let statusCode = 200;
      const res = {
        locals: { actor },
        status(code: number) {
          statusCode = code;
          return res;
        },
        json(body: unknown) {
          answer = { status: statusCode, body };
          return res;
        },
      };
      const response = res as unknown as Response;
      await runHandler(requireRole(op.role), req, response);
      await op.handler(req, response, () => undefined);
      return answer as Answer<T>;
    };
}

/** Runs a middleware that either calls next or throws (requireRole). */
function runHandler(handler: RequestHandler, req: Request, res: Response): Promise<void> {
  return new Promise((resolve, reject) => {
    try {
      void handler(req, res, (err?: unknown) => (err ? reject(err) : resolve()));
    } catch (err) {
      reject(err);
    }
  });
}
