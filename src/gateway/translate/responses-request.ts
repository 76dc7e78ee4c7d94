/**
 * Requests between the OpenAI Responses API and the hub (chat completions), both ways
 * (docs/API.md, "Responses API <-> chat completions"). Every field either maps or is
 * refused naming it: a field this module does not know is refused too, so a feature
 * added to either API later is never dropped silently.
 */
import type { Json } from '../wire/format.js';
import { asString, copySet, isRecord, isSet, records, refuse, refuseUnknown } from './responses-shared.js';

const CHAT = 'chat completions';
const RESPONSES = 'the Responses API';

/** Fields with the same name and meaning in both requests. */
const SHARED = ['model', 'temperature', 'top_p', 'user', 'metadata', 'parallel_tool_calls', 'service_tier', 'safety_identifier', 'prompt_cache_key', 'prompt_cache_retention'] as const;

const RESPONSES_KNOWN = new Set<string>([
  ...SHARED, 'input', 'instructions', 'max_output_tokens', 'tools', 'tool_choice', 'text', 'reasoning', 'stream', 'stream_options', 'store', 'truncation', 'include', 'background',
]);

/** A function tool's fields, Responses' flat form (chat nests all but `type` under `function`). */
const FUNCTION_TOOL_FIELDS = new Set(['type', 'name', 'description', 'parameters', 'strict']);

const CHAT_KNOWN = new Set<string>([
  ...SHARED, 'messages', 'max_completion_tokens', 'max_tokens', 'tools', 'tool_choice', 'response_format', 'verbosity', 'reasoning_effort', 'stream', 'stream_options', 'store', 'n', 'modalities', 'logprobs',
]);

// ---------------------------------------------------------------- Responses -> hub

export function responsesRequestToHub(body: Json): Json {
  // Server-side state the chat format has no notion of: refused, never ignored.
  if (isSet(body.previous_response_id)) throw refuse('previous_response_id', `a stored conversation has no counterpart in ${CHAT}: send the whole conversation in input`);
  if (isSet(body.conversation)) throw refuse('conversation', `a stored conversation has no counterpart in ${CHAT}: send the whole conversation in input`);
  if (body.store === true) throw refuse('store', `stored responses have no counterpart in ${CHAT}: send store: false or omit it`);
  if (body.background === true) throw refuse('background', `background responses have no counterpart in ${CHAT}`);
  if (body.truncation === 'auto') throw refuse('truncation', `automatic truncation has no counterpart in ${CHAT}`);
  if (Array.isArray(body.include) && body.include.length > 0) throw refuse('include', `has no counterpart in ${CHAT}`);
  refuseUnknown(body, RESPONSES_KNOWN, CHAT);

  const hub: Json = {};
  copySet(body, hub, SHARED);
  const messages: Json[] = [];
  if (isSet(body.instructions)) messages.push({ role: 'system', content: body.instructions });
  messages.push(...inputToMessages(body.input));
  hub.messages = messages;
  if (isSet(body.max_output_tokens)) hub.max_completion_tokens = body.max_output_tokens;
  if (isSet(body.tools)) hub.tools = records(body.tools, 'tools').map(toolToHub);
  if (isSet(body.tool_choice)) hub.tool_choice = toolChoiceToHub(body.tool_choice);
  textToHub(body.text, hub);
  reasoningToHub(body.reasoning, hub);
  if (body.stream === true) {
    // The hub's streams always end with a usage chunk: billing and the translation back need it.
    const options = isRecord(body.stream_options) ? body.stream_options : {};
    hub.stream = true;
    hub.stream_options = { ...options, include_usage: true };
  }
  return hub;
}

function inputToMessages(input: unknown): Json[] {
  if (input === undefined || input === null) return [];
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  const messages: Json[] = [];
  records(input, 'input').forEach((item, i) => {
    const at = `input[${i}]`;
    const type = item.type ?? 'message';
    if (type === 'message') return messages.push(messageItemToHub(item, at));
    if (type === 'function_call') return addToolCall(item, messages);
    if (type === 'function_call_output') return messages.push(toolOutputToHub(item, at));
    throw refuse(`${at}.type`, `an input item of type ${JSON.stringify(type)} has no counterpart in ${CHAT}`);
  });
  return messages;
}

