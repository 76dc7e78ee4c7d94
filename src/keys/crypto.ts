/**
 * Upstream provider keys at rest: AES-256-GCM under the service's master key.
 *
 * Stored format: one version byte, the 12-byte IV, the 16-byte GCM tag, then the
 * ciphertext. The version byte lets a later format (another cipher, a key id for
 * rotation) live beside this one. The caller passes associated data naming the row the
 * secret belongs to, so a ciphertext copied onto another row does not decrypt there.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';

const master_key_bytes = 32;
const iv_bytes = 12;
const tag_bytes = 16;
const ciphertext_version = 1;
export const master_key_file = '.svc-master-key';

/** 32 bytes written as 64 hex digits or as base64 (standard or url-safe). */
export function parseMasterKey(text: string): Buffer {
  const t = text.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, 'hex') : /^[A-Za-z0-9+/_-]+={0,2}$/.test(t) ? Buffer.from(t, 'base64') : null;
  if (!key || key.length !== master_key_bytes) {
    throw new Error(`the master key must be ${master_key_bytes} bytes written as 64 hex digits or as base64`);
  }
  return key;
}

/**
 * The master key from SVC_MASTER_KEY. Outside production an unset key is read from (or,
 * the first time, created in) `.svc-master-key` in the working directory, so `npm start`
 * works on a fresh machine and keeps its models readable across restarts. In production
 * an unset key is a startup error: a generated key would silently make every stored
 * upstream key unreadable on the next host.
 */
export function loadMasterKey(config: Pick<Config, 'SVC_MASTER_KEY' | 'NODE_ENV'>, dir = process.cwd()): Buffer {
  if (config.SVC_MASTER_KEY !== undefined && config.SVC_MASTER_KEY !== '') return parseMasterKey(config.SVC_MASTER_KEY);
  if (config.NODE_ENV === 'production') throw new Error('SVC_MASTER_KEY is required in production');
  const path = join(dir, master_key_file);
  try {
    return parseMasterKey(readFileSync(path, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  try {
    // 'wx' fails when another process created the file meanwhile; that one's key wins.
    writeFileSync(path, `${randomBytes(master_key_bytes).toString('base64')}\n`, { flag: 'wx', mode: 0o600 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  return parseMasterKey(readFileSync(path, 'utf8'));
}

export function encryptSecret(masterKey: Buffer, plaintext: string, associatedData: string): Buffer {
  const iv = randomBytes(iv_bytes);
  const cipher = createCipheriv('aes-256-gcm', masterKey, iv, { authTagLength: tag_bytes });
  cipher.setAAD(Buffer.from(associatedData, 'utf8'));
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return Buffer.concat([Buffer.from([ciphertext_version]), iv, cipher.getAuthTag(), body]);
}

/** Throws when the master key or the associated data is not the one used to encrypt. */
export function decryptSecret(masterKey: Buffer, stored: Buffer, associatedData: string): string {
  if (stored.length < 1 + iv_bytes + tag_bytes || stored[0] !== ciphertext_version) {
    throw new Error('stored secret has an unknown format');
  }
  const iv = stored.subarray(1, 1 + iv_bytes);
  const tag = stored.subarray(1 + iv_bytes, 1 + iv_bytes + tag_bytes);
  const decipher = createDecipheriv('aes-256-gcm', masterKey, iv, { authTagLength: tag_bytes });
  decipher.setAAD(Buffer.from(associatedData, 'utf8'));
  decipher.setAuthTag(tag);
  try {
    return Buffer.concat([decipher.update(stored.subarray(1 + iv_bytes + tag_bytes)), decipher.final()]).toString('utf8');
  } catch {
    throw new Error('stored secret cannot be decrypted: wrong master key or altered ciphertext');
  }
}
