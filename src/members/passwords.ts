/**
 * Member passwords: scrypt (node:crypto) with a random 16-byte salt per password, stored
 * as `scrypt$N$r$p$salt$hash` (base64url) so that the cost can be raised later without
 * breaking stored passwords, and compared in constant time.
 */
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/** scrypt's cost: 2^14 x 8 x 128 bytes = 16 MiB of memory and about 50 ms per hash. */
const scrypt_n = 16_384;
const scrypt_r = 8;
const scrypt_p = 1;
const salt_bytes = 16;
const hash_bytes = 32;
export const password_chars_min = 12;
export const password_chars_max = 256;

function derive(password: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer> {
  // The default maxmem (32 MiB) fits scrypt_n; a stored hash with a higher cost gets room for it.
  const maxmem = Math.max(32 * 1024 * 1024, 256 * (options.N ?? scrypt_n) * (options.r ?? scrypt_r));
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFC'), salt, keylen, { ...options, maxmem }, (err, key) => (err ? reject(err) : resolve(key)));
  });
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(salt_bytes);
  const hash = await derive(password, salt, hash_bytes, { N: scrypt_n, r: scrypt_r, p: scrypt_p });
  return `scrypt$${scrypt_n}$${scrypt_r}$${scrypt_p}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

/** True when `password` is the one `stored` was made from; a malformed `stored` is false. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number);
  const salt = Buffer.from(parts[4], 'base64url');
  const expected = Buffer.from(parts[5], 'base64url');
  if (![N, r, p].every(Number.isSafeInteger) || expected.length === 0) return false;
  const actual = await derive(password, salt, expected.length, { N, r, p });
  return timingSafeEqual(actual, expected);
}

/**
 * A hash no password matches in practice, verified when an email is unknown so that a
 * sign-in takes as long whether or not the email belongs to a member.
 */
export const unknown_member_hash = `scrypt$${scrypt_n}$${scrypt_r}$${scrypt_p}$${randomBytes(salt_bytes).toString('base64url')}$${randomBytes(hash_bytes).toString('base64url')}`;

/** A password for a member invited without one: 144 random bits, shown once. */
export function generatePassword(): string {
  return randomBytes(18).toString('base64url');
}
