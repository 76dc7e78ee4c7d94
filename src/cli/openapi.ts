/**
 * `npm run openapi [-- FILE]`: writes the OpenAPI document (what GET /openapi.json answers)
 * to FILE, or to standard output. Needs no Redis or PostgreSQL: the document is made from
 * the route descriptions, which loading the app's modules registers.
 */
import { writeFileSync } from 'node:fs';
import '../http/app.js';
import { openApiDocument } from '../openapi/routes.js';

const text = `${JSON.stringify(openApiDocument(), null, 2)}\n`;
const file = process.argv[2];
if (file === undefined) process.stdout.write(text);
else writeFileSync(file, text);
