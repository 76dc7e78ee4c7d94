/**
 * Preloaded into the Portkey gateway child (`node --import`) to run Portkey 1.15 as it is
 * installed here, with two changes that do not touch its request path's logic:
 *
 * - Its streamed answers fail without this. Portkey appends its `x-portkey-*` headers to
 *   the Response it got from `fetch`, whose headers are immutable; @hono/node-server after
 *   1.14.2 keeps those very headers in its lightweight Response, so every streamed call
 *   ends in `TypeError: immutable` and a 500 (Portkey-AI/gateway issue #1389). Each
 *   upstream answer is re-wrapped in a native Response with a copy of its headers, which
 *   is what the proposed fix (pull request #1390) does inside Portkey; it costs a
 *   Headers copy per call. The native Response is taken here, before @hono/node-server
 *   replaces the global one.
 * - Its start script listens on every interface and has no host option; the bench keeps
 *   it on PORTKEY_HOST (127.0.0.1), since it would relay to any custom host it is given.
 */
import { Server } from 'node:net';

const NativeResponse = globalThis.Response;
const nativeFetch = globalThis.fetch;

globalThis.fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  const res = await nativeFetch(input, init);
  return new NativeResponse(res.body, res);
};

const host = process.env.PORTKEY_HOST ?? '127.0.0.1';
const listen = Server.prototype.listen;
// @hono/node-server calls listen(port, hostname, callback) with an undefined hostname.
Server.prototype.listen = function (this: Server, ...args: unknown[]) {
  if (typeof args[0] === 'number' && args[1] === undefined) args[1] = host;
  return listen.apply(this, args as Parameters<Server['listen']>);
} as Server['listen'];
