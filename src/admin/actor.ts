/**
 * Who calls a management operation: an organization admin key (the API, /v1/admin) or a
 * member's dashboard session (/dashboard/api). Both authentications end in one Actor, so
 * the operations behind them are one set of handlers (src/admin/operations/) that read
 * the caller's organization and role from here and never from a key or a cookie.
 */
import type { RequestHandler, Response } from 'express';
import { ApiError } from '../errors/catalogue.js';
import { authOf } from '../http/auth.js';
import type { Role } from '../members/store.js';
import type { Actor } from '../members/actor.js';


const role_rank: Record<Role, number> = { viewer: 0, admin: 1, owner: 2 };

export function actorOf(res: Response): Actor {
  return res.locals.actor as Actor;
}

/**
 * An admin key acts with an owner's rights: it is how an organization gets its first
 * owner (bootstrap), and it was already allowed every management operation.
 */
export const actorFromAdminKey: RequestHandler = (_req, res, next) => {
  const actor: Actor = { organizationId: authOf(res).key.organization_id, role: 'owner', via: 'admin_key', memberId: null };
  res.locals.actor = actor;
  next();
};

/** Refuses a caller whose role is below `needed`: 403 permission_denied naming the role needed. */
export function requireRole(needed: Role): RequestHandler {
  return (_req, res, next) => {
    const { role } = actorOf(res);
    if (role_rank[role] < role_rank[needed]) {
      throw new ApiError('permission_denied', {
        message: `this needs the ${needed} role${needed === 'owner' ? '' : ' or higher'}; you are ${role === 'admin' ? 'an' : 'a'} ${role}`,
        extra: { role_required: needed, role },
      });
    }
    next();
  };
}
