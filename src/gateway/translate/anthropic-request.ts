/**
 * Anthropic Messages requests to and from the hub (chat completions): the request half of
 * the Anthropic Translator (./anthropic.ts). Every field is mapped or refused with a 400
 * naming it (the client's own field path); none is dropped. The mapping is the table in
 * docs/API.md, "Any model through any format".
 */
import { isObject, refused, type Json } from '../wire/format.js';

/** A field with no value: absent or JSON null, both treated as not sent. */
function unset(v: unknown): boolean {
  return v === undefined || v === null;
}

/** Refuses every field of `o` not in `known`, naming it under `at` (`messages[2].`, '' at the top). */
function onlyKnown(o: Json, known: ReadonlySet<string>, at: string, why: string): void {
  for (const k of Object.keys(o)) if (!known.has(k) && !unset(o[k])) throw refused(at + k, `${at + k} has no counterpart in ${why}`);
}

function arrayAt(v: unknown, at: string): unknown[] {
  if (!Array.isArray(v)) throw refused(at, `${at} must be an array`);
  return v as unknown[];
}

function objectAt(v: unknown, at: string): Json {
  if (!isObject(v)) throw refused(at, `${at} must be an object`);
  return v;
}

function stringAt(v: unknown, at: string): string {
  if (typeof v !== 'string') throw refused(at, `${at} must be a string`);
  return v;
}

const DATA_URL = /^data:([^;,]+);base64,(.*)$/s;

// ---------------------------------------------------------------------------
// Anthropic (client) -> hub
// ---------------------------------------------------------------------------

const TO_CHAT = 'the chat completions format';
const anthropicTop = new Set(['model', 'messages', 'system', 'max_tokens', 'stop_sequences', 'temperature', 'top_p', 'metadata', 'stream', 'tools', 'tool_choice']);
const textBlockFields = new Set(['type', 'text']);
const imageBlockFields = new Set(['type', 'source']);
const documentBlockFields = new Set(['type', 'source', 'title']);
const toolUseFields = new Set(['type', 'id', 'name', 'input']);
const toolResultFields = new Set(['type', 'tool_use_id', 'content']);
const anthropicToolFields = new Set(['name', 'description', 'input_schema', 'type']);

/** A text, image or document block as a chat content part. */
function partToHub(block: Json, at: string): Json {
  switch (block.type) {
    case 'text':
      onlyKnown(block, textBlockFields, at + '.', TO_CHAT);
      return { type: 'text', text: stringAt(block.text, at + '.text') };
    case 'image': {
      onlyKnown(block, imageBlockFields, at + '.', TO_CHAT);
      const source = objectAt(block.source, at + '.source');
      if (source.type === 'base64') return { type: 'image_url', image_url: { url: `data:${stringAt(source.media_type, at + '.source.media_type')};base64,${stringAt(source.data, at + '.source.data')}` } };
      if (source.type === 'url') return { type: 'image_url', image_url: { url: stringAt(source.url, at + '.source.url') } };
      throw refused(at + '.source.type', `${at}.source.type ${JSON.stringify(source.type)} has no counterpart in ${TO_CHAT} (base64 and url images do)`);
    }
    case 'document': {
      onlyKnown(block, documentBlockFields, at + '.', TO_CHAT);
      const source = objectAt(block.source, at + '.source');
      if (source.type !== 'base64' || source.media_type !== 'application/pdf') {
        throw refused(at + '.source', `${at}.source: only a base64 PDF document has a counterpart in ${TO_CHAT} (a file part)`);
      }
      const file: Json = { file_data: `data:application/pdf;base64,${stringAt(source.data, at + '.source.data')}` };
      if (typeof block.title === 'string') file.filename = block.title;
      return { type: 'file', file };
    }
    default:
      throw refused(at + '.type', `${at}.type ${JSON.stringify(block.type)} has no counterpart in ${TO_CHAT}`);
  }
}

/** A tool_result block as a `tool` message: its content is text only in chat. */
function toolResultToHub(block: Json, at: string): Json {
  // `is_error: false` says nothing chat cannot; `true` has no counterpart.
  onlyKnown(block.is_error === false ? { ...block, is_error: undefined } : block, toolResultFields, at + '.', TO_CHAT);
  const id = stringAt(block.tool_use_id, at + '.tool_use_id');
  const content = block.content;
  if (unset(content)) return { role: 'tool', tool_call_id: id, content: '' };
  if (typeof content === 'string') return { role: 'tool', tool_call_id: id, content };
  const parts = arrayAt(content, at + '.content').map((inner, k) => {
    const where = `${at}.content[${k}]`;
    const b = objectAt(inner, where);
    if (b.type !== 'text') throw refused(where + '.type', `${where}: a tool result holds text only in ${TO_CHAT}`);
    return partToHub(b, where);
  });
  return { role: 'tool', tool_call_id: id, content: parts };
}

