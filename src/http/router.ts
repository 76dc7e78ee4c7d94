/**
 * Every router of the API matches paths exactly: `/v1/billing/deduct/` and
 * `/V1/BILLING/DEDUCT` are 404, not the canonical route. Express's default routers ignore
 * a trailing slash and case, and a variant path then skipped what the app decides by
 * exact path (which body parser runs, so which bytes bound a gateway hold). Duplicate
 * slashes and `.` segments never match a route, so they are 404 as well.
 */
import { Router } from 'express';

export function exactRouter(): Router {
  return Router({ strict: true, caseSensitive: true });
}
