/**
 * The JSON answer of a hot route, written without Express's res.json/res.send: those look
 * up the app's JSON settings, validate the status, parse the Content-Type back to add its
 * charset, and test freshness, on every answer. The bytes on the wire are the same as
 * res.status(status).json(value) with this app's settings (no ETag, no JSON spaces,
 * replacer or escaping): `Content-Type: application/json; charset=utf-8`, a
 * Content-Length, the body. For POST routes only (a HEAD answer has no body).
 */
import type { Response } from 'express';

export function sendJson(res: Response, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(body);
}
