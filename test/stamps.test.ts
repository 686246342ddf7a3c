// API-key stamp verification (src/auth/stamps.ts): P-256 and Ed25519 are checked on libuv's thread
// pool, secp256k1 inline. Whichever way, the answer is the same as the inline check's: true for the
// exact bytes signed by the stamp's key, false for a changed byte, another key, a signature that does
// not decode, a key not on its curve — never a throw.
import crypto from "node:crypto";
import { describe, expect, it } from "vitest";
import { verifyApiKeyStamp, verifyApiKeyStampInline, type ApiKeyStamp, type StampScheme } from "../src/auth/stamps.js";

/** A key of `scheme`'s curve, as the stamp names it (compressed point or raw Ed25519 key, hex), and a signer. */
function keyFor(scheme: StampScheme): { publicKey: string; sign(body: Buffer): string } {
  if (scheme === "SIGNATURE_SCHEME_TK_API_ED25519") {
    const { publicKey, privateKey } = crypto.generateKeyPairSync("ed25519");
    const raw = Buffer.from(publicKey.export({ format: "jwk" }).x!, "base64url");
    return { publicKey: raw.toString("hex"), sign: (body) => crypto.sign(null, body, privateKey).toString("hex") };
  }
  const namedCurve = scheme === "SIGNATURE_SCHEME_TK_API_P256" ? "prime256v1" : "secp256k1";
  const { publicKey, privateKey } = crypto.generateKeyPairSync("ec", { namedCurve });
  const jwk = publicKey.export({ format: "jwk" });
  const y = Buffer.from(jwk.y!, "base64url");
  const compressed = Buffer.concat([Buffer.from([y[y.length - 1]! & 1 ? 3 : 2]), Buffer.from(jwk.x!, "base64url")]);
  return { publicKey: compressed.toString("hex"), sign: (body) => crypto.sign("sha256", body, privateKey).toString("hex") };
}

const SCHEMES: StampScheme[] = ["SIGNATURE_SCHEME_TK_API_P256", "SIGNATURE_SCHEME_TK_API_ED25519", "SIGNATURE_SCHEME_TK_API_SECP256K1"];

describe.each(SCHEMES)("an API-key stamp (%s)", (scheme) => {
  const key = keyFor(scheme);
  const other = keyFor(scheme);
  const body = Buffer.from(JSON.stringify({ type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", timestampMs: "1" }));
  const stamp: ApiKeyStamp = { kind: "API_KEY", publicKey: key.publicKey, scheme, signature: key.sign(body) };

  /** Both ways of checking, which must agree. */
  const verdicts = async (s: ApiKeyStamp, b: Buffer) => [await verifyApiKeyStamp(s, b), verifyApiKeyStampInline(s, b)];

  it("verifies over the exact bytes signed", async () => {
    expect(await verdicts(stamp, body)).toEqual([true, true]);
  });

  it("fails for one byte changed, another key's signature, or another key named", async () => {
    const changed = Buffer.from(body);
    changed[changed.length - 2] ^= 1;
    expect(await verdicts(stamp, changed)).toEqual([false, false]);
    expect(await verdicts({ ...stamp, signature: other.sign(body) }, body)).toEqual([false, false]);
    expect(await verdicts({ ...stamp, publicKey: other.publicKey }, body)).toEqual([false, false]);
  });

  it("fails, without throwing, for a signature that does not decode or a key that is not on the curve", async () => {
    for (const signature of ["", "00", "30", `${stamp.signature.slice(0, -2)}`, "ff".repeat(72)])
      expect(await verdicts({ ...stamp, signature }, body)).toEqual([false, false]);
    const notOnCurve = scheme === "SIGNATURE_SCHEME_TK_API_ED25519" ? "00".repeat(31) : `02${"ff".repeat(32)}`;
    for (const publicKey of [notOnCurve, "", "02"]) expect(await verdicts({ ...stamp, publicKey }, body)).toEqual([false, false]);
  });

  it("answers many at once, each for its own body", async () => {
    const bodies = Array.from({ length: 64 }, (_, i) => Buffer.from(`{"n":${i}}`));
    const stamps = bodies.map((b) => ({ ...stamp, signature: key.sign(b) }));
    // Every other stamp is checked against the next body: those must fail, the rest hold.
    const answers = await Promise.all(stamps.map((s, i) => verifyApiKeyStamp(s, bodies[i % 2 ? (i + 1) % 64 : i]!)));
    expect(answers).toEqual(bodies.map((_, i) => i % 2 === 0));
  });
});
