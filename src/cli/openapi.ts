/**
 * `npm run openapi [-- FILE]`: writes the OpenAPI document (what GET /openapi.json answers)
 * to FILE, or to standard output. Needs no Redis or PostgreSQL: the document is made from
 * the route descriptions, which loading the app's modules registers.
 */
import { writeFileSync } from 'node:fs';
import '../app.js';
import { openApiDocument } from '../openapi/routes.js';

// Compact: `npm run build` writes the file that the compiled service answers as it is.
const text = JSON.stringify(openApiDocument());
const file = process.argv[2];
if (file === undefined) process.stdout.write(text);
else writeFileSync(file, text);
