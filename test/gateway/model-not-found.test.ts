/**
 * A gateway call to a model the project has not (or has inactive): 404 model_not_found
 * names the model asked for, lists the project's active models that the key may call
 * (the first 20, then how many more) and suggests the nearest one when one is near, also
 * in `error.suggested_model`. The listing is read only on that path: a call to a known
 * model never reads it.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { closestModelId, editDistance } from '../../src/gateway/model-not-found.js';
import { expectError } from '../support/errors.js';
import { ANTHROPIC_MODEL, OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv } from './support.js';
import { mockDirective } from '../../src/gateway/mock/controls.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
  await env.putModel('demo-gpt', { provider: 'openai' });
  await env.putModel('gpt-off', { provider: 'openai', active: false });
  await env.fund('rich', 1_000_000);
});
afterAll(() => env?.close());

const ask = [{ role: 'user', content: `hi ${mockDirective({ output_tokens: 1 })}` }];

function chat(model: string, key = env.p.projectKey) {
  return rawPost(env.svc.url, '/v1/chat/completions', { key, headers: { 'x-service-customer': 'rich' }, body: { model, messages: ask } });
}

const listed = `${ANTHROPIC_MODEL}, demo-gpt, ${OPENAI_MODEL}`;

describe('model_not_found', () => {
  it('names the model and suggests the near one (a swap of two letters)', async () => {
    expectError(await chat('demo-gtp'), 404, 'model_not_found', {
      param: 'model',
      message: `model demo-gtp not found in this project; did you mean \`demo-gpt\`? Its active models: ${listed} (GET /v1/models lists them).`,
      fields: { suggested_model: 'demo-gpt' },
    });
    // Case is ignored for the suggestion.
    expectError(await chat('DEMO-GPT'), 404, 'model_not_found', { fields: { suggested_model: 'demo-gpt' } });
  });

  it('suggests nothing when no model is near', async () => {
    expectError(await chat('llama-3'), 404, 'model_not_found', {
      message: `model llama-3 not found in this project. Its active models: ${listed} (GET /v1/models lists them).`,
      fields: { suggested_model: null },
    });
  });

  it('says when the model is there but inactive', async () => {
    expectError(await chat('gpt-off'), 404, 'model_not_found', { message: /^model gpt-off is inactive in this project\. Its active models: / });
  });

  it('lists only the models a customer key may call', async () => {
    const key = await env.p.customerKey('rich', { allowedModels: [OPENAI_MODEL] });
    expectError(await chat('gpt-tset', key), 404, 'model_not_found', {
      message: `model gpt-tset not found in this project; did you mean \`${OPENAI_MODEL}\`? Its active models: ${OPENAI_MODEL} (GET /v1/models lists them).`,
    });
  });

  it('lists 20 models and counts the rest; a new model is listed at once', async () => {
    const project = await env.svc.project('B');
    for (let i = 0; i < 23; i++) await env.putModel(`m-${String(i).padStart(2, '0')}`, { provider: 'openai' }, project);
    const first = await chat('nothing-like-it', project.projectKey);
    const twenty = Array.from({ length: 20 }, (_, i) => `m-${String(i).padStart(2, '0')}`).join(', ');
    expectError(first, 404, 'model_not_found', { message: `model nothing-like-it not found in this project. Its active models: ${twenty} and 3 more (GET /v1/models lists them).` });
    await env.putModel('a-new-one', { provider: 'openai' }, project);
    expectError(await chat('nothing-like-it', project.projectKey), 404, 'model_not_found', { message: /Its active models: a-new-one, m-00, .* and 4 more/ });
  });

  it('a project without active models says so', async () => {
    const empty = await env.svc.project('B');
    expectError(await chat('demo-gpt', empty.projectKey), 404, 'model_not_found', {
      message: 'model demo-gpt not found in this project. It has no active models.',
      fields: { suggested_model: null },
    });
  });

  it('a call to a known model never reads the listing', async () => {
    const activeIds = vi.spyOn(env.svc.rt.models, 'activeIds');
    try {
      const ok = await chat(OPENAI_MODEL);
      expect(ok.status, ok.text).toBe(200);
      expect(activeIds).not.toHaveBeenCalled();
      expect((await chat('demo-gtp')).status).toBe(404);
      expect(activeIds).toHaveBeenCalledTimes(1);
    } finally {
      activeIds.mockRestore();
    }
  });
});

describe('the edit distance', () => {
  it('counts a swap of neighbours as one edit, and gives up past its limit', () => {
    expect(editDistance('demo-gtp', 'demo-gpt', 2)).toBe(1);
    expect(editDistance('kitten', 'sitting', 5)).toBe(3);
    expect(editDistance('ca', 'abc', 5)).toBe(3);
    expect(editDistance('abcdef', 'uvwxyz', 2)).toBe(3);
    expect(editDistance('same', 'same', 0)).toBe(0);
  });

  it('suggests within a quarter of the length (at least one edit), the nearest first', () => {
    expect(closestModelId('gpt4o', ['gpt-4o', 'gpt-4'])).toBe('gpt-4o');
    expect(closestModelId('claude-sonet', ['claude-haiku', 'claude-sonnet'])).toBe('claude-sonnet');
    expect(closestModelId('gtp', ['gpt'])).toBe('gpt');
    expect(closestModelId('abc', ['xyz'])).toBeNull();
    expect(closestModelId('gpt-4o-mini', ['gpt-4o'])).toBeNull();
  });
});