/** One Anthropic message as one or more chat messages (tool results become `tool` messages, first). */
function messageToHub(m: Json, at: string, out: Json[]): void {
  const role = m.role;
  if (role !== 'user' && role !== 'assistant') throw refused(at + '.role', `${at}.role must be user or assistant`);
  onlyKnown(m, new Set(['role', 'content']), at + '.', TO_CHAT);
  if (typeof m.content === 'string') {
    out.push({ role, content: m.content });
    return;
  }
  const blocks = arrayAt(m.content, at + '.content');
  if (role === 'assistant') {
    let text = '';
    const calls: Json[] = [];
    blocks.forEach((raw, j) => {
      const where = `${at}.content[${j}]`;
      const b = objectAt(raw, where);
      if (b.type === 'text') {
        onlyKnown(b, textBlockFields, where + '.', TO_CHAT);
        text += stringAt(b.text, where + '.text');
      } else if (b.type === 'tool_use') {
        onlyKnown(b, toolUseFields, where + '.', TO_CHAT);
        calls.push({ id: stringAt(b.id, where + '.id'), type: 'function', function: { name: stringAt(b.name, where + '.name'), arguments: JSON.stringify(b.input ?? {}) } });
      } else {
        throw refused(where + '.type', `${where}.type ${JSON.stringify(b.type)} has no counterpart in ${TO_CHAT}`);
      }
    });
    const msg: Json = { role: 'assistant', content: text === '' && calls.length > 0 ? null : text };
    if (calls.length > 0) msg.tool_calls = calls;
    out.push(msg);
    return;
  }
  const parts: Json[] = [];
  blocks.forEach((raw, j) => {
    const where = `${at}.content[${j}]`;
    const b = objectAt(raw, where);
    if (b.type === 'tool_result') out.push(toolResultToHub(b, where));
    else parts.push(partToHub(b, where));
  });
  if (parts.length > 0) out.push({ role: 'user', content: parts });
}

function systemToHub(system: unknown): Json {
  if (typeof system === 'string') return { role: 'system', content: system };
  const parts = arrayAt(system, 'system').map((raw, i) => {
    const b = objectAt(raw, `system[${i}]`);
    if (b.type !== 'text') throw refused(`system[${i}].type`, 'system blocks must be text');
    return partToHub(b, `system[${i}]`);
  });
  return { role: 'system', content: parts };
}

function toolsToHub(tools: unknown): Json[] {
  return arrayAt(tools, 'tools').map((raw, i) => {
    const at = `tools[${i}]`;
    const t = objectAt(raw, at);
    if (!unset(t.type) && t.type !== 'custom') throw refused(at + '.type', `${at}.type ${JSON.stringify(t.type)} (a server tool) has no counterpart in ${TO_CHAT}`);
    onlyKnown(t, anthropicToolFields, at + '.', TO_CHAT);
    const fn: Json = { name: stringAt(t.name, at + '.name'), parameters: objectAt(t.input_schema, at + '.input_schema') };
    if (typeof t.description === 'string') fn.description = t.description;
    return { type: 'function', function: fn };
  });
}

function toolChoiceToHub(raw: unknown, hub: Json): void {
  const c = objectAt(raw, 'tool_choice');
  onlyKnown(c, new Set(['type', 'name', 'disable_parallel_tool_use']), 'tool_choice.', TO_CHAT);
  if (c.type === 'auto') hub.tool_choice = 'auto';
  else if (c.type === 'any') hub.tool_choice = 'required';
  else if (c.type === 'none') hub.tool_choice = 'none';
  else if (c.type === 'tool') hub.tool_choice = { type: 'function', function: { name: stringAt(c.name, 'tool_choice.name') } };
  else throw refused('tool_choice.type', 'tool_choice.type must be auto, any, tool or none');
  if (c.disable_parallel_tool_use === true) hub.parallel_tool_calls = false;
}

