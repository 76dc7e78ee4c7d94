/**
 * One attempt of a webhook delivery: the event as the body, signed as Standard Webhooks
 * has it (`webhook-id` the event id, `webhook-timestamp`, `webhook-signature`
 * `v1,<base64 HMAC-SHA256>`, made by the `standardwebhooks` package), sent under the SSRF
 * guard of the upstreams (src/gateway/private-network.ts: checked again here, since DNS
 * may have changed since the URL was accepted) and within a timeout. Redirects are not
 * followed. What it answers is the attempt's record for the delivery log.
 */
import { Webhook } from 'standardwebhooks';
import { Agent, request } from 'undici';
import { literalHostRefusal, publicOnlyLookup, upstreamUrlRefusal, type UrlSubject } from '../gateway/private-network.js';
import type { StoredEvent } from '../events/store.js';
import type { DeliveryTarget } from './endpoints.js';

/** How refusals of an endpoint URL read: `url points at ...; webhooks go to only public addresses`. */
const webhook_subject: UrlSubject = { field: 'url', caller: 'webhooks go to' };

/** The bytes of an endpoint's answer kept in the delivery log. */
const response_excerpt_bytes = 1024;

export interface AttemptRecord {
  /** When the attempt started (ISO 8601). */
  at: string;
  /** A replay asked for by the owner, not a scheduled attempt. */
  manual: boolean;
  /** The endpoint's HTTP status; null when it gave none (a timeout, a refused connection). */
  status_code: number | null;
  latency_ms: number;
  /** The first response_excerpt_bytes of the answer's body, as UTF-8. */
  response_excerpt: string | null;
  /** Why the attempt failed without a status (timeout, network, refused address); null otherwise. */
  error: string | null;
}

/** A 2xx answer is a delivery; anything else is retried. */
export function succeeded(a: AttemptRecord): boolean {
  return a.status_code !== null && a.status_code >= 200 && a.status_code < 300;
}

/**
 * What follows a failed scheduled attempt, given the attempts logged before it: its number
 * among the scheduled ones (the first, then one per retry), and the delay before the next
 * (undefined: it was the last, the delivery has failed).
 */
export function nextScheduledAttempt(before: readonly AttemptRecord[], retryScheduleMs: readonly number[]): { scheduled: number; delayMs: number | undefined } {
  const scheduled = before.filter((a) => !a.manual).length + 1;
  return { scheduled, delayMs: retryScheduleMs[scheduled - 1] };
}

/**
 * Why webhooks may not go to this URL (a private address, or a name that resolves to one
 * now), or null; checked when an endpoint's URL is set.
 */
export function webhookUrlRefusal(url: string, allowPrivate: boolean): Promise<string | null> {
  return allowPrivate ? Promise.resolve(null) : upstreamUrlRefusal(url, undefined, webhook_subject);
}

export interface SenderOptions {
  timeoutMs: number;
  /** UPSTREAM_ALLOW_PRIVATE: lets a receiver on a private address (the tests' loopback) in. */
  allowPrivate: boolean;
}

export class WebhookSender {
  private readonly agent: Agent;

  constructor(private readonly opts: SenderOptions) {
    this.agent = new Agent({
      connect: { timeout: opts.timeoutMs, ...(opts.allowPrivate ? {} : { lookup: publicOnlyLookup(undefined, webhook_subject) }) },
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
    });
  }

  /** One attempt: `event` (a project's or an operator event) is the body, its id the `webhook-id`. */
  async send(target: DeliveryTarget, event: Pick<StoredEvent, 'id'>, manual: boolean): Promise<AttemptRecord> {
    const started = Date.now();
    const record = (r: Omit<AttemptRecord, 'at' | 'manual' | 'latency_ms'>): AttemptRecord => ({
      at: new Date(started).toISOString(),
      manual,
      latency_ms: Date.now() - started,
      ...r,
    });
    const refused = this.opts.allowPrivate ? null : literalHostRefusal(new URL(target.url), webhook_subject);
    if (refused !== null) return record({ status_code: null, response_excerpt: null, error: refused });
    const body = JSON.stringify(event);
    const signature = new Webhook(target.secret).sign(event.id, new Date(started), body);
    try {
      const res = await request(target.url, {
        method: 'POST',
        dispatcher: this.agent,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'svc-billing-webhooks/1',
          'webhook-id': event.id,
          'webhook-timestamp': String(Math.floor(started / 1000)),
          'webhook-signature': signature,
        },
        body,
        signal: AbortSignal.timeout(this.opts.timeoutMs),
      });
      const excerpt = await readExcerpt(res.body);
      return record({ status_code: res.statusCode, response_excerpt: excerpt, error: null });
    } catch (err) {
      return record({ status_code: null, response_excerpt: null, error: attemptError(err, this.opts.timeoutMs) });
    }
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

/** The first response_excerpt_bytes of a body; the rest is not read (the connection is dropped). */
async function readExcerpt(body: AsyncIterable<Buffer> & { destroy(): unknown }): Promise<string> {
  const chunks: Buffer[] = [];
  let got = 0;
  try {
    for await (const chunk of body) {
      chunks.push(chunk);
      got += chunk.length;
      if (got >= response_excerpt_bytes) break;
    }
  } catch {
    // What arrived before the body failed is the excerpt.
  } finally {
    body.destroy();
  }
  return Buffer.concat(chunks).subarray(0, response_excerpt_bytes).toString('utf8');
}

function attemptError(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; code?: string; message?: string };
  if (e.name === 'TimeoutError' || e.code === 'UND_ERR_HEADERS_TIMEOUT' || e.code === 'UND_ERR_BODY_TIMEOUT' || e.code === 'UND_ERR_CONNECT_TIMEOUT') {
    return `timeout: no answer within ${timeoutMs} ms`;
  }
  return e.message ?? String(err);
}
