/**
 * Who a request is, once its key is known: the key's record, its project scope and the
 * contract variant it speaks (src/http/auth.ts puts it on res.locals.auth). The domain
 * takes it as a value; only the HTTP layer reads it from a request.
 */
import type { Variant } from '../ledger/amounts.js';
import type { ProjectScope } from '../ledger/requests.js';
import type { KeyRecord } from './store.js';

export interface AuthContext {
  key: KeyRecord;
  scope: ProjectScope;
  variant: Variant;
}