/** A message item; an assistant's is merged later with the function calls that follow it. */
function messageItemToHub(item: Json, at: string): Json {
  const role = item.role;
  if (role === 'assistant') return { role, content: assistantText(item.content, `${at}.content`) };
  if (role === 'system' || role === 'developer') return { role, content: instructionContent(item.content, `${at}.content`) };
  if (role !== 'user') throw refuse(`${at}.role`, `must be user, assistant, system or developer`);
  if (typeof item.content === 'string') return { role, content: item.content };
  return { role, content: records(item.content, `${at}.content`).map((part, j) => userPartToHub(part, `${at}.content[${j}]`)) };
}

/** A system or developer message's content: a string, or input_text parts (chat's text parts); nothing else is instructions in chat. */
function instructionContent(content: unknown, at: string): unknown {
  if (typeof content === 'string') return content;
  return records(content, at).map((part, j) => {
    if (part.type !== 'input_text') throw refuse(`${at}[${j}].type`, `a ${JSON.stringify(part.type)} part in a system or developer message has no counterpart in ${CHAT}`);
    return { type: 'text', text: part.text };
  });
}

/** Each part type's fields, to refuse the rest (a cache breakpoint, a file's detail) by name. */
const INPUT_PART_FIELDS: Record<string, ReadonlySet<string>> = {
  input_text: new Set(['type', 'text']),
  input_image: new Set(['type', 'image_url', 'file_id', 'detail']),
  input_file: new Set(['type', 'file_data', 'file_id', 'file_url', 'filename']),
};

function userPartToHub(part: Json, at: string): Json {
  const known = INPUT_PART_FIELDS[String(part.type)];
  if (known) refuseUnknown(part, known, CHAT, at);
  switch (part.type) {
    case 'input_text':
      return { type: 'text', text: part.text };
    case 'input_image': {
      if (isSet(part.file_id)) throw refuse(`${at}.file_id`, `an image by file id has no counterpart in ${CHAT}: send image_url`);
      if (part.detail === 'original') throw refuse(`${at}.detail`, `detail "original" has no counterpart in ${CHAT}`);
      const image: Json = { url: part.image_url };
      if (isSet(part.detail)) image.detail = part.detail;
      return { type: 'image_url', image_url: image };
    }
    case 'input_file': {
      if (isSet(part.file_url)) throw refuse(`${at}.file_url`, `a file by URL has no counterpart in ${CHAT}: send file_data or file_id`);
      const file: Json = {};
      copySet(part, file, ['file_data', 'file_id', 'filename']);
      return { type: 'file', file };
    }
    default:
      throw refuse(`${at}.type`, `a content part of type ${JSON.stringify(part.type)} has no counterpart in ${CHAT}`);
  }
}

/** An assistant's earlier answer as text: its output_text (or input_text) parts joined; a refusal part is refused. */
function assistantText(content: unknown, at: string): string {
  if (typeof content === 'string') return content;
  return records(content, at)
    .map((part, j) => {
      if (part.type === 'output_text' || part.type === 'input_text') return asString(part.text);
      throw refuse(`${at}[${j}].type`, `an assistant part of type ${JSON.stringify(part.type)} has no counterpart in ${CHAT}`);
    })
    .join('');
}

/** A function_call item joins the assistant message just before it, else opens one: chat's tool messages follow the message that called. */
function addToolCall(item: Json, messages: Json[]): void {
  const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
  const last = messages.at(-1);
  if (last?.role === 'assistant') {
    last.tool_calls = [...((last.tool_calls as Json[] | undefined) ?? []), call];
    return;
  }
  messages.push({ role: 'assistant', content: null, tool_calls: [call] });
}

function toolOutputToHub(item: Json, at: string): Json {
  const output = item.output;
  if (typeof output === 'string') return { role: 'tool', tool_call_id: item.call_id, content: output };
  const parts = records(output, `${at}.output`).map((part, j) => {
    if (part.type !== 'input_text') throw refuse(`${at}.output[${j}].type`, `a tool result part of type ${JSON.stringify(part.type)} has no counterpart in ${CHAT}`);
    return { type: 'text', text: part.text };
  });
  return { role: 'tool', tool_call_id: item.call_id, content: parts };
}

function toolToHub(tool: Json, i: number): Json {
  if (tool.type !== 'function') throw refuse(`tools[${i}].type`, `a ${JSON.stringify(tool.type)} tool has no counterpart in ${CHAT}: only function tools translate`);
  refuseUnknown(tool, FUNCTION_TOOL_FIELDS, CHAT, `tools[${i}]`);
  const fn: Json = { name: tool.name };
  copySet(tool, fn, ['description', 'parameters', 'strict']);
  return { type: 'function', function: fn };
}

