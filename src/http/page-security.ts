/**
 * The security headers of the service's own HTML pages (the dashboard, the API docs at
 * /docs): helmet with a content security policy that lets a page load scripts, styles,
 * images and fonts from this origin only, run no inline script, and be framed by nobody;
 * and no referrer or resource sharing with other origins. The pages work offline.
 */
import helmet from 'helmet';
import type { RequestHandler } from 'express';

export function pageSecurity(opts: { strictTransportSecurity?: boolean } = {}): RequestHandler {
  return helmet({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: {
        'default-src': ["'self'"],
        'script-src': ["'self'"],
        'script-src-attr': ["'none'"],
        'style-src': ["'self'"],
        'img-src': ["'self'", 'data:'],
        'connect-src': ["'self'"],
        'font-src': ["'self'"],
        'object-src': ["'none'"],
        'base-uri': ["'none'"],
        'form-action': ["'self'"],
        'frame-ancestors': ["'none'"],
      },
    },
    // A page may show an organization's data: no other origin reads or frames it.
    crossOriginResourcePolicy: { policy: 'same-origin' },
    referrerPolicy: { policy: 'same-origin' },
    xFrameOptions: { action: 'deny' },
    ...(opts.strictTransportSecurity === undefined ? {} : { strictTransportSecurity: opts.strictTransportSecurity }),
  });
}
