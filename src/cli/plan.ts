/**
 * `npm run plan -- set --organization ID --plan PLAN [--json]`: the operator sets an
 * organization's plan, Enterprise included (an owner may not move to it: 403 on the API).
 * The change follows the API's rules: an upgrade applies at once, charged pro rata on the
 * period's invoice (nothing for Enterprise, whose price is agreed outside the service); a
 * downgrade starts with the next period.
 *
 * stdout carries the change (the preview's fields with --json). Exits 0 on success, 1 when
 * the organization is not found or the plans are off (PLANS=off), 2 on bad arguments.
 */
import { sql } from 'slonik';
import { quoteEntry } from '../billing/proration.js';
import { loadConfig } from '../config/index.js';
import { planIds, type PlanId } from '../plans/catalogue.js';
import { createLogger, createRuntime } from '../runtime.js';
import { commandLine } from './command-line.js';

const usage = `usage: npm run plan -- set --organization ID --plan PLAN [--json]
  PLAN is one of ${planIds.join(', ')}`;

const { values, positionals, fail } = commandLine('plan', usage, { organization: { type: 'string' }, plan: { type: 'string' }, json: { type: 'boolean', default: false } });
if (positionals.length !== 1 || positionals[0] !== 'set') fail(positionals.length === 0 ? 'a command is needed' : `unknown command ${JSON.stringify(positionals.join(' '))}`);
const organizationId = values.organization ?? fail('set needs --organization');
const plan = values.plan ?? fail('set needs --plan');
if (!(planIds as readonly string[]).includes(plan)) fail(`unknown plan ${JSON.stringify(plan)}`);

const config = loadConfig(process.env, { LOG_LEVEL: 'warn' });
if (config.PLANS === 'off') fail('plans are off on this install (PLANS=off): there is no plan to set', 1);
const rt = await createRuntime(config, createLogger(config));
let exitCode = 0;
try {
  if (!(await rt.db.exists(sql.unsafe`SELECT 1 FROM organizations WHERE id = ${organizationId}`))) {
    process.stderr.write(`plan: no organization ${organizationId}\n`);
    exitCode = 1;
  } else {
    const change = quoteEntry(await rt.plans.setPlan(organizationId, plan as PlanId, 'operator'));
    if (values.json) process.stdout.write(`${JSON.stringify(change)}\n`);
    else if (change.change === 'none') process.stdout.write(`${organizationId}: ${plan} is the plan in force already\n`);
    else if (change.change === 'downgrade') process.stdout.write(`${organizationId}: ${change.current_plan} -> ${plan} from ${change.effective_at} (the next period)\n`);
    else process.stdout.write(`${organizationId}: ${change.current_plan} -> ${plan} now; charged $${change.prorated_charge_usd} on this period's invoice\n`);
  }
} finally {
  await rt.close();
}
process.exit(exitCode);
