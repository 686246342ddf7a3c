// Keys the deployment itself holds (not an organization's): created on first start, sealed at rest
// like every secret, and the same for every server process sharing the database. Today: the Ed25519
// key webhook deliveries are signed with; its public half is published for receivers.
import crypto from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import type { Keyring } from "../crypto/envelope.js";
import type { Store } from "../store/database.js";
import type { ServiceKeysTable } from "../store/schema.js";
import { newId } from "./resources.js";

export const WEBHOOK_SIGNING = "webhook_signing";

export interface ServiceSigningKey {
  /** What deliveries name the key by (X-Turnkey-Signature-Key-Id). */
  keyId: string;
  /** Hex, 32 bytes. */
  publicKey: string;
  sign(message: Uint8Array): Buffer;
}

const identity = (row: Pick<ServiceKeysTable, "id" | "organization_id">) => ({ organizationId: row.organization_id, kind: "service_key", resourceId: row.id });

/** The key for `purpose`, made (and stored sealed) if this deployment has none yet. */
export async function serviceSigningKey(store: Store, keyring: Keyring, purpose = WEBHOOK_SIGNING): Promise<ServiceSigningKey> {
  let row = await store.db.selectFrom("service_keys").selectAll().where("purpose", "=", purpose).executeTakeFirst();
  if (!row) {
    const seed = ed25519.utils.randomSecretKey();
    const id = newId();
    const fresh: ServiceKeysTable = {
      id,
      purpose,
      organization_id: "",
      public_key: Buffer.from(ed25519.getPublicKey(seed)).toString("hex"),
      sealed_private_key: keyring.seal(seed, identity({ id, organization_id: "" })),
      created_at: Date.now(),
    };
    seed.fill(0);
    try {
      await store.transact("exclusive", (trx) => trx.insertInto("service_keys").values(fresh).execute());
    } catch (error) {
      // Another process made it at the same moment (the purpose is unique): use theirs.
      row = await store.db.selectFrom("service_keys").selectAll().where("purpose", "=", purpose).executeTakeFirst();
      if (!row) throw error;
    }
    row ??= await store.db.selectFrom("service_keys").selectAll().where("purpose", "=", purpose).executeTakeFirstOrThrow();
  }
  const seed = keyring.open(row.sealed_private_key, identity(row));
  const publicKey = Buffer.from(row.public_key, "hex");
  const privateKey = crypto.createPrivateKey({ key: { kty: "OKP", crv: "Ed25519", d: Buffer.from(seed).toString("base64url"), x: publicKey.toString("base64url") }, format: "jwk" });
  Buffer.from(seed.buffer, seed.byteOffset, seed.byteLength).fill(0);
  return {
    keyId: `whk_${crypto.createHash("sha256").update(publicKey).digest("hex").slice(0, 16)}`,
    publicKey: row.public_key,
    sign: (message) => crypto.sign(null, message, privateKey),
  };
}
