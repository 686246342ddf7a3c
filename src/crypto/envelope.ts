// Secrets at rest: AES-256-GCM (node:crypto) under a 32-byte master key. Each sealed value names the
// key that sealed it (a key id derived from the key), so a keyring holding the current and earlier
// keys opens values sealed before a rotation. The record's identity is the additional authenticated
// data: a ciphertext copied onto another record, or another organization's, does not open.
import crypto from "node:crypto";

export const MASTER_KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const FORMAT = "v1";

/** Where a secret belongs; bound into its ciphertext. */
export interface SecretIdentity {
  organizationId: string;
  /** What the secret is: "wallet.mnemonic", "private_key", … */
  kind: string;
  resourceId: string;
}

export class SecretError extends Error {
  override name = "SecretError";
}

/** The key id of a master key: public, short, and the same wherever the key is loaded. */
export function keyIdOf(key: Uint8Array): string {
  return crypto.createHash("sha256").update("sigil master key id\0").update(key).digest("hex").slice(0, 16);
}

const aad = (id: SecretIdentity) => Buffer.from(JSON.stringify([id.organizationId, id.kind, id.resourceId]), "utf8");

export class Keyring {
  private readonly keys = new Map<string, Buffer>();
  readonly currentKeyId: string;

  /** `current` seals; `others` (earlier or next keys) only open. */
  constructor(current: Uint8Array, others: Uint8Array[] = []) {
    for (const key of [current, ...others]) {
      if (key.length !== MASTER_KEY_BYTES) throw new SecretError(`a master key must be ${MASTER_KEY_BYTES} bytes, got ${key.length}`);
      this.keys.set(keyIdOf(key), Buffer.from(key));
    }
    this.currentKeyId = keyIdOf(current);
  }

  seal(plaintext: Uint8Array | string, identity: SecretIdentity): string {
    const key = this.keys.get(this.currentKeyId)!;
    const iv = crypto.randomBytes(IV_BYTES);
    const cipher = crypto.createCipheriv("aes-256-gcm", key, iv);
    cipher.setAAD(aad(identity));
    const body = Buffer.concat([cipher.update(typeof plaintext === "string" ? Buffer.from(plaintext, "utf8") : plaintext), cipher.final()]);
    return [FORMAT, this.currentKeyId, Buffer.concat([iv, body, cipher.getAuthTag()]).toString("base64url")].join(".");
  }

  open(sealed: string, identity: SecretIdentity): Buffer {
    const [format, keyId, payload] = sealed.split(".");
    if (format !== FORMAT || !keyId || !payload) throw new SecretError("not a sealed secret");
    const key = this.keys.get(keyId);
    // Names the key id only: it is what an operator needs to find the missing key file.
    if (!key) throw new SecretError(`secret sealed with master key ${keyId}, which this server does not hold`);
    const bytes = Buffer.from(payload, "base64url");
    if (bytes.length < IV_BYTES + TAG_BYTES) throw new SecretError("sealed secret is truncated");
    const decipher = crypto.createDecipheriv("aes-256-gcm", key, bytes.subarray(0, IV_BYTES));
    decipher.setAAD(aad(identity));
    decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
    try {
      return Buffer.concat([decipher.update(bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new SecretError(
        `sealed secret of ${identity.kind} ${identity.resourceId} does not open: tampered with, or copied from another record`,
      );
    }
  }

  /** The key id a sealed value names. */
  static keyIdOf(sealed: string): string | undefined {
    return sealed.split(".")[1];
  }

  holds(keyId: string): boolean {
    return this.keys.has(keyId);
  }

  /** A keyring sealing under this one's current key and opening with the keys of both: every key at
   * hand, for a rotation that must open what any of them sealed. */
  including(other: Keyring): Keyring {
    const merged = new Keyring(this.keys.get(this.currentKeyId)!);
    for (const [id, key] of [...this.keys, ...other.keys]) merged.keys.set(id, key);
    return merged;
  }
}
