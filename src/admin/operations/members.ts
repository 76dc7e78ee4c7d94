/**
 * The management operations on the organization's members: list, add (within the plan's
 * limit; a password the service makes is answered once), read, change a role, remove.
 */
import { z } from 'zod';
import { ApiError } from '../../errors/catalogue.js';
import { onlyQuery, strictBody } from '../../http/validate.js';
import { generatePassword, hashPassword, password_chars_max, password_chars_min } from '../../members/passwords.js';
import { memberEntry, memberSchema, roles, type MemberQueries } from '../../members/store.js';
import { describeOperation } from '../../openapi/registry.js';
import { extended, listOf } from '../../schema/zod.js';
import { created, listQuery, ok, operation, orgOf, pageRequest, sendList, type ManagementDeps, type Operation } from './shared.js';

export const email_chars_max = 320;
const emailSchema = z.string().trim().max(email_chars_max).email();
const passwordSchema = z.string().min(password_chars_min).max(password_chars_max);

const memberCreateSchema = z.object({
  email: emailSchema,
  role: z.enum(roles),
  /** Omitted: a random one is made and shown once in the answer. */
  password: passwordSchema.optional(),
});
const memberPatchSchema = z.object({ role: z.enum(roles) });

describeOperation({ method: 'GET', path: '/members', role: 'viewer', tag: 'Members', summary: "The organization's members", query: listQuery, responses: ok('A page of members', listOf(memberSchema)) });
describeOperation({
  method: 'POST',
  path: '/members',
  role: 'owner',
  tag: 'Members',
  summary: 'Add a member',
  description: 'Without `password` the service makes one and answers it once, as `password`.',
  body: memberCreateSchema.strict(),
  responses: created('The member', extended(memberSchema, { password: z.string().optional().openapi({ description: 'The password the service made (only when none was sent).' }) })),
  errors: ['email_taken', 'plan_limit_reached'],
});
describeOperation({ method: 'GET', path: '/members/:member_id', role: 'viewer', tag: 'Members', summary: 'A member', responses: ok('The member', memberSchema), errors: ['not_found'] });
describeOperation({
  method: 'PATCH',
  path: '/members/:member_id',
  role: 'owner',
  tag: 'Members',
  summary: "Change a member's role",
  body: memberPatchSchema.strict(),
  responses: ok('The member', memberSchema),
  errors: ['not_found', 'last_owner'],
});
describeOperation({
  method: 'DELETE',
  path: '/members/:member_id',
  role: 'owner',
  tag: 'Members',
  summary: 'Remove a member',
  description: "Ends the member's sessions.",
  responses: ok('The member, with `deleted: true`', extended(memberSchema, { deleted: z.literal(true) })),
  errors: ['not_found', 'last_owner'],
});

export function memberOperations(deps: Pick<ManagementDeps, 'plans'> & { members: MemberQueries }): Operation[] {
  const { members } = deps;

  return [
    operation('GET', '/members', 'viewer', async (req, res) => {
      sendList(res, await members.list(orgOf(res), pageRequest(req)), memberEntry);
    }),

    operation('POST', '/members', 'owner', async (req, res) => {
      const body = strictBody(req, memberCreateSchema);
      const org = orgOf(res);
      const { membersMax } = await deps.plans.limitsOf(org);
      const password = body.password ?? generatePassword();
      const member = await members.create(org, { email: body.email, role: body.role, passwordHash: await hashPassword(password) }, membersMax);
      // A password the service made is shown once, like a key's secret; one the caller chose is not echoed.
      res.status(201).json({ ...memberEntry(member), ...(body.password === undefined ? { password } : {}) });
    }),

    operation('GET', '/members/:member_id', 'viewer', async (req, res) => {
      onlyQuery(req);
      const member = await members.find(orgOf(res), String(req.params.member_id));
      if (!member) throw new ApiError('not_found', { message: 'member not found' });
      res.json(memberEntry(member));
    }),

    operation('PATCH', '/members/:member_id', 'owner', async (req, res) => {
      const { role } = strictBody(req, memberPatchSchema);
      const member = await members.setRole(orgOf(res), String(req.params.member_id), role);
      if (!member) throw new ApiError('not_found', { message: 'member not found' });
      res.json(memberEntry(member));
    }),

    operation('DELETE', '/members/:member_id', 'owner', async (req, res) => {
      onlyQuery(req);
      const member = await members.remove(orgOf(res), String(req.params.member_id));
      if (!member) throw new ApiError('not_found', { message: 'member not found' });
      res.json({ ...memberEntry(member), deleted: true });
    }),

    // Invoices
  ];
}
