/**
 * A model's upstreams and timeouts (docs/API.md, "Upstreams and failover"): how a write
 * names them, how they are stored (models.upstreams, models.timeouts: migration 025, each
 * upstream's provider key encrypted like the model's own, src/keys/crypto.ts), and how a
 * read shows them (never a key). The gateway's routing is src/gateway/failover.ts.
 */
import { z } from 'zod';
import { decryptSecret, encryptSecret } from '../keys/crypto.js';

const upstreams_max = 16;
const upstream_id_chars_max = 32;
const upstream_weight_max = 1_000;
/** 10 minutes: an upstream slower than that to connect or to answer is not one to wait for. */
const timeout_ms_max = 600_000;

/** The id of the model's one upstream when it lists none (its upstream_base_url). */
export const primary_upstream_id = 'primary';

/** One upstream as a write gives it; `api_key` is write-only. */
export interface UpstreamInput {
  id: string;
  base_url: string;
  /** Undefined: the stored key of the upstream of the same id, else the model's upstream_api_key. */
  api_key?: string;
  upstream_model?: string | null;
  weight: number;
}

export interface ModelTimeouts {
  connect_ms?: number;
  first_byte_ms?: number;
  idle_ms?: number;
}

/** One upstream as stored: `key` is the base64 ciphertext of its provider key, null for the model's own. */
export interface StoredUpstream {
  id: string;
  base_url: string;
  upstream_model: string | null;
  weight: number;
  key: string | null;
}

export const storedUpstreamSchema = z.object({
  id: z.string(),
  base_url: z.string(),
  upstream_model: z.string().nullable(),
  weight: z.number(),
  key: z.string().nullable(),
});

export const timeoutsSchema = z
  .object({
    connect_ms: z.number().int().min(1).max(timeout_ms_max).optional(),
    first_byte_ms: z.number().int().min(1).max(timeout_ms_max).optional(),
    idle_ms: z.number().int().min(1).max(timeout_ms_max).optional(),
  })
  .strict();

/** The write schema of `upstreams` (`urlSchema`: the model's upstream_base_url rules). */
export function upstreamsWriteSchema(urlSchema: z.ZodType<string, z.ZodTypeDef, string>, keyCharsMax: number) {
  return z
    .array(
      z
        .object({
          id: z
            .string()
            .min(1)
            .max(upstream_id_chars_max)
            .regex(/^[A-Za-z0-9_.-]+$/, 'an upstream id is letters, digits, `_`, `.` and `-`'),
          base_url: urlSchema,
          api_key: z.string().min(1).max(keyCharsMax).optional(),
          upstream_model: z.string().min(1).max(256).nullable().optional(),
          weight: z.number().int().min(1).max(upstream_weight_max).default(1),
          // A read sent back carries these.
          has_api_key: z.unknown(),
        })
        .strict(),
    )
    .min(1)
    .max(upstreams_max)
    .superRefine((list, ctx) => {
      const seen = new Set<string>();
      list.forEach((u, i) => {
        if (seen.has(u.id)) ctx.addIssue({ code: z.ZodIssueCode.custom, path: [i, 'id'], message: `upstream id ${u.id} appears twice` });
        seen.add(u.id);
      });
    });
}

function keyData(projectId: string, modelId: string, upstreamId: string): string {
  return `models/${projectId}/${modelId}/upstreams/${upstreamId}`;
}

/**
 * The upstreams to store for a write: each key encrypted, or, when the write gives none,
 * the key stored for the upstream of the same id (`previous`), else null (the model's own).
 */
export function storedUpstreams(masterKey: Buffer, projectId: string, modelId: string, input: UpstreamInput[] | null, previous: StoredUpstream[] | null): StoredUpstream[] | null {
  if (input === null) return null;
  const before = new Map((previous ?? []).map((u) => [u.id, u.key]));
  return input.map((u) => ({
    id: u.id,
    base_url: u.base_url,
    upstream_model: u.upstream_model ?? null,
    weight: u.weight,
    key: u.api_key !== undefined ? encryptSecret(masterKey, u.api_key, keyData(projectId, modelId, u.id)).toString('base64') : (before.get(u.id) ?? null),
  }));
}

/** A stored upstream's provider key in clear, or null for the model's own. */
export function upstreamKey(masterKey: Buffer, projectId: string, modelId: string, u: StoredUpstream): string | null {
  return u.key === null ? null : decryptSecret(masterKey, Buffer.from(u.key, 'base64'), keyData(projectId, modelId, u.id));
}

/**
 * The management view of the upstreams: which key each calls with, never the key. An
 * upstream without its own calls with the model's `upstream_api_key` when there is one
 * (`uses_model_key`), so that `has_api_key: false` is not read as "no key".
 */
export function upstreamsEntry(list: StoredUpstream[] | null, modelHasKey: boolean) {
  return list === null
    ? null
    : list.map((u) => ({ id: u.id, base_url: u.base_url, upstream_model: u.upstream_model, weight: u.weight, has_api_key: u.key !== null, uses_model_key: u.key === null && modelHasKey }));
}

export const upstreamsEntrySchema = z
  .array(
    z
      .object({
        id: z.string(),
        base_url: z.string(),
        upstream_model: z.string().nullable().openapi({ description: "Null: the model's upstream_model." }),
        weight: z.number().int(),
        has_api_key: z.boolean().openapi({ description: "Whether this upstream has a key of its own (else the model's upstream_api_key); never returned." }),
        uses_model_key: z.boolean().openapi({ description: "Whether it calls with the model's upstream_api_key (it has no key of its own and the model has one). Both false: it has no key, and is left out of calls." }),
        state: z.enum(['ok', 'cooling', 'circuit_open']).openapi({
          description: "As the answering API process sees it (each process keeps its own): `cooling` after a 429 with retry-after, until `cooling_until`; `circuit_open` after consecutive failures. Calls skip it meanwhile.",
        }),
        cooling_until: z.string().nullable(),
      })
      .strict(),
  )
  .nullable()
  .openapi({ description: 'The upstreams a call is routed among (docs: Upstreams and failover); null: the model\'s upstream_base_url alone (id `primary`).' });
