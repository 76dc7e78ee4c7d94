/** API key secrets: 32 random bytes behind a type prefix; stored only as SHA-256. */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export type KeyType = 'admin' | 'project' | 'customer';

export const keyPrefixes: Record<KeyType, string> = {
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

export function hashSecret(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** The hash is the lookup key; the constant-time compare guards the final equality. */
export function hashesEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** What a key list shows instead of the secret: its type prefix and first characters. */
export function displayPrefix(key: string): string {
  const type = /^svc_(admin|live|customer)_/.exec(key)![0];
  return `${type}${key.slice(type.length, type.length + 6)}`;
}
