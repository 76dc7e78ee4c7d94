/** Keeps the error catalogue and its table in docs/API.md in step. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ApiError, errorCatalogue, errorTypeForStatus, type ErrorCode } from '../../src/errors/catalogue.js';

function documentedCodes(): Map<string, number> {
  const text = readFileSync(new URL('../../docs/API.md', import.meta.url), 'utf8');
  const section = text.slice(text.indexOf('## Errors'));
  const rows = [...section.matchAll(/^\| ([a-z_]+) \| (\d{3}) \|$/gm)];
  return new Map(rows.map((m) => [m[1], Number(m[2])]));
}

describe('error catalogue', () => {
  it('documents every code with its status, and nothing else', () => {
    const documented = documentedCodes();
    const catalogue = new Map(Object.entries(errorCatalogue).map(([code, e]) => [code, e.status]));
    expect(Object.fromEntries(documented)).toEqual(Object.fromEntries(catalogue));
  });

  it('derives the type from the status as docs/API.md "Errors" says', () => {
    const expected: Record<number, string> = {
      400: 'bad_request', 402: 'bad_request', 413: 'bad_request', 401: 'auth_error', 403: 'auth_error',
      404: 'not_found', 409: 'conflict', 429: 'too_many_requests', 500: 'server_error', 502: 'server_error',
      503: 'server_error', 504: 'server_error',
    };
    for (const [code, { status }] of Object.entries(errorCatalogue)) {
      expect(errorTypeForStatus(status), code).toBe(expected[status]);
      const body = new ApiError(code as ErrorCode).toBody();
      expect(body.error).toMatchObject({ code, type: expected[status] });
      expect(String(body.error.message).length).toBeGreaterThan(0);
    }
  });
});
