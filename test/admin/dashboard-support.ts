/** Dashboard API calls for tests: sign-in, and calls carrying the session cookie and its CSRF token. */
import { expect } from 'vitest';
import type { ApiResponse, Json, TestProject, TestService } from '../helpers.js';

export interface SignedIn {
  /** `svc_session=<token>`, as the browser sends it. */
  cookie: string;
  token: string;
  csrf: string;
  /** The sign-in answer. */
  body: Json;
  setCookie: string;
}

export async function signInRaw(svc: TestService, email: string, password: string, extra: Record<string, unknown> = {}): Promise<ApiResponse> {
  return svc.call('POST', '/dashboard/api/session', { body: { email, password, ...extra } });
}

export async function signIn(svc: TestService, email: string, password: string, extra: Record<string, unknown> = {}): Promise<SignedIn> {
  const r = await signInRaw(svc, email, password, extra);
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  const setCookie = r.headers.get('set-cookie') ?? '';
  const token = /svc_session=([^;]+)/.exec(setCookie)![1];
  return { cookie: `svc_session=${token}`, token, csrf: r.body.csrf_token, body: r.body, setCookie };
}

/**
 * Calls /dashboard/api<path> with the session's cookie, and with its CSRF token unless
 * `csrf` says otherwise (null: none sent).
 */
export function dash(
  svc: TestService,
  s: SignedIn | null,
  method: string,
  path: string,
  o: { body?: unknown; csrf?: string | null } = {},
): Promise<ApiResponse> {
  const headers: Record<string, string> = {};
  if (s !== null) headers.cookie = s.cookie;
  const csrf = o.csrf === undefined ? s?.csrf : o.csrf;
  if (csrf !== null && csrf !== undefined) headers['x-csrf-token'] = csrf;
  return svc.call(method, `/dashboard/api${path}`, { body: o.body, headers });
}

let serial = 0;

/** A member of the project's organization made with its admin key; returns its sign-in. */
export async function addMember(
  svc: TestService,
  p: TestProject,
  role: 'owner' | 'admin' | 'viewer',
  email = `${role}${++serial}-${p.organizationId.slice(-6)}@example.com`,
): Promise<{ id: string; email: string; password: string }> {
  const password = `pw-${role}-${serial}-long-enough`;
  const r = await svc.call('POST', '/v1/admin/members', { key: p.adminKey, body: { email, role, password } });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return { id: r.body.id, email, password };
}
