/**
 * Team members of an organization in PostgreSQL: invitation within the plan's member
 * limit, role changes and removal that never leave the organization without an owner,
 * keyset pages, and the lookup sign-in needs. Every change locks the organization row
 * first, so the count it checks (members, owners) cannot move under it.
 */
import { sql, UniqueIntegrityConstraintViolationError, type DatabasePool, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { timestamp } from '../schema/zod.js';
import { keysetOrder, toPage, type Page, type PageRequest } from '../admin/queries.js';
import { ApiError } from '../errors/catalogue.js';
import { newId } from '../ids.js';

export const roles = ['owner', 'admin', 'viewer'] as const;
export type Role = (typeof roles)[number];

export const memberRow = z.object({
  id: z.string(),
  organization_id: z.string(),
  email: z.string(),
  role: z.enum(roles),
  created_at: z.number(),
  updated_at: z.number(),
});
export type MemberRow = z.infer<typeof memberRow>;

const memberColumns = sql.fragment`id, organization_id, email, role, created_at, updated_at`;

/** What the API shows of a member: never the password's hash. */
export function memberEntry(m: MemberRow) {
  return {
    id: m.id,
    organization_id: m.organization_id,
    email: m.email,
    role: m.role,
    created_at: new Date(m.created_at).toISOString(),
    updated_at: new Date(m.updated_at).toISOString(),
  };
}

/** A membership that may sign in with this email, with what checking its password needs. */
const signInCandidate = memberRow.extend({ password_hash: z.string(), organization_name: z.string() });
export type SignInCandidate = z.infer<typeof signInCandidate>;

/** Memberships one email may hold that sign-in checks a password against, at most. */
export const sign_in_candidates_max = 10;

const lockOrganization = (tx: DatabaseTransactionConnection, organizationId: string) =>
  tx.maybeOne(sql.unsafe`SELECT id FROM organizations WHERE id = ${organizationId} FOR UPDATE`);

async function ownersOf(tx: DatabaseTransactionConnection, organizationId: string): Promise<number> {
  return tx.oneFirst(sql.type(z.object({ n: z.number() }))`
    SELECT count(*)::int8 AS n FROM members WHERE organization_id = ${organizationId} AND role = 'owner'`);
}

export function createMemberQueries(pool: DatabasePool) {
  const find = (organizationId: string, memberId: string): Promise<MemberRow | null> =>
    pool.maybeOne(sql.type(memberRow)`SELECT ${memberColumns} FROM members WHERE id = ${memberId} AND organization_id = ${organizationId}`);

  return {
    find,

    /**
     * Adds a member unless the organization has `membersMax` already (null: no limit):
     * 403 plan_limit_reached naming the limit. The same email (in any case) twice in one
     * organization is 409 email_taken.
     */
    async create(organizationId: string, m: { email: string; role: Role; passwordHash: string }, membersMax: number | null): Promise<MemberRow> {
      try {
        return await pool.transaction(async (tx) => {
          if (!(await lockOrganization(tx, organizationId))) throw new ApiError('not_found', { message: 'organization not found' });
          if (membersMax !== null) {
            const n = await tx.oneFirst(sql.type(z.object({ n: z.number() }))`
              SELECT count(*)::int8 AS n FROM members WHERE organization_id = ${organizationId}`);
            if (n >= membersMax) {
              throw new ApiError('plan_limit_reached', {
                message: `the plan allows ${membersMax} team member${membersMax === 1 ? '' : 's'} (owners included); upgrade the plan or remove a member`,
                extra: { limit: membersMax },
              });
            }
          }
          return tx.one(sql.type(memberRow)`
            INSERT INTO members (id, organization_id, email, password_hash, role)
            VALUES (${newId('mem')}, ${organizationId}, ${m.email}, ${m.passwordHash}, ${m.role})
            RETURNING ${memberColumns}`);
        });
      } catch (err) {
        if (err instanceof UniqueIntegrityConstraintViolationError) throw new ApiError('email_taken', { param: 'email' });
        throw err;
      }
    },

    async list(organizationId: string, page: PageRequest): Promise<Page<MemberRow>> {
      const k = keysetOrder(page);
      const rows = await pool.any(sql.type(memberRow)`
        SELECT ${memberColumns} FROM members WHERE organization_id = ${organizationId} AND ${k.where} ${k.orderLimit}`);
      return toPage(rows, page.limit);
    },

    /** Null when the member is not this organization's; 409 last_owner for the last owner's demotion. */
    setRole(organizationId: string, memberId: string, role: Role): Promise<MemberRow | null> {
      return pool.transaction(async (tx) => {
        await lockOrganization(tx, organizationId);
        const member = await tx.maybeOne(sql.type(memberRow)`
          SELECT ${memberColumns} FROM members WHERE id = ${memberId} AND organization_id = ${organizationId}`);
        if (!member || member.role === role) return member;
        if (member.role === 'owner' && (await ownersOf(tx, organizationId)) <= 1) {
          throw new ApiError('last_owner', { message: 'this member is the last owner: make another member owner first' });
        }
        return tx.one(sql.type(memberRow)`
          UPDATE members SET role = ${role}, updated_at = now() WHERE id = ${memberId} RETURNING ${memberColumns}`);
      });
    },

    /** Removes a member and so its sessions; null when not this organization's; never the last owner. */
    remove(organizationId: string, memberId: string): Promise<MemberRow | null> {
      return pool.transaction(async (tx) => {
        await lockOrganization(tx, organizationId);
        const member = await tx.maybeOne(sql.type(memberRow)`
          SELECT ${memberColumns} FROM members WHERE id = ${memberId} AND organization_id = ${organizationId}`);
        if (!member) return null;
        if (member.role === 'owner' && (await ownersOf(tx, organizationId)) <= 1) {
          throw new ApiError('last_owner', { message: 'this member is the last owner: make another member owner first' });
        }
        await tx.query(sql.unsafe`DELETE FROM members WHERE id = ${memberId}`);
        return member;
      });
    },

    /**
     * Sets a member's password and ends the member's sessions in the same transaction: a
     * password changed because it leaked must not leave a session opened with it alive.
     * `keepSessionIdHash` (the stored id of the session that made the change, when the
     * member changes their own) is the one kept; a password set by anyone else (null) ends
     * them all.
     */
    async setPassword(memberId: string, passwordHash: string, keepSessionIdHash: Buffer | null = null): Promise<void> {
      await pool.transaction(async (tx) => {
        await tx.query(sql.unsafe`UPDATE members SET password_hash = ${passwordHash}, updated_at = now() WHERE id = ${memberId}`);
        await tx.query(keepSessionIdHash === null
          ? sql.unsafe`DELETE FROM member_sessions WHERE member_id = ${memberId}`
          : sql.unsafe`DELETE FROM member_sessions WHERE member_id = ${memberId} AND id_hash <> ${sql.binary(keepSessionIdHash)}`);
      });
    },

    passwordHashOf(memberId: string): Promise<string | null> {
      return pool.maybeOneFirst(sql.type(z.object({ password_hash: z.string() }))`SELECT password_hash FROM members WHERE id = ${memberId}`);
    },

    /**
     * The memberships of an email in any organization, oldest first, at most
     * sign_in_candidates_max; `more` says that the email has others past them.
     * `organizationId` narrows before the limit: an email that is a member of more than
     * sign_in_candidates_max organizations still signs in to the one it names.
     */
    async signInCandidates(email: string, organizationId: string | null = null): Promise<{ candidates: readonly SignInCandidate[]; more: boolean }> {
      const inOrganization = organizationId === null ? sql.fragment`` : sql.fragment`AND m.organization_id = ${organizationId}`;
      const rows = await pool.any(sql.type(signInCandidate)`
        SELECT m.id, m.organization_id, m.email, m.role, m.created_at, m.updated_at, m.password_hash, o.name AS organization_name
        FROM members m JOIN organizations o ON o.id = m.organization_id
        WHERE lower(m.email) = lower(${email}) ${inOrganization}
        ORDER BY m.created_at, m.id LIMIT ${sign_in_candidates_max + 1}`);
      return { candidates: rows.slice(0, sign_in_candidates_max), more: rows.length > sign_in_candidates_max };
    },
  };
}

export type MemberQueries = ReturnType<typeof createMemberQueries>;

// The documented answer of memberEntry (src/openapi/).
export const memberSchema = z
  .object({ id: z.string(), organization_id: z.string(), email: z.string(), role: z.enum(roles), created_at: timestamp, updated_at: timestamp })
  .strict()
  .openapi('Member');
