/**
 * The page's three static files, read once at startup: htmx from its npm package (no CDN:
 * the page works on a machine without internet), and this folder's stylesheet and
 * script. Scripts are files because the CSP allows no inline script.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RequestHandler } from 'express';
import { asset_path } from './layout.js';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

interface Asset {
  path: string;
  handler: RequestHandler;
}

function asset(name: string, file: string, type: string): Asset {
  const bytes = readFileSync(file);
  return {
    path: `${asset_path}/${name}`,
    handler: (_req, res) => {
      // Assets hold no data: unlike the screens they may be cached, briefly, since their URL has no version.
      res.setHeader('Cache-Control', 'public, max-age=300');
      res.type(type).send(bytes);
    },
  };
}

export function assetRoutes(): Asset[] {
  return [
    asset('htmx.min.js', require.resolve('htmx.org/dist/htmx.min.js'), 'text/javascript'),
    asset('dashboard.js', join(here, 'assets', 'dashboard.js'), 'text/javascript'),
    asset('dashboard.css', join(here, 'assets', 'dashboard.css'), 'text/css'),
  ];
}
