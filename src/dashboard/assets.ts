/**
 * The page's three static files, read once at startup: htmx from its npm package (no CDN:
 * the page works on a machine without internet), and our stylesheet and script from
 * assets/ (beside lua/ and migrations/: read at run time, from src/ or dist/ alike).
 * Scripts are files because the CSP allows no inline script.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import type { RequestHandler } from 'express';
import { projectRoot } from '../root.js';
import { asset_path } from './layout.js';

const assetsDir = join(projectRoot, 'assets');
const require = createRequire(join(projectRoot, 'package.json'));

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
    asset('dashboard.js', join(assetsDir, 'dashboard.js'), 'text/javascript'),
    asset('dashboard.css', join(assetsDir, 'dashboard.css'), 'text/css'),
  ];
}
