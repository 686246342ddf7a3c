// One-time password codes: made with the CSPRNG (6–9 digits or Crockford base32), stored only as an HMAC,
// and checked once: a code is single-use, expires, and burns after a bounded number of wrong tries (a
// wrong try is counted by `countWrongCode`, which the declarations run as `afterFailure`, after the
// rollback). The code may come back plain or sealed to the OTP's encryption target (verify_otp V2).
import crypto from "node:crypto";
import { serviceError } from "../../errors.js";
import { HpkeError, openWith } from "../../crypto/hpke.js";
import type { ActivityContext, AnyVersionOf, ParametersOf } from "../../registry/registry.js";
import { secondsParameter } from "../resources.js";
import type { OtpInitParams } from "./otp-messages.js";

export type Flow = "otp_auth" | "otp";

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const DIGITS = "0123456789";
const MAX_OTP_SECONDS = 600;

/** How long an expired code is kept, so a late try hears OTP_EXPIRED rather than OTP_NOT_FOUND. */
export const EXPIRED_CODE_KEPT_MS = 10 * 60 * 1000;

export function generateCode(length: number, alphanumeric: boolean): string {
  const alphabet = alphanumeric ? CROCKFORD : DIGITS;
  let code = "";
  for (let i = 0; i < length; i++) code += alphabet[crypto.randomInt(alphabet.length)];
  return code;
}

/** What the user typed, as the code was generated: Crockford reads I/L as 1 and O as 0, ignores case
 * and separators. */
function normalizeCode(input: string, alphanumeric: boolean): string {
  const compact = String(input ?? "")
    .replace(/[\s-]/g, "")
    .toUpperCase();
  return alphanumeric ? compact.replace(/[IL]/g, "1").replace(/O/g, "0") : compact;
}

export const hashOf = (ctx: ActivityContext, otpId: string, code: string) => ctx.env.otp.codeHash(`${otpId}:${code}`);

export function codeShape(p: Pick<OtpInitParams, "otpLength" | "alphanumeric">): { length: number; alphanumeric: boolean } {
  const length = p.otpLength ?? 9;
  if (!Number.isInteger(length) || length < 6 || length > 9)
    throw serviceError("INVALID_OTP_LENGTH", `otpLength must be 6 to 9, got ${String(p.otpLength)}`);
  return { length, alphanumeric: p.alphanumeric ?? true };
}

export function otpSeconds(ctx: ActivityContext, requested: string | undefined): number {
  const rule = { field: "expirationSeconds", max: MAX_OTP_SECONDS, of: "a one-time password", code: "INVALID_EXPIRATION" } as const;
  return secondsParameter(requested, rule) ?? ctx.env.otp.defaultSeconds;
}

export const targetIdentity = (row: { id: string; organization_id: string }) => ({
  organizationId: row.organization_id,
  kind: "otp_target",
  resourceId: row.id,
});

/** The code a verify/auth request carries: plain (otpCode), or sealed with the client's public key
 * to the OTP's target (encryptedOtpBundle, @turnkey/crypto's encryptOtpCodeToBundle). */
export type Presented = Pick<
  AnyVersionOf<ParametersOf<"otp_auth"> | ParametersOf<"verify_otp">>,
  "otpId" | "otpCode" | "encryptedOtpBundle"
>;

async function presentedCode(
  ctx: ActivityContext,
  row: { id: string; organization_id: string; target_public_key: string | null; sealed_target_key: string | null },
  presented: Presented,
): Promise<{ code: string; publicKey?: string }> {
  if (presented.encryptedOtpBundle === undefined) return { code: String(presented.otpCode ?? "") };
  if (!row.sealed_target_key || !row.target_public_key)
    throw serviceError(
      "OTP_BUNDLE_UNSUPPORTED",
      "this OTP was started without an encryption target (init_otp V1): send otpCode with verify_otp V1",
    );
  let sealed: { encappedPublic?: unknown; ciphertext?: unknown };
  try {
    sealed = JSON.parse(presented.encryptedOtpBundle) as typeof sealed;
  } catch {
    throw serviceError(
      "INVALID_OTP_BUNDLE",
      "encryptedOtpBundle must be the JSON {encappedPublic, ciphertext} encryptOtpCodeToBundle returns",
    );
  }
  if (typeof sealed.encappedPublic !== "string" || typeof sealed.ciphertext !== "string")
    throw serviceError("INVALID_OTP_BUNDLE", "encryptedOtpBundle lacks encappedPublic or ciphertext");
  const secret = ctx.env.keyring.open(row.sealed_target_key, targetIdentity(row));
  try {
    const plaintext = await openWith(secret, Buffer.from(row.target_public_key, "hex"), {
      encappedPublic: sealed.encappedPublic,
      ciphertext: sealed.ciphertext,
    });
    const inner = JSON.parse(Buffer.from(plaintext).toString("utf8")) as { otp_code?: unknown; public_key?: unknown };
    if (typeof inner.otp_code !== "string") throw serviceError("INVALID_OTP_BUNDLE", "encryptedOtpBundle does not carry an otp_code");
    return { code: inner.otp_code, ...(typeof inner.public_key === "string" && inner.public_key ? { publicKey: inner.public_key } : {}) };
  } catch (error) {
    if (error instanceof HpkeError) throw serviceError("INVALID_OTP_BUNDLE", `encryptedOtpBundle: ${error.message}`);
    if (error instanceof SyntaxError)
      throw serviceError("INVALID_OTP_BUNDLE", "encryptedOtpBundle does not hold the JSON {otp_code, public_key}");
    throw error;
  } finally {
    secret.fill(0);
  }
}

