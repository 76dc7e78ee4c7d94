/**
 * The Translator of Anthropic Messages to and from the hub (chat completions), both as a
 * client's format and as an upstream's: requests in ./anthropic-request.ts, whole
 * answers, usage and errors in ./anthropic-answer.ts, streams in ./anthropic-stream.ts.
 * The field-by-field table is docs/API.md, "Any model through any format".
 */
import { answerFromHub, answerToHub, errorFromHub, errorToHub } from './anthropic-answer.js';
import { anthropicRequestFromHub, anthropicRequestToHub } from './anthropic-request.js';
import { AnthropicFromHub, AnthropicToHub } from './anthropic-stream.js';
import type { Translator } from './hub.js';

export const anthropicTranslator: Translator = {
  requestToHub: anthropicRequestToHub,
  requestFromHub: anthropicRequestFromHub,
  responseToHub: answerToHub,
  responseFromHub: answerFromHub,
  streamToHub: () => new AnthropicToHub(),
  streamFromHub: () => new AnthropicFromHub(),
  errorToHub,
  errorFromHub,
};
