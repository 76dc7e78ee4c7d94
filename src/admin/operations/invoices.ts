/**
 * The management operations on the organization's invoices: list them, read the upcoming
 * one (the open period as it stands), read one. Under PLANS=off each answers 404
 * (src/plans/policy.ts): a single-tenant install has none.
 */
import { ApiError } from '../../errors/catalogue.js';
import { onlyQuery } from '../../http/validate.js';
import { invoiceEntry, invoiceSchema, upcomingInvoiceSchema, type Invoicing } from '../../billing/invoices.js';
import { describeOperation } from '../../openapi/registry.js';
import { plansOff } from '../../plans/policy.js';
import { listOf } from '../../schema/zod.js';
import { listQuery, ok, operation, orgOf, pageRequest, sendList, type Operation } from './shared.js';

const plansOffNote = 'Under PLANS=off (a single-tenant install) 404 `not_found`: it has no invoices.';
describeOperation({
  method: 'GET',
  path: '/invoices',
  role: 'viewer',
  tag: 'Organization',
  summary: "The organization's invoices",
  description: plansOffNote,
  query: listQuery,
  responses: ok('A page of invoices', listOf(invoiceSchema)),
  errors: ['not_found'],
});
describeOperation({
  method: 'GET',
  path: '/invoices/upcoming',
  role: 'viewer',
  tag: 'Organization',
  summary: 'The upcoming invoice',
  description: `The open period's invoice as it stands: the plan, this period's pro-rated upgrades, the operations so far and their overage. No id until the period closes. ${plansOffNote}`,
  responses: ok('The upcoming invoice', upcomingInvoiceSchema),
  errors: ['not_found'],
});
describeOperation({ method: 'GET', path: '/invoices/:invoice_id', role: 'viewer', tag: 'Organization', summary: 'An invoice', description: plansOffNote, responses: ok('The invoice', invoiceSchema), errors: ['not_found'] });

/** `nowMs`: the service clock (PlanService.nowMs), which places the open period. */
export function invoiceOperations(deps: { invoices: Invoicing; nowMs: () => number; plans: 'on' | 'off' }): Operation[] {
  const { invoices } = deps;
  const refuseWhenOff = () => {
    if (deps.plans === 'off') throw plansOff();
  };

  return [
    operation('GET', '/invoices', 'viewer', async (req, res) => {
      refuseWhenOff();
      sendList(res, await invoices.list(orgOf(res), pageRequest(req)), invoiceEntry);
    }),

    // Before /invoices/:invoice_id, which would take `upcoming` for an id.
    operation('GET', '/invoices/upcoming', 'viewer', async (req, res) => {
      refuseWhenOff();
      onlyQuery(req);
      res.json(invoiceEntry(await invoices.upcoming(orgOf(res), deps.nowMs())));
    }),

    operation('GET', '/invoices/:invoice_id', 'viewer', async (req, res) => {
      refuseWhenOff();
      onlyQuery(req);
      const invoice = await invoices.find(orgOf(res), String(req.params.invoice_id));
      if (!invoice) throw new ApiError('not_found', { message: 'invoice not found' });
      res.json(invoiceEntry(invoice));
    }),
  ];
}
