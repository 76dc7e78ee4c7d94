/**
 * measuredJson reads the common JSON request itself and hands every other one to
 * express.json (src/http/validate.ts). Whichever path a request takes, the answer must be
 * what express.json alone gives: the same parsed body and measured bytes, the same error.
 * Both parsers sit in two otherwise equal apps, and every request goes to both.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import express, { type RequestHandler } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorHandler } from '../../src/http/errors.js';
import { bodyBytes, measuredExpressJson, measuredJson } from '../../src/http/validate.js';

const limit = 1024;

function appWith(parser: RequestHandler): express.Express {
  const app = express();
  app.post('/echo', parser, (req, res) => {
    res.json({ body: req.body === undefined ? '(undefined)' : req.body, bytes: bodyBytes(req) });
  });
  app.use(errorHandler());
  return app;
}

/** express.json with measuredJson's options, as the reference. */
const reference = measuredExpressJson(limit);
/** The same, as measuredJson's fallback, counting the requests handed to it. */
let fallbacks = 0;
const counted: RequestHandler = (req, res, next) => {
  fallbacks++;
  reference(req, res, next);
};

const servers: http.Server[] = [];
let ours = '';
let theirs = '';

async function serve(app: express.Express): Promise<string> {
  const server = await new Promise<http.Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  ours = await serve(appWith(measuredJson(limit, counted)));
  theirs = await serve(appWith(reference));
});
afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
});

interface Answer {
  status: number;
  text: string;
}

function post(base: string, headers: Record<string, string>, body: Buffer | null, chunked = false): Promise<Answer> {
  const { port } = new URL(base);
  return new Promise((resolve, reject) => {
    const all = chunked ? headers : { ...headers, ...(body && headers['content-length'] === undefined ? { 'content-length': String(body.length) } : {}) };
    const req = http.request({ host: '127.0.0.1', port, path: '/echo', method: 'POST', headers: all });
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(parts).toString('utf8') }));
    });
    if (chunked && body) {
      req.write(body.subarray(0, 1));
      req.end(body.subarray(1));
    } else {
      req.end(body ?? undefined);
    }
  });
}

const json = 'application/json';
/** name, headers, body, sent chunked, read by measuredJson itself (else by express.json). */
const cases: [string, Record<string, string>, Buffer | null, boolean, boolean][] = [
  ['an object', { 'content-type': json }, Buffer.from('{"a":1,"b":[true,null]}'), false, true],
  ['utf-8 charset, any case, quoted', { 'content-type': 'Application/JSON; Charset="UTF-8"' }, Buffer.from('{"a":"é"}'), false, true],
  ['a byte order mark', { 'content-type': json }, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"bom":1}')]), false, true],
  ['invalid utf-8', { 'content-type': json }, Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]), false, true],
  ['a JSON string (not strict)', { 'content-type': json }, Buffer.from('"text"'), false, true],
  ['a number', { 'content-type': json }, Buffer.from(' 42 '), false, true],
  ['invalid JSON', { 'content-type': json }, Buffer.from('{"a":'), false, true],
  ['whitespace only', { 'content-type': json }, Buffer.from('   '), false, true],
  ['an empty body', { 'content-type': json, 'content-length': '0' }, null, false, false],
  ['no body', {}, null, false, false],
  ['another media type', { 'content-type': 'text/plain' }, Buffer.from('{"a":1}'), false, false],
  ['a +json media type', { 'content-type': 'application/merge-patch+json' }, Buffer.from('{"a":1}'), false, false],
  ['a latin-1 charset', { 'content-type': 'application/json; charset=latin1' }, Buffer.from('{"a":1}'), false, false],
  ['an unknown charset', { 'content-type': 'application/json; charset=klingon' }, Buffer.from('{"a":1}'), false, false],
  ['gzip', { 'content-type': json, 'content-encoding': 'gzip' }, gzipSync('{"zipped":true}'), false, false],
  ['identity encoding', { 'content-type': json, 'content-encoding': 'Identity' }, Buffer.from('{"a":2}'), false, true],
  ['an unknown encoding', { 'content-type': json, 'content-encoding': 'snappy' }, Buffer.from('{"a":1}'), false, false],
  ['chunked', { 'content-type': json, 'transfer-encoding': 'chunked' }, Buffer.from('{"chunked":1}'), true, false],
  ['exactly the limit', { 'content-type': json }, Buffer.from(`{"p":"${'x'.repeat(limit - 8)}"}`), false, true],
  ['over the limit', { 'content-type': json }, Buffer.from(`{"p":"${'x'.repeat(limit)}"}`), false, false],
  ['over the limit, chunked', { 'content-type': json, 'transfer-encoding': 'chunked' }, Buffer.from(`{"p":"${'x'.repeat(limit)}"}`), true, false],
];

describe('measuredJson', () => {
  for (const [name, headers, body, chunked, own] of cases) {
    it(`answers as express.json: ${name} (${own ? 'its own reader' : 'express.json'})`, async () => {
      const before = fallbacks;
      const a = await post(ours, headers, body, chunked);
      expect(fallbacks - before).toBe(own ? 0 : 1);
      expect(a).toEqual(await post(theirs, headers, body, chunked));
    });
  }

  it('answers a body the client stops sending with 400, as express.json does', async () => {
    const answers: string[] = [];
    for (const base of [ours, theirs]) {
      const { port } = new URL(base);
      answers.push(
        await new Promise<string>((resolve) => {
          const socket = net.connect(Number(port), '127.0.0.1', () => {
            socket.write('POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":');
            setTimeout(() => socket.end(), 50);
          });
          let seen = '';
          socket.on('data', (d) => (seen += d.toString()));
          socket.on('close', () => resolve(seen.split('\r\n')[0] ?? ''));
        }),
      );
    }
    expect(answers[0]).toBe(answers[1]);
  });
});
