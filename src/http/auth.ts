/**
 * Authentication: `Authorization: Bearer <key>` or `x-api-key: <key>`. Puts the key's
 * record, project scope and contract variant on res.locals.auth.
 */
import type { Request, RequestHandler, Response } from 'express';
import { ApiError } from '../errors/catalogue.js';
import type { KeyCache } from '../keys/store.js';
import type { Variant } from '../ledger/amounts.js';
import type { AuthContext } from '../keys/caller.js';
import { variantRefused } from '../errors/fields.js';
import { isWellFormedKey, providerKeyLookalike, type KeyType } from '../keys/secrets.js';

function presentedKey(req: Request): string | null {
  const header = req.headers.authorization;
  if (header) {
    const m = /^Bearer\s+(.+)$/i.exec(header.trim());
    const key = m ? m[1].trim() : header.trim();
    if (/^bearer$/i.test(key)) throw emptyBearer();
    return key;
  }
  const x = req.headers['x-api-key'];
  return typeof x === 'string' && x.trim().length > 0 ? x.trim() : null;
}

/**
 * `Authorization: Bearer` with nothing after it: what a shell sends when the variable that
 * should hold the key is unset (`Bearer $API_KEY`). Said as a missing key, in those words,
 * rather than as an invalid one.
 */
function emptyBearer(): ApiError {
  return new ApiError('missing_api_key', {
    message: 'no API key: the Authorization header is "Bearer" with no key after it (is the variable holding the key set?)',
  });
}

/**
 * The 401 of a key that is no key of this service. A provider's key (the usual mistake of
 * a client configured for OpenAI or Anthropic) is named as such, never echoed.
 */
function malformedKey(key: string): ApiError {
  const provider = providerKeyLookalike(key);
  if (provider === null) return new ApiError('invalid_api_key');
  return new ApiError('invalid_api_key', {
    message: `invalid API key: this looks like an ${provider} API key; use a key from this service (created in the dashboard or by npm run bootstrap)`,
  });
}

/**
 * `ownVariantCheck`: the paths whose routes refuse an invalid X-Service-Api-Variant
 * themselves, so that it is listed with their other invalid fields (the gateway's, see
 * src/gateway/request.ts); their requests keep the key's variant here.
 */
export function authenticate(cache: KeyCache, opts: { ownVariantCheck?: ReadonlySet<string> } = {}): RequestHandler {
  return async (req, res, next) => {
    const key = presentedKey(req);
    if (!key) throw new ApiError('missing_api_key');
    if (!isWellFormedKey(key)) throw malformedKey(key);
    const record = await cache.lookup(key);
    if (!record) throw new ApiError('invalid_api_key');
    if (record.revoked_at !== null) throw new ApiError('api_key_revoked');
    if (record.expires_at !== null && record.expires_at <= Date.now()) throw new ApiError('api_key_expired');
    let variant: Variant = record.contract ?? 'B';
    const override = req.headers['x-service-api-variant'];
    if (override === 'A' || override === 'B') variant = override;
    else if (override !== undefined && !opts.ownVariantCheck?.has(req.path)) throw variantRefused();
    const auth: AuthContext = {
      key: record,
      scope: { projectId: record.project_id ?? '', organizationId: record.organization_id },
      variant,
    };
    res.locals.auth = auth;
    next();
  };
}

export function authOf(res: Response): AuthContext {
  return res.locals.auth as AuthContext;
}

const keyTypeNames: Record<KeyType, string> = {
  admin: 'an admin key (svc_admin_...)',
  project: 'a project key (svc_live_...)',
  customer: 'a customer-scoped key (svc_customer_...)',
};

/**
 * Allows only these key types on a route: 403 permission_denied otherwise, whose message
 * names the key types that may call it and the one sent (`key_types_allowed`, `key_type`).
 */
export function requireKeyType(...types: KeyType[]): RequestHandler {
  const allowed = types.map((t) => keyTypeNames[t]).join(' or ');
  return (_req, res, next) => {
    const type = authOf(res).key.type;
    if (!types.includes(type)) {
      throw new ApiError('permission_denied', {
        message: `this endpoint takes ${allowed}; this is ${keyTypeNames[type]}`,
        extra: { key_types_allowed: types, key_type: type },
      });
    }
    next();
  };
}
