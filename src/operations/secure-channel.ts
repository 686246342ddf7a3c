// The secure channel secrets travel through, both ways (what the product's docs call its enclave
// secure channels). Out: a secret is sealed (HPKE, crypto/hpke.ts) to a P-256 key the client names and
// wrapped in a bundle the deployment's bundle signer signs — what @turnkey/crypto's
// decryptExportBundle / decryptSecretBundle open. In: the service hands out one-use import targets
// (P-256 keys it holds sealed) in signed bundles — what encryptWalletToBundle /
// encryptPrivateKeyToBundle / encryptSecretToBundle encrypt to — and opens what comes back with the
// target, which is then discarded. Wallet, private key and stored-secret imports and exports share it.
import { p256 } from "@noble/curves/nist.js";
import { serviceError } from "../errors.js";
import { HpkeError, openWith, sealTo, uncompressedP256, type Sealed } from "../crypto/hpke.js";
import type { BundleSigner } from "../services/service-keys.js";
import type { ActivityContext } from "../registry/registry.js";
import type { Keyring } from "../crypto/envelope.js";
import type { ImportTargetsTable } from "../store/schema.js";
import type { Tx } from "../store/handles.js";
import { newId } from "../store/ids.js";

/** The signed bundle: `data` is the hex of the JSON that carries the sealed secret. */
export async function signedBundle(signer: BundleSigner, fields: Record<string, string>): Promise<string> {
  const data = Buffer.from(JSON.stringify(fields), "utf8");
  return JSON.stringify({
    version: "v1.0.0",
    data: data.toString("hex"),
    dataSignature: signer.sign(data).toString("hex"),
    enclaveQuorumPublic: signer.publicKey,
  });
}

/** Seals `secret` to `targetPublicKey` and wraps it in a signed export bundle; wipes `secret`. */
export async function exportBundle(ctx: ActivityContext, targetPublicKey: string, secret: Buffer): Promise<string> {
  try {
    const sealed = await sealTo(targetKey(targetPublicKey), secret);
    return await signedBundle(ctx.env.bundles, { ...sealed, organizationId: ctx.organizationId });
  } finally {
    secret.fill(0);
  }
}

/** The target key as policies see it: one spelling (uncompressed, lowercase hex) however it was sent,
 * so a rule about a key cannot be sidestepped by compressing it or changing its letter case. */
export function policyTargetKey(targetPublicKey: string): string {
  try {
    return Buffer.from(uncompressedP256(String(targetPublicKey ?? ""), "targetPublicKey")).toString("hex");
  } catch {
    return String(targetPublicKey ?? "");
  }
}

/** The client's key an export is sealed to, uncompressed; INVALID_TARGET_PUBLIC_KEY when it is none. */
export function targetKey(targetPublicKey: string, field = "targetPublicKey"): Uint8Array {
  try {
    return uncompressedP256(String(targetPublicKey ?? ""), field);
  } catch (error) {
    if (error instanceof HpkeError) throw serviceError("INVALID_TARGET_PUBLIC_KEY", error.message);
    throw error;
  }
}

// ---- Import targets ----

/** "wallet" | "private_key" | "secret": a user holds targets of each kind apart. */
export type ImportTargetKind = "wallet" | "private_key" | "secret";

const targetIdentity = (row: { id: string; organization_id: string }) => ({
  organizationId: row.organization_id,
  kind: "import_target",
  resourceId: row.id,
});

/** Expired targets serve nobody: each init clears them away (the server does at start too). */
export async function purgeExpiredImportTargets(trx: Tx, now: number): Promise<void> {
  await trx.deleteFrom("import_targets").where("expires_at", "<=", now).execute();
}

/** `count` fresh target keys for the user, each in a signed bundle naming the organization, the user
 * and the key (targetPublic); earlier unused targets of the same kind stop working. */
