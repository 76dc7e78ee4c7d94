/**
 * 404s that name what was looked for: the customer id, and how a customer comes to be.
 * Foundation, so that the ledger, the gateway and the customer routes answer alike.
 */
import { ApiError } from './catalogue.js';

/**
 * 404 customer_not_found for `customerId`, also in `error.customer_id`. Customers are
 * made by their first deposit or by POST /v1/customers; the message says so.
 */
export function customerNotFound(customerId: string): ApiError {
  return new ApiError('customer_not_found', {
    message: `customer ${customerId} not found: a deposit (POST /v1/customers/deposit) or POST /v1/customers creates it`,
    extra: { customer_id: customerId },
  });
}
