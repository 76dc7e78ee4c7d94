/**
 * zod as every module that declares a schema uses it: extended with `.openapi()`
 * (descriptions, examples, component names; validation is unchanged), and the schemas that
 * many answers share. It sits in the foundation layer so that a store and the OpenAPI
 * registry (src/openapi/registry.ts) can both import it without importing each other.
 */
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';

extendZodWithOpenApi(z);

/** An ISO 8601 timestamp in UTC with milliseconds, as the API writes them. */
export const timestamp = z.string().datetime({ offset: true });

/** A list page: `{object: "list", data, has_more, next_cursor}`, newest first. */
export function listOf<T extends z.ZodTypeAny>(item: T) {
  return z
    .object({
      object: z.literal('list'),
      data: z.array(item),
      has_more: z.boolean(),
      next_cursor: z.string().nullable().openapi({ description: 'Pass as `cursor` for the next page; null on the last one.' }),
    })
    .strict();
}

/**
 * `base` with more fields, as one strict object. zod's `.extend` of a named schema is
 * generated as `allOf` of the base and the new fields, and a strict base then refuses the
 * new fields; this inlines the base's fields instead.
 */
export function extended<T extends z.ZodRawShape, U extends z.ZodRawShape>(base: z.ZodObject<T>, extra: U) {
  return z.object({ ...base.shape, ...extra }).strict();
}