export async function issueImportTargets(ctx: ActivityContext, userId: string, kind: ImportTargetKind, count: number): Promise<string[]> {
  await purgeExpiredImportTargets(ctx.trx, ctx.now);
  await discardImportTargets(ctx, userId, kind);
  const bundles: string[] = [];
  for (let i = 0; i < count; i++) {
    const secret = p256.utils.randomSecretKey();
    const publicKey = Buffer.from(p256.getPublicKey(secret, false)).toString("hex");
    const id = newId();
    await ctx.trx
      .insertInto("import_targets")
      .values({
        id,
        organization_id: ctx.organizationId,
        user_id: userId,
        kind,
        public_key: publicKey,
        sealed_private_key: ctx.env.keyring.seal(secret, targetIdentity({ id, organization_id: ctx.organizationId })),
        expires_at: ctx.now + ctx.env.importTargetTtlMs,
        created_at: ctx.now,
      })
      .execute();
    secret.fill(0);
    bundles.push(await signedBundle(ctx.env.bundles, { organizationId: ctx.organizationId, userId, targetPublic: publicKey }));
  }
  return bundles;
}

/** The user's targets of `kind` (or only those with the given public keys) stop working. */
export async function discardImportTargets(
  ctx: ActivityContext,
  userId: string,
  kind: ImportTargetKind,
  publicKeys?: string[],
): Promise<void> {
  if (publicKeys?.length === 0) return;
  let query = ctx.trx
    .deleteFrom("import_targets")
    .where("organization_id", "=", ctx.organizationId)
    .where("user_id", "=", userId)
    .where("kind", "=", kind);
  if (publicKeys) query = query.where("public_key", "in", publicKeys);
  await query.execute();
}

/** The client's encrypted payload: the JSON {encappedPublic, ciphertext} the import helpers return. */
export function parseEncryptedPayload(raw: string, field: string, helpers: string): Sealed {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw serviceError("INVALID_IMPORT_BUNDLE", `${field} must be the JSON {encappedPublic, ciphertext} that ${helpers} return`);
  }
  const { encappedPublic, ciphertext } = (parsed ?? {}) as Record<string, unknown>;
  if (typeof encappedPublic !== "string" || typeof ciphertext !== "string")
    throw serviceError("INVALID_IMPORT_BUNDLE", `${field} lacks encappedPublic or ciphertext`);
  return { encappedPublic, ciphertext };
}

/** Refuses a target that is missing or past its time; `init` names the activity that makes one. */
export function requireLiveTarget<T extends ImportTargetsTable>(target: T | undefined, now: number, missing: string, init: string): T {
  if (!target) throw serviceError("IMPORT_TARGET_NOT_FOUND", missing);
  if (target.expires_at <= now)
    throw serviceError(
      "IMPORT_TARGET_EXPIRED",
      `the import target from ${init} expired at ${new Date(target.expires_at).toISOString()}: call ${init} again`,
    );
  return target;
}

/** Opens the client's payload with the target, and discards the target (one use). */
export async function openWithImportTarget(
  ctx: ActivityContext,
  target: ImportTargetsTable,
  sealed: Sealed,
  field: string,
): Promise<Buffer> {
  try {
    const plaintext = await openAheadWithImportTarget(ctx.env.keyring, target, sealed);
    await ctx.trx.deleteFrom("import_targets").where("id", "=", target.id).execute();
    return plaintext;
  } catch (error) {
    if (error instanceof HpkeError) throw serviceError("INVALID_IMPORT_BUNDLE", `${field}: ${error.message}`);
    throw error;
  }
}

/** Opens the client's payload with the target without using the target up: for work before the
 * activity's lock (an import's precheck derives the wallet's accounts), which keeps what it opens in
 * memory only; execute opens it again with openWithImportTarget, which uses the target up. */
export async function openAheadWithImportTarget(keyring: Keyring, target: ImportTargetsTable, sealed: Sealed): Promise<Buffer> {
  const secret = keyring.open(target.sealed_private_key, targetIdentity(target));
  try {
    const plaintext = await openWith(secret, Buffer.from(target.public_key, "hex"), sealed);
    return Buffer.from(plaintext.buffer, plaintext.byteOffset, plaintext.byteLength);
  } finally {
    secret.fill(0);
  }
}
