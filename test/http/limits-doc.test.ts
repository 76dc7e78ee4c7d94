/**
 * docs/API.md "Limits" states the limits the code holds requests to: each row checked
 * here against the constant it documents, so that a changed limit fails until the page
 * says it too.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { page_size_default as admin_page_default, page_size_max as admin_page_max } from '../../src/admin/queries.js';
import { model_id_chars_max, price_per_million_credits_max, token_count_max, upstream_key_chars_max } from '../../src/admin/models.js';
import { allowed_models_max } from '../../src/admin/operations/keys.js';
import { url_chars_max } from '../../src/admin/operations/models.js';
import { project_name_chars_max, rate_limit_per_minute_max } from '../../src/admin/operations/projects.js';
import { usage_days_default, usage_days_max } from '../../src/admin/operations/usage.js';
import { page_size_default, page_size_max } from '../../src/customers/routes.js';
import { body_bytes_max_gateway } from '../../src/gateway/routes.js';
import { idempotency_key_chars_max, trace_id_chars_max } from '../../src/gateway/request.js';
import { answers_max } from '../../src/gateway/wire/openai.js';
import { body_bytes_max_billing } from '../../src/app.js';
import { amount_credits_max, credits_sum_max } from '../../src/ledger/amounts.js';
import { ttl_seconds_max } from '../../src/ledger/schemas.js';
import { body_depth_max, stored_json_bytes_max, stored_json_depth_max } from '../../src/schema/json.js';

const doc = readFileSync(new URL('../../docs/API.md', import.meta.url), 'utf8');
const limits = doc.slice(doc.indexOf('\n## Limits\n'), doc.indexOf('\n## Errors\n')).replace(/[ \n]+/g, ' ');
const n = (v: number) => v.toLocaleString('en-US');
const pow10 = (v: number) => `10^${Math.log10(v)}`;

describe('docs/API.md "Limits"', () => {
  it('states every limit with the value the code enforces', () => {
    expect(limits.length).toBeGreaterThan(500);
    const expected = [
      `1 to ${pow10(amount_credits_max)} credits`,
      `${n(credits_sum_max)} credits`,
      `0 to ${pow10(price_per_million_credits_max)} credits`,
      `| ${body_bytes_max_gateway / 1024 / 1024} MiB | 413 \`payload_too_large\``,
      `| ${body_bytes_max_billing / 1024 / 1024} MiB | 413 \`payload_too_large\``,
      `| 1-${page_size_max} | ${page_size_default} |`,
      `gateway included | ${body_depth_max} levels | 400 \`invalid_request\``,
      `| ${stored_json_depth_max} levels, ${stored_json_bytes_max / 1024} KiB serialized | 400 \`invalid_request\``,
      `| 1-${usage_days_max} days | ${usage_days_default} |`,
      `1 to ${n(ttl_seconds_max)} s`,
      `\`X-Service-Trace-Id\` | 1-${trace_id_chars_max} characters`,
      `gateway \`Idempotency-Key\` | 1-${idempotency_key_chars_max} characters`,
      `OpenAI \`n\` | 1-${answers_max}`,
      `1-${model_id_chars_max} /`,
      `1-${upstream_key_chars_max} / up to ${url_chars_max} characters`,
      `1 to ${pow10(token_count_max)} tokens`,
      `project and key names | 1-${project_name_chars_max} characters`,
      `1-${allowed_models_max} model ids`,
      `1 to ${pow10(rate_limit_per_minute_max)}`,
    ];
    for (const text of expected) expect(limits).toContain(text);
    // The two list modules share one page size.
    expect([admin_page_max, admin_page_default]).toEqual([page_size_max, page_size_default]);
  });
});
