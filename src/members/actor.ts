/**
 * Who calls a management operation: an organization admin key (the API, /v1/admin) or a
 * member's dashboard session (/dashboard/api). src/admin/actor.ts makes one from either
 * authentication; the operations and the sessions read the caller's organization and role
 * from it, never from a key or a cookie.
 */
import type { Role } from './store.js';

export interface Actor {
  organizationId: string;
  role: Role;
  via: 'admin_key' | 'session';
  /** The signed-in member; null for an admin key. */
  memberId: string | null;
}
