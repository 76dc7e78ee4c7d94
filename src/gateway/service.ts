/**
 * One gateway call, end to end: the request parse (src/gateway/request.ts), the model,
 * the Idempotency-Key claim and the hold (src/gateway/billing.ts), the relay to the
 * upstream, whole or streamed, which settles or releases (src/gateway/relay.ts). The wire
 * formats are src/gateway/wire/<format>.ts behind one interface.
 */
import type { Request, Response } from 'express';
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import type { AuthContext } from '../keys/caller.js';
import { newId } from '../ids.js';
import type { LedgerService } from '../ledger/service.js';
import type { PlanService } from '../plans/service.js';
import { afterApplied, OutcomeUnknownError } from '../redis/sent.js';
import { prepareUpstreamBody } from './adapters.js';
import { GatewayBilling } from './billing.js';
import type { Call, IncrementalHold } from './call.js';
import type { ModelCache } from './models.js';
import { GatewayRelay } from './relay.js';
import { modelNotFound } from './model-not-found.js';
import { checkVariant, customerOf, parseGatewayRequest, type Endpoint } from './request.js';
import { copyOf, readModel } from './wire/format.js';
import { customerNotFound } from '../errors/not-found.js';
import type { UpstreamClient } from './upstream.js';
import { InFlight } from '../lifecycle.js';
import { failureStatus, type Metrics, type ModelSeries } from '../metrics/metrics.js';
import { max_tokens_limited_by_header } from './budget.js';
import { embeddingsUpstreamBody } from './wire/embeddings.js';
import { CallTranslation, responses_min_output_tokens, upstreamFormatOf } from './translate/call.js';
import { hold_header, hold_slice_tokens } from './incremental.js';

export { hold_ttl_seconds } from './billing.js';
export type { Endpoint } from './request.js';

/** Appended to an Anthropic-format model's `upstream_base_url` for a token count. */
const count_tokens_upstream_path = '/messages/count_tokens';

/** The slices of an incremental hold whose output limit is `limit`: a slice never holds more than the limit. */
function incrementalOf(limit: number): IncrementalHold {
  return { slice: Math.min(hold_slice_tokens, limit), limit };
}

/** What a call is counted under: its model's series once the model is found, and stream. */
interface Counted {
  series: ModelSeries | null;
  stream: boolean;
}

export class GatewayService {
  private readonly billing: GatewayBilling;
  private readonly relay: GatewayRelay;
  /**
   * Calls in progress (counted by the routes, src/gateway/routes.ts, from the request's
   * parse to its settlement or release) and the settlements and releases sent again in
   * the background: a shutdown waits for them before it closes Redis (src/shutdown.ts).
   */
  readonly inFlight = new InFlight();

  constructor(
    private readonly deps: {
      ledger: LedgerService;
      plans: PlanService;
      models: ModelCache;
      upstream: UpstreamClient;
      redis: RedisClient;
      prefix: string;
      logger: Logger;
      metrics?: Metrics;
    },
  ) {
    this.billing = new GatewayBilling({ ...deps, inFlight: this.inFlight });
    this.relay = new GatewayRelay({ upstream: deps.upstream, router: deps.upstream.router, billing: this.billing, ledger: deps.ledger, logger: deps.logger });
  }

  /**
   * Serves one call, and counts it (svc_gateway_calls_total) by model, the status it was
   * answered with and stream: a call refused before its model was found counts under the
   * `unknown` model, never under the name the client sent.
   */
  async handle(req: Request, res: Response, auth: AuthContext, endpoint: Endpoint, rawBytes: number): Promise<void> {
    const counted: Counted = { series: null, stream: false };
    try {
      await this.call(req, res, auth, endpoint, rawBytes, counted);
    } catch (err) {
      this.count(counted, res.headersSent ? res.statusCode : failureStatus(err));
      throw err;
    }
    this.count(counted, res.statusCode);
  }

  private count(c: Counted, status: number): void {
    const metrics = this.deps.metrics;
    if (metrics) (c.series ?? metrics.noModel).call(status, c.stream);
  }

