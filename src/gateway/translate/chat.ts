/**
 * Chat completions as a Translator: the hub's own format, so requests and answers pass as
 * they are; answers for the client take a chat id (ids.ts), and errors change shape (the
 * envelope to and from the hub's fields).
 */
import { isObject, type Json } from '../wire/format.js';
import type { HubEvent, Translator } from './hub.js';
import { clientId } from './ids.js';

const same = (body: Json): Json => body;
const passThrough = () => ({ push: (event: HubEvent) => [{ data: event.data }], end: () => [] });
const withChatId = (data: Json): Json => (typeof data.id === 'string' ? { ...data, id: clientId('chatcmpl-', data.id) } : data);
/**
 * Hub chunks to a chat client: each chunk is the hub's own fresh object (another format's
 * translator made it), so its id is set in place, computed once per upstream id: a spread
 * copy and the id's reshaping on every chunk were a measurable part of a translated stream.
 */
const toClient = () => {
  let upstreamId: unknown;
  let id = '';
  return {
    push(event: HubEvent) {
      const data = event.data;
      if (typeof data.id === 'string') {
        if (data.id !== upstreamId) {
          upstreamId = data.id;
          id = clientId('chatcmpl-', data.id);
        }
        data.id = id;
      }
      return [{ data }];
    },
    end: () => [],
  };
};

export const chatTranslator: Translator = {
  requestToHub: same,
  requestFromHub: same,
  responseToHub: same,
  responseFromHub: withChatId,
  streamToHub: passThrough,
  streamFromHub: toClient,
  errorToHub(status, body) {
    const e = body !== null && isObject(body.error) ? body.error : {};
    return {
      status,
      message: typeof e.message === 'string' ? e.message : `upstream error (HTTP ${status})`,
      type: typeof e.type === 'string' ? e.type : status >= 500 ? 'server_error' : 'invalid_request_error',
      param: typeof e.param === 'string' ? e.param : null,
      code: typeof e.code === 'string' ? e.code : null,
    };
  },
  errorFromHub: (e) => ({ status: e.status, body: { error: { message: e.message, type: e.type, param: e.param ?? null, code: e.code ?? null } } }),
};