/** A client's Anthropic request as the hub's (chat completions) request. */
export function anthropicRequestToHub(body: Json): Json {
  onlyKnown(body, anthropicTop, '', TO_CHAT);
  const messages: Json[] = [];
  if (!unset(body.system)) messages.push(systemToHub(body.system));
  arrayAt(body.messages, 'messages').forEach((m, i) => messageToHub(objectAt(m, `messages[${i}]`), `messages[${i}]`, messages));
  const hub: Json = { model: body.model, messages };
  if (!unset(body.max_tokens)) hub.max_completion_tokens = body.max_tokens;
  if (!unset(body.stop_sequences)) hub.stop = arrayAt(body.stop_sequences, 'stop_sequences');
  if (!unset(body.temperature)) hub.temperature = body.temperature;
  if (!unset(body.top_p)) hub.top_p = body.top_p;
  if (!unset(body.metadata)) {
    const meta = objectAt(body.metadata, 'metadata');
    onlyKnown(meta, new Set(['user_id']), 'metadata.', TO_CHAT);
    if (typeof meta.user_id === 'string') hub.user = meta.user_id;
  }
  if (!unset(body.stream)) hub.stream = body.stream;
  if (!unset(body.tools)) hub.tools = toolsToHub(body.tools);
  if (!unset(body.tool_choice)) toolChoiceToHub(body.tool_choice, hub);
  return hub;
}

// ---------------------------------------------------------------------------
// hub -> Anthropic (upstream)
// ---------------------------------------------------------------------------

const TO_ANTHROPIC = 'the Anthropic messages format';
const chatTop = new Set([
  'model', 'messages', 'max_tokens', 'max_completion_tokens', 'stop', 'temperature', 'top_p', 'user', 'stream', 'stream_options', 'tools', 'tool_choice', 'parallel_tool_calls', 'n', 'response_format',
]);
const chatMessageFields = new Set(['role', 'content', 'tool_calls', 'tool_call_id', 'refusal']);

/** A chat content part as an Anthropic block. */
function partFromHub(part: Json, at: string): Json {
  switch (part.type) {
    case 'text':
      return { type: 'text', text: stringAt(part.text, at + '.text') };
    case 'image_url': {
      const image = objectAt(part.image_url, at + '.image_url');
      if (!unset(image.detail) && image.detail !== 'auto') throw refused(at + '.image_url.detail', `${at}.image_url.detail has no counterpart in ${TO_ANTHROPIC}`);
      const url = stringAt(image.url, at + '.image_url.url');
      const data = DATA_URL.exec(url);
      if (data) return { type: 'image', source: { type: 'base64', media_type: data[1], data: data[2] } };
      return { type: 'image', source: { type: 'url', url } };
    }
    case 'file': {
      const file = objectAt(part.file, at + '.file');
      const data = typeof file.file_data === 'string' ? DATA_URL.exec(file.file_data) : null;
      if (!data || data[1] !== 'application/pdf') throw refused(at + '.file', `${at}.file: only a PDF as file_data (a base64 data URL) has a counterpart in ${TO_ANTHROPIC}`);
      const block: Json = { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: data[2] } };
      if (typeof file.filename === 'string') block.title = file.filename;
      return block;
    }
    default:
      throw refused(at + '.type', `${at}.type ${JSON.stringify(part.type)} has no counterpart in ${TO_ANTHROPIC}`);
  }
}

function contentFromHub(content: unknown, at: string): Json[] {
  if (typeof content === 'string') return content === '' ? [] : [{ type: 'text', text: content }];
  if (unset(content)) return [];
  return arrayAt(content, at).map((p, j) => partFromHub(objectAt(p, `${at}[${j}]`), `${at}[${j}]`));
}

function toolCallsFromHub(calls: unknown, at: string): Json[] {
  return arrayAt(calls, at).map((raw, k) => {
    const where = `${at}[${k}]`;
    const c = objectAt(raw, where);
    if (c.type !== 'function') throw refused(where + '.type', `${where}.type must be function`);
    const fn = objectAt(c.function, where + '.function');
    const args = stringAt(fn.arguments, where + '.function.arguments');
    let input: unknown;
    try {
      input = args === '' ? {} : JSON.parse(args);
    } catch {
      throw refused(where + '.function.arguments', `${where}.function.arguments must be JSON (an Anthropic tool_use input is an object)`);
    }
    if (!isObject(input)) throw refused(where + '.function.arguments', `${where}.function.arguments must be a JSON object`);
    return { type: 'tool_use', id: stringAt(c.id, where + '.id'), name: stringAt(fn.name, where + '.name'), input };
  });
}

/** Adds blocks to the conversation, merging them into the last message when it has the same role (Anthropic alternates). */
function pushTurn(out: Json[], role: 'user' | 'assistant', blocks: Json[]): void {
  const last = out.at(-1);
  if (last !== undefined && last.role === role) (last.content as Json[]).push(...blocks);
  else out.push({ role, content: blocks });
}