  /**
   * `POST /v1/messages/count_tokens`: relayed to the model's Anthropic-format upstream
   * (`/messages/count_tokens`), its answer as it is. Nothing is billed or counted (no hold,
   * no ledger entry, no plan operation); the key, model and customer rules are those of a
   * billed call: the customer named (or the customer-scoped key's own) must exist.
   */
  async countTokens(req: Request, res: Response, auth: AuthContext): Promise<void> {
    await this.deps.ledger.ready();
    checkVariant(req, auth);
    const body = req.body as Record<string, unknown>;
    const modelId = readModel(body);
    const customerId = customerOf(req, auth);
    const { scope } = auth;
    const model = await this.deps.models.get(scope.projectId, modelId);
    if (!model || !model.active) throw await this.modelNotFound(auth, modelId, model !== null);
    if (auth.key.allowed_models && !auth.key.allowed_models.includes(model.id)) throw new ApiError('model_not_allowed', { param: 'model' });
    // Not translated (docs/API.md, "POST /v1/messages/count_tokens"): chat completions has no count endpoint.
    if (model.wireFormat !== 'anthropic') {
      const format = model.wireFormat === 'responses' ? 'a Responses-format' : 'an OpenAI chat-format';
      throw new ApiError('invalid_request', { param: 'model', message: `model ${model.id} is ${format} model: token counts are served by Anthropic-format models only (the one call of /v1/messages that is not translated)` });
    }
    if (!model.upstreamKey) throw new ApiError('byok_key_required');
    if (!(await this.deps.redis.exists(this.deps.ledger.keys(scope, customerId).meta))) throw customerNotFound(customerId);
    const target = { format: 'anthropic' as const, baseUrl: model.upstreamBaseUrl, apiKey: model.upstreamKey, path: count_tokens_upstream_path };
    const header = req.headers['anthropic-version'];
    const upstreamBody = copyOf(body);
    upstreamBody.model = model.upstreamModel;
    await this.relay.unbilled(res, target, upstreamBody, Array.isArray(header) ? header[0] : header);
  }

  /** The 404 of an unknown or inactive model, listing the active models this key may call. */
  private async modelNotFound(auth: AuthContext, asked: string, inactive: boolean): Promise<ApiError> {
    const ids = await this.deps.models.activeIds(auth.scope.projectId);
    const allowed = auth.key.allowed_models;
    return modelNotFound(asked, allowed ? ids.filter((id) => allowed.includes(id)) : ids, inactive);
  }

