/**
 * The management operations on the organization's invoices: list them, read one.
 */
import { ApiError } from '../../errors/catalogue.js';
import { onlyQuery } from '../../http/validate.js';
import { invoiceEntry, invoiceSchema, type Invoicing } from '../../billing/invoices.js';
import { describeOperation } from '../../openapi/registry.js';
import { listOf } from '../../schema/zod.js';
import { listQuery, ok, operation, orgOf, pageRequest, sendList, type Operation } from './shared.js';

describeOperation({ method: 'GET', path: '/invoices', role: 'viewer', tag: 'Organization', summary: "The organization's invoices", query: listQuery, responses: ok('A page of invoices', listOf(invoiceSchema)) });
describeOperation({ method: 'GET', path: '/invoices/:invoice_id', role: 'viewer', tag: 'Organization', summary: 'An invoice', responses: ok('The invoice', invoiceSchema), errors: ['not_found'] });

export function invoiceOperations(deps: { invoices: Invoicing }): Operation[] {
  const { invoices } = deps;

  return [
    operation('GET', '/invoices', 'viewer', async (req, res) => {
      sendList(res, await invoices.list(orgOf(res), pageRequest(req)), invoiceEntry);
    }),

    operation('GET', '/invoices/:invoice_id', 'viewer', async (req, res) => {
      onlyQuery(req);
      const invoice = await invoices.find(orgOf(res), String(req.params.invoice_id));
      if (!invoice) throw new ApiError('not_found', { message: 'invoice not found' });
      res.json(invoiceEntry(invoice));
    }),
  ];
}