function toolChoiceToHub(choice: unknown): unknown {
  if (typeof choice === 'string') return choice;
  if (isRecord(choice) && choice.type === 'function') return { type: 'function', function: { name: choice.name } };
  throw refuse('tool_choice', `only none, auto, required or a function translate to ${CHAT}`);
}

function textToHub(text: unknown, hub: Json): void {
  if (!isRecord(text)) return;
  refuseUnknown(text, new Set(['format', 'verbosity']), CHAT, 'text');
  if (isSet(text.verbosity)) hub.verbosity = text.verbosity;
  const format = text.format;
  if (!isRecord(format)) return;
  if (format.type === 'json_schema') {
    const schema: Json = { name: format.name };
    copySet(format, schema, ['schema', 'description', 'strict']);
    hub.response_format = { type: 'json_schema', json_schema: schema };
  } else hub.response_format = { type: format.type };
}

function reasoningToHub(reasoning: unknown, hub: Json): void {
  if (!isRecord(reasoning)) return;
  for (const key of ['summary', 'generate_summary']) if (isSet(reasoning[key])) throw refuse(`reasoning.${key}`, `reasoning summaries have no counterpart in ${CHAT}`);
  refuseUnknown(reasoning, new Set(['effort']), CHAT, 'reasoning');
  if (isSet(reasoning.effort)) hub.reasoning_effort = reasoning.effort;
}

// ---------------------------------------------------------------- hub -> Responses

export function responsesRequestFromHub(body: Json): Json {
  if (typeof body.n === 'number' && body.n > 1) throw refuse('n', `several answers per call have no counterpart in ${RESPONSES}`);
  if (body.logprobs === true || isSet(body.top_logprobs)) throw refuse(body.logprobs === true ? 'logprobs' : 'top_logprobs', `has no counterpart in ${RESPONSES}`);
  if (isSet(body.audio)) throw refuse('audio', `audio output has no counterpart in ${RESPONSES}`);
  if (Array.isArray(body.modalities) && body.modalities.some((m) => m !== 'text')) throw refuse('modalities', `only text output translates to ${RESPONSES}`);
  if (body.store === true) throw refuse('store', `stored completions have no counterpart in ${RESPONSES}`);
  refuseUnknown(body, CHAT_KNOWN, RESPONSES);

  // Chat completions are not stored; a Responses call is, unless told not to.
  const out: Json = { store: false };
  copySet(body, out, SHARED);
  out.input = records(body.messages, 'messages').flatMap(messageFromHub);
  const limit = body.max_completion_tokens ?? body.max_tokens;
  if (isSet(limit)) out.max_output_tokens = limit;
  if (isSet(body.tools)) out.tools = records(body.tools, 'tools').map(toolFromHub);
  if (isSet(body.tool_choice)) out.tool_choice = toolChoiceFromHub(body.tool_choice);
  const text = textFromHub(body);
  if (text) out.text = text;
  if (isSet(body.reasoning_effort)) out.reasoning = { effort: body.reasoning_effort };
  if (body.stream === true) {
    out.stream = true;
    if (isRecord(body.stream_options) && isSet(body.stream_options.include_obfuscation)) out.stream_options = { include_obfuscation: body.stream_options.include_obfuscation };
  }
  return out;
}

function messageFromHub(message: Json, i: number): Json[] {
  const at = `messages[${i}]`;
  // A participant's name: Responses messages have none (a function message's is its role's problem).
  if (isSet(message.name) && message.role !== 'function') throw refuse(`${at}.name`, `has no counterpart in ${RESPONSES}`);
  switch (message.role) {
    case 'system':
    case 'developer':
      return [{ role: message.role, content: textContent(message.content, `${at}.content`) }];
    case 'user':
      if (typeof message.content === 'string') return [{ role: 'user', content: message.content }];
      return [{ role: 'user', content: records(message.content, `${at}.content`).map((part, j) => userPartFromHub(part, `${at}.content[${j}]`)) }];
    case 'assistant':
      return assistantFromHub(message, at);
    case 'tool':
      return [{ type: 'function_call_output', call_id: message.tool_call_id, output: textContent(message.content, `${at}.content`) }];
    default:
      throw refuse(`${at}.role`, `a ${JSON.stringify(message.role)} message has no counterpart in ${RESPONSES}`);
  }
}

