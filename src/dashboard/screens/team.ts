/**
 * Team: the organization's members, an invitation form (a refused one keeps what was
 * typed, and says what is wrong in words), role changes, removals confirmed by a second
 * click, and the member limit of the plan in force now (none under PLANS=off).
 */
import type { Request } from 'express';
import { ApiError } from '../../errors/catalogue.js';
import { password_chars_max, password_chars_min } from '../../members/passwords.js';
import { roles } from '../../members/store.js';
import { pager, type List, type PageContext } from '../context.js';
import { limitText, when } from '../format.js';
import { optional, queryParam, text } from '../forms.js';
import { html, pagePath, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice, type Standing } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';

interface MemberEntry {
  id: string;
  email: string;
  role: (typeof roles)[number];
  created_at: string;
}

/** The member limit in words: the plan's, raised by the demo allowance where it applies; nothing without plans. */
function memberLimit(s: Standing): Html {
  if (s.plans === 'off') return html``;
  return html`<p class="muted" data-testid="member-limit">The ${s.plan} plan${s.demoAllowance ? ' with the demo allowance' : ''} allows ${limitText(s.limits.membersMax, 'member', 'members')} (owners included).</p>`;
}

interface TeamView {
  notice?: Notice;
  /** A new member's generated password, shown this once. */
  password?: { email: string; password: string } | null;
  /** The member whose removal waits for the second click. */
  confirmRemove?: string | null;
  /** The invitation was refused: its form shows the email and role typed (never the password). */
  inviteTyped?: boolean;
}

/** A refused invitation in words, for the person who typed it; the API's own message when it already reads so. */
function inviteRefusal(err: ApiError, email: string): ApiError {
  const say = (message: string) => new ApiError(err.code, { status: err.status, message });
  if (err.code === 'email_taken') return say(`${email} is already a member of this organization`);
  if (err.param === 'email') return say(email === '' ? "Type the new member's email address" : `"${email}" is not an email address: write it as name@example.com`);
  if (err.param === 'password') return say(`The password needs ${password_chars_min} to ${password_chars_max} characters; or leave it empty, and one is made and shown once`);
  if (err.param === 'role') return say(`Choose a role: ${roles.join(', ')}`);
  return err;
}

function removeCell(m: MemberEntry, confirming: boolean, csrf: Html): Html {
  if (!confirming) return html`<a href="${pagePath('team', m.id, 'remove')}" class="button danger" data-testid="member-remove">Remove</a>`;
  return html`<form method="post" action="${pagePath('team', m.id, 'remove')}" class="inline">${csrf}<button type="submit" class="danger" data-testid="member-remove-confirm">Confirm: remove ${m.email}</button> <a href="/dashboard/team" data-testid="member-remove-cancel">Cancel</a></form>`;
}

async function teamScreen(ctx: PageContext, req: Request, o: TeamView = {}): Promise<Html> {
  const cursor = queryParam(req, 'cursor');
  const { body: members } = await ctx.api<List<MemberEntry>>('GET', '/members', { query: { cursor } });
  const csrf = csrfField(ctx.session);
  const me = ctx.session.member.id;
  const typed = o.inviteTyped === true;
  const role = typed ? text(req, 'role') : 'viewer';
  const body = html`${noticeOf(o.notice ?? null)}
${o.password ? html`<section class="secret" data-testid="member-created">
<p>${o.password.email} signs in with this password, shown this once:</p>
<p><code id="new-member-password" data-testid="member-password">${o.password.password}</code> <button type="button" data-copy="new-member-password">Copy</button></p>
</section>` : ''}
<table class="list" data-testid="member-list">
<thead><tr><th>Email</th><th>Role</th><th>Since</th><th></th></tr></thead>
<tbody>
${members.data.map(
  (m) => html`<tr data-testid="member-row" data-member-email="${m.email}">
<td>${m.email}${m.id === me ? html` <span class="muted">(you)</span>` : ''}</td>
<td><form method="post" action="${pagePath('team', m.id, 'role')}" class="inline">${csrf}
<select name="role" data-testid="member-role">${roles.map((r) => html`<option value="${r}"${r === m.role ? html` selected` : ''}>${r}</option>`)}</select>
<button type="submit" data-testid="member-role-save">Change role</button></form></td>
<td>${when(m.created_at)}</td>
<td>${removeCell(m, o.confirmRemove === m.id, csrf)}</td>
</tr>`,
)}
</tbody>
</table>
${pager('/dashboard/team', {}, members, cursor !== undefined)}
<h2>Invite a member</h2>
<form method="post" action="/dashboard/team" class="form">
${csrf}
<label>Email <input type="email" name="email" required maxlength="320" value="${typed ? text(req, 'email') : ''}" data-testid="invite-email"></label>
<label>Role <select name="role" data-testid="invite-role">${roles.map((r) => html`<option value="${r}"${r === role ? html` selected` : ''}>${r}</option>`)}</select></label>
<label>Password (optional: leave empty and one is made and shown once) <input type="password" name="password" autocomplete="new-password"></label>
<button type="submit" data-testid="invite-submit">Invite</button>
</form>
${memberLimit(ctx.session.standing)}`;
  return shell({ session: ctx.session, title: 'Team', screen: 'team', body });
}

export function teamRoutes(pages: PageRouter): void {
  pages.get('/dashboard/team', async (req, res, ctx) => sendPage(res, await teamScreen(ctx, req)));

  pages.post('/dashboard/team', async (req, res, ctx) => {
    let password: { email: string; password: string } | null = null;
    await answerAction(
      res,
      async () => {
        const chosen = optional(req, 'password');
        const email = text(req, 'email');
        const { body } = await ctx
          .api<MemberEntry & { password?: string }>('POST', '/members', {
            body: { email, role: text(req, 'role'), ...(chosen === undefined ? {} : { password: chosen }) },
          })
          .catch((err: unknown) => {
            throw err instanceof ApiError ? inviteRefusal(err, email) : err;
          });
        if (body.password !== undefined) password = { email: body.email, password: body.password };
        return { kind: 'ok', message: `Invited ${body.email} as ${body.role}` };
      },
      (notice, failed) => teamScreen(ctx, req, { notice, password, inviteTyped: failed }),
      '/dashboard/team',
    );
  });

  pages.post('/dashboard/team/:member_id/role', async (req, res, ctx) => {
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<MemberEntry>('PATCH', '/members/:member_id', { params: { member_id: String(req.params.member_id) }, body: { role: text(req, 'role') } });
        return { kind: 'ok', message: `${body.email} is now ${body.role === 'admin' ? 'an' : 'a'} ${body.role}` };
      },
      (notice) => teamScreen(ctx, req, { notice }),
      '/dashboard/team',
    );
  });

  // The first click on Remove: the same screen, with that row asking for the second click.
  pages.get('/dashboard/team/:member_id/remove', async (req, res, ctx) => {
    res.setHeader('HX-Push-Url', '/dashboard/team');
    sendPage(res, await teamScreen(ctx, req, { confirmRemove: String(req.params.member_id) }));
  });

  pages.post('/dashboard/team/:member_id/remove', async (req, res, ctx) => {
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<MemberEntry>('DELETE', '/members/:member_id', { params: { member_id: String(req.params.member_id) } });
        return { kind: 'ok', message: `Removed ${body.email}` };
      },
      (notice) => teamScreen(ctx, req, { notice }),
      '/dashboard/team',
    );
  });
}
