/**
 * A gateway call as its billing (src/gateway/billing.ts) sees it: what the hold is asked
 * (HoldRequest), and the call whose hold applied, with what its settlement or release
 * needs (Call).
 */
import type { AuthContext } from '../keys/caller.js';
import type { ProjectScope } from '../ledger/requests.js';
import type { PlanTicket } from '../plans/service.js';
import type { WireFormat } from './adapters.js';
import type { GatewayModel } from './models.js';
import type { PartCounts } from './wire/format.js';
import type { Endpoint } from './request.js';
import type { CallBudget } from './budget.js';
import type { Attempt } from './failover.js';

/** An incremental hold's slices (src/gateway/incremental.ts): the tokens of one, and the output limit sent upstream (per answer). */
export interface IncrementalHold {
  slice: number;
  limit: number;
}

/** A call whose hold applied: what its settlement or release needs. */
export interface Call {
  auth: AuthContext;
  scope: ProjectScope;
  endpoint: Endpoint;
  format: WireFormat;
  customerId: string;
  wallet: string;
  traceId: string | null;
  model: GatewayModel;
  stream: boolean;
  transactionId: string;
  /** Answers asked of the upstream (OpenAI `n`). */
  answers: number;
  startedAt: number;
  reservation: PlanTicket;
  hold: number;
  outputTokens: number;
  requestBytes: number;
  /** A settlement was sent: the call may be billed even if no reply came. */
  settleTried: boolean;
  /** When the call was sent upstream (performance.now()); 0 until then. */
  upstreamStartedAt: number;
  /** The call's Idempotency-Key, '' for none. */
  idempotencyKey: string;
  /** What the hold answered of the spending budgets; null when none applies. */
  budget: CallBudget | null;
  /** `X-Service-Hold: incremental`: the hold's slice and the output limit sent upstream; null for a hold up front. */
  incremental: IncrementalHold | null;
  /** The upstream (its id in the model) whose answer the call has; null until one answered. */
  upstream: string | null;
  /** Every upstream attempt of the call, in order (src/gateway/failover.ts). */
  attempts: Attempt[];
}

export type HoldRequest = Omit<Call, 'startedAt' | 'reservation' | 'hold' | 'outputTokens' | 'requestBytes' | 'settleTried' | 'upstreamStartedAt' | 'budget' | 'upstream' | 'attempts'> & {
  explicitMax: number | null;
  /** The client's output limit field (`max_tokens`, `max_completion_tokens`), named by a refusal that a lower limit would avoid. */
  limitField: string;
  rawBytes: number;
  /** Image and file parts of the request: each adds its model's bound to the input's. */
  parts: PartCounts;
  /** The least output limit the upstream accepts (a Responses-format model's 16): a hold lowered below it is refused, 402. */
  minOutputTokens?: number;
};

/**
 * The call of a hold request, built field by field: Node 20 adds each field to a spread
 * copy (`{ ...c, startedAt, ... }`) through a slow path, which cost about 8 us per call
 * for these five.
 */
export function callOf(c: HoldRequest, startedAt: number, reservation: PlanTicket, hold: number, outputTokens: number, budget: CallBudget | null = null): Call {
  return {
    auth: c.auth,
    scope: c.scope,
    endpoint: c.endpoint,
    format: c.format,
    customerId: c.customerId,
    wallet: c.wallet,
    traceId: c.traceId,
    model: c.model,
    stream: c.stream,
    transactionId: c.transactionId,
    answers: c.answers,
    startedAt,
    reservation,
    hold,
    outputTokens,
    requestBytes: c.rawBytes,
    settleTried: false,
    upstreamStartedAt: 0,
    idempotencyKey: c.idempotencyKey,
    budget,
    incremental: c.incremental,
    upstream: null,
    attempts: [],
  };
}