/** Text content, a string or text parts, as one string. */
function textContent(content: unknown, at: string): string {
  if (typeof content === 'string') return content;
  return records(content, at)
    .map((part, j) => {
      if (part.type !== 'text') throw refuse(`${at}[${j}].type`, `a ${JSON.stringify(part.type)} part has no counterpart here in ${RESPONSES}`);
      return asString(part.text);
    })
    .join('');
}

function userPartFromHub(part: Json, at: string): Json {
  switch (part.type) {
    case 'text':
      refuseUnknown(part, new Set(['type', 'text']), RESPONSES, at);
      return { type: 'input_text', text: part.text };
    case 'image_url': {
      refuseUnknown(part, new Set(['type', 'image_url']), RESPONSES, at);
      const image = isRecord(part.image_url) ? part.image_url : {};
      refuseUnknown(image, new Set(['url', 'detail']), RESPONSES, `${at}.image_url`);
      return { type: 'input_image', image_url: image.url, detail: image.detail ?? 'auto' };
    }
    case 'file': {
      refuseUnknown(part, new Set(['type', 'file']), RESPONSES, at);
      const file = isRecord(part.file) ? part.file : {};
      refuseUnknown(file, new Set(['file_data', 'file_id', 'filename']), RESPONSES, `${at}.file`);
      const out: Json = { type: 'input_file' };
      copySet(file, out, ['file_data', 'file_id', 'filename']);
      return out;
    }
    default:
      throw refuse(`${at}.type`, `a ${JSON.stringify(part.type)} part has no counterpart in ${RESPONSES}`);
  }
}

function assistantFromHub(message: Json, at: string): Json[] {
  if (isSet(message.refusal)) throw refuse(`${at}.refusal`, `an earlier refusal has no counterpart in a Responses input`);
  if (isSet(message.audio)) throw refuse(`${at}.audio`, `has no counterpart in ${RESPONSES}`);
  if (isSet(message.function_call)) throw refuse(`${at}.function_call`, `the deprecated function_call has no counterpart in ${RESPONSES}: use tool_calls`);
  const items: Json[] = [];
  const text = isSet(message.content) ? textContent(message.content, `${at}.content`) : '';
  if (text !== '') items.push({ role: 'assistant', content: text });
  records(message.tool_calls, `${at}.tool_calls`).forEach((call, j) => {
    if (call.type !== 'function' || !isRecord(call.function)) throw refuse(`${at}.tool_calls[${j}].type`, `only function tool calls translate to ${RESPONSES}`);
    items.push({ type: 'function_call', call_id: call.id, name: call.function.name, arguments: call.function.arguments });
  });
  return items;
}

function toolFromHub(tool: Json, i: number): Json {
  if (tool.type !== 'function' || !isRecord(tool.function)) throw refuse(`tools[${i}].type`, `only function tools translate to ${RESPONSES}`);
  const fn = tool.function;
  refuseUnknown(fn, new Set(['name', 'description', 'parameters', 'strict']), RESPONSES, `tools[${i}].function`);
  // Responses' function tools require `strict` and `parameters`; chat's default for strict is false.
  const out: Json = { type: 'function', name: fn.name, parameters: fn.parameters ?? null, strict: fn.strict ?? false };
  if (isSet(fn.description)) out.description = fn.description;
  return out;
}

function toolChoiceFromHub(choice: unknown): unknown {
  if (typeof choice === 'string') return choice;
  if (isRecord(choice) && choice.type === 'function' && isRecord(choice.function)) return { type: 'function', name: choice.function.name };
  throw refuse('tool_choice', `only none, auto, required or a function translate to ${RESPONSES}`);
}

function textFromHub(body: Json): Json | null {
  const text: Json = {};
  if (isSet(body.verbosity)) text.verbosity = body.verbosity;
  const format = body.response_format;
  if (isRecord(format)) {
    if (format.type === 'json_schema') {
      const schema = isRecord(format.json_schema) ? format.json_schema : {};
      const out: Json = { type: 'json_schema', name: schema.name };
      copySet(schema, out, ['schema', 'description', 'strict']);
      text.format = out;
    } else text.format = { type: format.type };
  }
  return Object.keys(text).length > 0 ? text : null;
}
