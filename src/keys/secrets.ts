/** API key secrets: 32 random bytes behind a type prefix; stored only as SHA-256. */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export type KeyType = 'admin' | 'project' | 'customer';

const keyPrefixes: Record<KeyType, string> = {
  admin: 'svc_admin_',
  project: 'svc_live_',
  customer: 'svc_customer_',
};

const keyPattern = /^svc_(admin|live|customer)_[A-Za-z0-9_-]{32,128}$/;

export function generateSecret(type: KeyType): string {
  return `${keyPrefixes[type]}${randomBytes(32).toString('base64url')}`;
}

export function isWellFormedKey(key: string): boolean {
  return keyPattern.test(key);
}

/**
 * The provider whose API key `key` looks like (`sk-ant-...` Anthropic's, any other
 * `sk-...` OpenAI's), null for any other text: a client pointed at this service with the
 * provider's key in its environment sends it. Reads the prefix only; the key is never
 * echoed.
 */
export function providerKeyLookalike(key: string): 'Anthropic' | 'OpenAI' | null {
  if (key.startsWith('sk-ant-')) return 'Anthropic';
  if (key.startsWith('sk-')) return 'OpenAI';
  return null;
}

export function hashSecret(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** The hash is the lookup key; the constant-time compare guards the final equality. */
export function hashesEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Every stored prefix holds at least a key's first 16 characters: the dashboard names a key's row by them. */
const display_prefix_chars_min = 16;

/**
 * What a key list shows instead of the secret: its type prefix and the first random
 * characters, six or more, so that at least `display_prefix_chars_min` characters (seven
 * of a project key's 43 random ones: 216 bits stay secret).
 */
export function displayPrefix(key: string): string {
  const type = /^svc_(admin|live|customer)_/.exec(key)![0];
  return key.slice(0, Math.max(display_prefix_chars_min, type.length + 6));
}