function messagesFromHub(messages: unknown[], out: Json[]): Json[] {
  const system: Json[] = [];
  messages.forEach((raw, i) => {
    const at = `messages[${i}]`;
    const m = objectAt(raw, at);
    onlyKnown(m, chatMessageFields, at + '.', TO_ANTHROPIC);
    switch (m.role) {
      case 'system':
      case 'developer':
        if (out.length > 0) throw refused(at + '.role', `${at}: a system message after the conversation began has no counterpart in ${TO_ANTHROPIC} (its system prompt comes first)`);
        system.push(...contentFromHub(m.content, at + '.content'));
        break;
      case 'user':
        pushTurn(out, 'user', contentFromHub(m.content, at + '.content'));
        break;
      case 'assistant': {
        if (!unset(m.refusal)) throw refused(at + '.refusal', `${at}.refusal has no counterpart in ${TO_ANTHROPIC}`);
        const blocks = contentFromHub(m.content, at + '.content');
        if (!unset(m.tool_calls)) blocks.push(...toolCallsFromHub(m.tool_calls, at + '.tool_calls'));
        pushTurn(out, 'assistant', blocks);
        break;
      }
      case 'tool': {
        const content = typeof m.content === 'string' ? m.content : contentFromHub(m.content, at + '.content');
        pushTurn(out, 'user', [{ type: 'tool_result', tool_use_id: stringAt(m.tool_call_id, at + '.tool_call_id'), content }]);
        break;
      }
      default:
        throw refused(at + '.role', `${at}.role ${JSON.stringify(m.role)} has no counterpart in ${TO_ANTHROPIC}`);
    }
  });
  return system;
}

function toolsFromHub(tools: unknown): Json[] {
  return arrayAt(tools, 'tools').map((raw, i) => {
    const at = `tools[${i}]`;
    const t = objectAt(raw, at);
    if (t.type !== 'function') throw refused(at + '.type', `${at}.type ${JSON.stringify(t.type)} has no counterpart in ${TO_ANTHROPIC}`);
    const fn = objectAt(t.function, at + '.function');
    if (fn.strict === true) throw refused(at + '.function.strict', `${at}.function.strict has no counterpart in ${TO_ANTHROPIC}`);
    const tool: Json = { name: stringAt(fn.name, at + '.function.name'), input_schema: unset(fn.parameters) ? { type: 'object', properties: {} } : objectAt(fn.parameters, at + '.function.parameters') };
    if (typeof fn.description === 'string') tool.description = fn.description;
    return tool;
  });
}

function toolChoiceFromHub(c: unknown): Json {
  if (c === 'auto') return { type: 'auto' };
  if (c === 'none') return { type: 'none' };
  if (c === 'required') return { type: 'any' };
  if (isObject(c) && c.type === 'function' && isObject(c.function)) return { type: 'tool', name: stringAt(c.function.name, 'tool_choice.function.name') };
  throw refused('tool_choice', `tool_choice ${JSON.stringify(c)} has no counterpart in ${TO_ANTHROPIC}`);
}

/** The hub's (chat completions) request as an Anthropic request, sent upstream. */
export function anthropicRequestFromHub(hub: Json): Json {
  onlyKnown(hub, chatTop, '', TO_ANTHROPIC);
  if (!unset(hub.n) && hub.n !== 1) throw refused('n', `n > 1 has no counterpart in ${TO_ANTHROPIC} (one answer per call)`);
  if (!unset(hub.response_format) && !(isObject(hub.response_format) && hub.response_format.type === 'text')) {
    throw refused('response_format', `response_format other than text has no counterpart in ${TO_ANTHROPIC}`);
  }
  const messages: Json[] = [];
  const system = messagesFromHub(arrayAt(hub.messages, 'messages'), messages);
  const body: Json = { model: hub.model, messages };
  if (system.length > 0) body.system = system.every((b) => b.type === 'text') && system.length === 1 ? system[0]!.text : system;
  body.max_tokens = hub.max_completion_tokens ?? hub.max_tokens;
  if (!unset(hub.stop)) body.stop_sequences = typeof hub.stop === 'string' ? [hub.stop] : arrayAt(hub.stop, 'stop');
  if (!unset(hub.temperature)) body.temperature = hub.temperature;
  if (!unset(hub.top_p)) body.top_p = hub.top_p;
  if (!unset(hub.user)) body.metadata = { user_id: hub.user };
  if (!unset(hub.stream)) body.stream = hub.stream;
  if (!unset(hub.tools)) body.tools = toolsFromHub(hub.tools);
  if (!unset(hub.tool_choice)) body.tool_choice = toolChoiceFromHub(hub.tool_choice);
  if (hub.parallel_tool_calls === false) body.tool_choice = { ...((body.tool_choice as Json | undefined) ?? { type: 'auto' }), disable_parallel_tool_use: true };
  return body;
}