  private async call(req: Request, res: Response, auth: AuthContext, endpoint: Endpoint, rawBytes: number, counted: Counted): Promise<void> {
    // The Redis generation guard, before any command of the call (src/redis/generation.ts).
    await this.deps.ledger.ready();
    const r = parseGatewayRequest(req, auth, endpoint, rawBytes);
    const { scope } = auth;
    counted.stream = r.stream;

    const model = await this.deps.models.get(scope.projectId, r.modelId);
    if (!model || !model.active) throw await this.modelNotFound(auth, r.modelId, model !== null);
    if (this.deps.metrics) counted.series = this.deps.metrics.model(model.id);
    if (auth.key.allowed_models && !auth.key.allowed_models.includes(model.id)) throw new ApiError('model_not_allowed', { param: 'model' });
    const upstreamFormat = upstreamFormatOf(model);
    // A call through another format's endpoint is translated (src/gateway/translate/);
    // its request is translated here, before any hold, so a field without counterpart
    // is a 400 that holds nothing. Embeddings have one format, OpenAI's.
    let translated: ReturnType<typeof CallTranslation.of> | null = null;
    if (r.endpoint === 'embeddings') {
      if (model.provider !== 'openai') throw new ApiError('invalid_request', { param: 'model', message: `model ${model.id} is an Anthropic-format model: embeddings are served by OpenAI-format models only` });
    } else if (upstreamFormat !== r.format) {
      translated = CallTranslation.of(r.format, upstreamFormat, r.body);
    }
    if (model.upstreams.length === 0) throw new ApiError('byok_key_required');
    if (r.stream && !model.supportsStreaming) throw new ApiError('invalid_request', { param: 'stream', message: `model ${model.id} does not support streaming` });

    const transactionId = newId('gw');
    const { idempotencyKey, customerId } = r;
    if (idempotencyKey !== undefined) {
      const first = await this.billing.claimIdempotencyKey(scope, customerId, idempotencyKey, transactionId);
      if (first !== transactionId) {
        throw new ApiError('idempotency_key_reused', { extra: { transaction_id: first } });
      }
    }

    let call: Call | undefined;
    try {
      call = await this.billing.hold({
        auth,
        scope,
        endpoint,
        // The upstream's format: what the call is sent and billed in.
        format: upstreamFormat,
        customerId,
        wallet: r.wallet,
        traceId: r.traceId,
        model,
        stream: r.stream,
        transactionId,
        explicitMax: r.explicitMax,
        limitField: r.limitField,
        answers: r.answers,
        rawBytes: r.rawBytes,
        parts: r.parts,
        minOutputTokens: upstreamFormat === 'responses' ? responses_min_output_tokens : undefined,
        idempotencyKey: idempotencyKey ?? '',
        incremental: r.incrementalHold ? incrementalOf(r.explicitMax ?? model.maxOutputTokens) : null,
      });
      res.setHeader('X-Service-Transaction-Id', transactionId);
      if (r.traceId !== null) res.setHeader('X-Service-Trace-Id', r.traceId);
      res.setHeader('X-Service-Reserved-Credits', String(call.hold));
      if (endpoint === 'embeddings') {
        // No output: no output limit to send or say.
        await this.relay.whole(res, call, embeddingsUpstreamBody(r.body, model.upstreamModel), undefined);
        return;
      }
      // An incremental hold sends the output limit upstream unclamped: the hold follows the output.
      const maxTokens = call.incremental?.limit ?? call.outputTokens;
      res.setHeader('X-Service-Max-Tokens', String(maxTokens));
      if (call.incremental !== null) res.setHeader(hold_header, 'incremental');
      // An incremental hold's smaller first slice lowers nothing sent upstream.
      if (call.budget?.lowered && call.incremental === null) res.setHeader(max_tokens_limited_by_header, 'budget');
      const upstreamBody = prepareUpstreamBody(upstreamFormat, translated === null ? r.body : translated.body, { upstreamModel: model.upstreamModel, maxTokens, stream: r.stream });
      const translation = translated === null ? null : translated.translation;
      // Settled, or released (the release freed the key: GatewayBilling.release).
      await (r.stream
        ? this.relay.stream(res, call, upstreamBody.body, upstreamBody.clientWantsUsage, r.anthropicVersion, r.inlineBilling, translation)
        : this.relay.whole(res, call, upstreamBody.body, r.anthropicVersion, translation));
    } catch (err) {
      // The key is freed only when nothing can have been billed: no answer went out and
      // no settlement was tried (one whose reply was lost may have charged the call).
      if (idempotencyKey !== undefined && !(call && (res.headersSent || call.settleTried))) {
        await this.billing.freeIdempotencyKey(scope, customerId, idempotencyKey, transactionId);
      }
      // Once the hold applied, a later step that never reached Redis (a settlement or a
      // release) does not make the call "nothing applied": outcome_unknown, naming the
      // call, whose receipt says what it was billed once its settlement lands.
      if (!call) throw err;
      const after = afterApplied(err);
      throw after instanceof OutcomeUnknownError ? new ApiError('outcome_unknown', { extra: { transaction_id: transactionId } }) : after;
    }
    // An upstream HTTP error relayed as it is, or a stream the upstream broke off before
    // any answer, was answered without an error of ours but billed nothing: the same key
    // may retry it. Its release freed the key already, before the answer went out
    // (GatewayBilling.release).
  }
}
