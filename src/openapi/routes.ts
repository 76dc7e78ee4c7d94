/**
 * GET /openapi.json (the document, src/openapi/document.ts) and GET /docs: Swagger UI from
 * the swagger-ui-dist package, served by this process (no CDN), rendering /openapi.json.
 * The page is a static file with our own initializer script (assets/docs.js): helmet's CSP
 * allows this origin only, with no inline script, so the page can reach no other host.
 */
import { pageSecurity } from '../http/page-security.js';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Router } from 'express';
import { z } from 'zod';
import { exactRouter } from '../http/router.js';
import { projectRoot } from '../root.js';
import { generateDocument } from './document.js';
import { describeRoute } from './registry.js';

const docs_path = '/docs';
const document_path = '/openapi.json';

let cached: Record<string, unknown> | null = null;

/** The document, generated once (every route module is loaded by then). */
export function openApiDocument(): Record<string, unknown> {
  return (cached ??= generateDocument());
}

/**
 * Where `npm run build` writes the document of the compiled code: generating it takes about
 * half a second of CPU, which a compiled process (production) would otherwise spend on the
 * event loop at its first GET /openapi.json. Run from src/ (tsx), there is no such file to
 * trust, and the document is generated.
 */
const built_document_path = join(projectRoot, 'dist', 'openapi.json');
const compiled = fileURLToPath(import.meta.url).startsWith(join(projectRoot, 'dist') + sep);

let documentText: string | null = null;

/** The document as served: the build's file when this is the compiled code, else generated once. */
function servedDocument(): string {
  if (documentText !== null) return documentText;
  documentText = compiled && existsSync(built_document_path) ? readFileSync(built_document_path, 'utf8') : JSON.stringify(openApiDocument());
  return documentText;
}

describeRoute({
  method: 'GET',
  path: document_path,
  tag: 'Documentation',
  summary: 'This OpenAPI document',
  description: `The OpenAPI 3.1 description of the API, generated from the zod schemas that validate requests. Rendered at \`${docs_path}\`.`,
  callers: ['public'],
  responses: {
    200: { description: 'The document', schema: z.object({ openapi: z.literal('3.1.0') }).passthrough().openapi({ description: 'An OpenAPI 3.1 document.' }) },
  },
});

const page = `<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>svc-billing API</title>
    <link rel="stylesheet" href="${docs_path}/swagger-ui.css">
    <link rel="icon" type="image/png" href="${docs_path}/favicon-32x32.png">
  </head>
  <body>
    <div id="swagger-ui"></div>
    <script src="${docs_path}/swagger-ui-bundle.js"></script>
    <script src="${docs_path}/docs.js"></script>
  </body>
</html>
`;

export function docsRoutes(): Router {
  const r = exactRouter();
  const require = createRequire(join(projectRoot, 'package.json'));
  const dist = (name: string) => readFileSync(require.resolve(`swagger-ui-dist/${name}`));
  const files: Record<string, { bytes: Buffer; type: string }> = {
    'swagger-ui.css': { bytes: dist('swagger-ui.css'), type: 'text/css' },
    'swagger-ui-bundle.js': { bytes: dist('swagger-ui-bundle.js'), type: 'text/javascript' },
    'favicon-32x32.png': { bytes: dist('favicon-32x32.png'), type: 'image/png' },
    'docs.js': { bytes: readFileSync(join(projectRoot, 'assets', 'docs.js')), type: 'text/javascript' },
  };

  r.get(document_path, (_req, res) => {
    res.type('application/json').send(servedDocument());
  });

  r.use(
    docs_path,
    pageSecurity(),
  );
  r.get(docs_path, (_req, res) => {
    res.type('text/html').send(page);
  });
  for (const [name, f] of Object.entries(files)) {
    r.get(`${docs_path}/${name}`, (_req, res) => {
      res.setHeader('Cache-Control', 'public, max-age=300');
      res.type(f.type).send(f.bytes);
    });
  }
  return r;
}
