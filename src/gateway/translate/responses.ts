/**
 * The OpenAI Responses API's Translator, to and from the hub (chat completions; hub.ts
 * says why a hub). Pure code, in four parts: requests (responses-request.ts), whole
 * answers and errors (responses-answer.ts), streams (responses-stream.ts). docs/API.md,
 * "Responses API <-> chat completions", is the field-by-field table, refusals included.
 */
import type { Translator } from './hub.js';
import { responsesAnswerFromHub, responsesAnswerToHub, responsesErrorFromHub, responsesErrorToHub } from './responses-answer.js';
import { responsesRequestFromHub, responsesRequestToHub } from './responses-request.js';
import { responsesStreamFromHub, responsesStreamToHub } from './responses-stream.js';

export const responsesTranslator: Translator = {
  requestToHub: responsesRequestToHub,
  requestFromHub: responsesRequestFromHub,
  responseToHub: responsesAnswerToHub,
  responseFromHub: responsesAnswerFromHub,
  streamToHub: responsesStreamToHub,
  streamFromHub: responsesStreamFromHub,
  errorToHub: responsesErrorToHub,
  errorFromHub: responsesErrorFromHub,
};