async function findOtp(ctx: ActivityContext, otpId: string, flow: Flow) {
  const row = await ctx.trx
    .selectFrom("otps")
    .selectAll()
    .where("id", "=", String(otpId ?? ""))
    .where("organization_id", "=", ctx.organizationId)
    .where("flow", "=", flow)
    .executeTakeFirst();
  const start = flow === "otp" ? "init_otp" : "init_otp_auth";
  if (!row) throw serviceError("OTP_NOT_FOUND", `no one-time password ${otpId} of this organization from ${start}`);
  if (row.used_at !== null)
    throw serviceError("OTP_ALREADY_USED", `one-time password ${otpId} was already used: start again with ${start}`);
  if (row.attempts >= ctx.env.otp.maxAttempts)
    throw serviceError(
      "OTP_ATTEMPTS_EXCEEDED",
      `one-time password ${otpId} was burnt after ${row.attempts} wrong codes: start again with ${start}`,
    );
  if (row.expires_at <= ctx.now)
    throw serviceError(
      "OTP_EXPIRED",
      `one-time password ${otpId} expired at ${new Date(row.expires_at).toISOString()}: start again with ${start}`,
    );
  return row;
}

const matches = (ctx: ActivityContext, row: { id: string; code_hash: string; alphanumeric: number }, code: string) => {
  const presented = Buffer.from(hashOf(ctx, row.id, normalizeCode(code, row.alphanumeric === 1)), "hex");
  const stored = Buffer.from(row.code_hash, "hex");
  return presented.length === stored.length && crypto.timingSafeEqual(presented, stored);
};

/** Checks the code and uses the OTP up; returns the OTP row and the public key an encrypted bundle named. */
export async function consumeOtp(ctx: ActivityContext, presented: Presented, flow: Flow) {
  const row = await findOtp(ctx, presented.otpId, flow);
  const { code, publicKey } = await presentedCode(ctx, row, presented);
  if (!matches(ctx, row, code)) {
    const left = ctx.env.otp.maxAttempts - row.attempts - 1;
    throw serviceError(
      "OTP_INVALID",
      `wrong one-time password for ${row.id}${left > 0 ? ` (${left} tr${left === 1 ? "y" : "ies"} left)` : "; it is now burnt"}`,
    );
  }
  const used = await ctx.trx
    .updateTable("otps")
    .set({ used_at: ctx.now, sealed_target_key: null })
    .where("id", "=", row.id)
    .where("used_at", "is", null)
    .executeTakeFirst();
  if (Number(used.numUpdatedRows) !== 1) throw serviceError("OTP_ALREADY_USED", `one-time password ${row.id} was already used`);
  return { row, publicKey };
}

/** After a failed verification (rolled back): a wrong code still counts against the OTP. */
export async function countWrongCode(ctx: ActivityContext, presented: Presented, flow: Flow): Promise<void> {
  let row;
  try {
    row = await findOtp(ctx, presented.otpId, flow);
  } catch {
    return;
  }
  let code: string;
  try {
    ({ code } = await presentedCode(ctx, row, presented));
  } catch {
    // An unreadable bundle is a wrong try as well: otherwise garbage could be sent without limit.
    code = "";
  }
  if (matches(ctx, row, code)) return;
  await ctx.trx
    .updateTable("otps")
    .set({ attempts: row.attempts + 1 })
    .where("id", "=", row.id)
    .execute();
}
