// Public-key plumbing for the curves API keys and passkeys use. Signature math is node:crypto's
// (OpenSSL) for P-256 and Ed25519, and libsecp256k1's (or its fallbacks', see secp256k1.ts) for
// secp256k1; which keys are accepted (one encoding per key, on the curve, ed25519 of prime order) is
// decided with @noble/curves' decoding and group checks. Nothing here is hand-rolled.
import crypto from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { secp256k1 as fastSecp256k1 } from "./secp256k1.js";

export type ApiKeyCurve = "API_KEY_CURVE_P256" | "API_KEY_CURVE_SECP256K1" | "API_KEY_CURVE_ED25519";

const HEX = /^[0-9a-fA-F]*$/;
export const isHex = (value: string) => value.length % 2 === 0 && HEX.test(value);

/** The one encoding of a P-256 or secp256k1 public key that API keys, session keys and stamps use: a
 * compressed point, 02 or 03 then x (33 bytes). OpenSSL and libsecp256k1 also read the uncompressed
 * (04) and "hybrid" (06/07) forms of the same point; one key has one spelling here. */
const COMPRESSED_POINT = /^0[23][0-9a-fA-F]{64}$/;

/** Uncompressed (04‖x‖y) P-256 point from a compressed one; throws when it is not one on the curve. */
export function decompressP256(compressedHex: string): Buffer {
  if (!COMPRESSED_POINT.test(compressedHex)) throw new Error("not a compressed P-256 point");
  return crypto.ECDH.convertKey(compressedHex, "prime256v1", "hex", undefined, "uncompressed") as Buffer;
}

export function compressP256(uncompressed: Uint8Array): string {
  return crypto.ECDH.convertKey(Buffer.from(uncompressed), "prime256v1", undefined, "hex", "compressed") as string;
}

// Key objects are costly to build and stamps reuse a handful of keys, so a bounded cache pays off.
// Only keys that pass the checks their builder makes get in.
const keyObjectCache = new Map<string, crypto.KeyObject>();
const KEY_CACHE_LIMIT = 10_000;

function cached(id: string, build: () => crypto.KeyObject): crypto.KeyObject {
  let key = keyObjectCache.get(id);
  if (!key) {
    key = build();
    if (keyObjectCache.size >= KEY_CACHE_LIMIT) keyObjectCache.delete(keyObjectCache.keys().next().value!);
    keyObjectCache.set(id, key);
  }
  return key;
}

export function p256PublicKeyObject(compressedHex: string): crypto.KeyObject {
  return cached(`p256:${compressedHex}`, () => {
    const point = decompressP256(compressedHex);
    return crypto.createPublicKey({
      key: { kty: "EC", crv: "P-256", x: point.subarray(1, 33).toString("base64url"), y: point.subarray(33).toString("base64url") },
      format: "jwk",
    });
  });
}

/**
 * Why 32 bytes (hex) are not an Ed25519 public key that signatures may be verified with, or null.
 * RFC 8032 §5.1.3 decoding, strict (not ZIP-215's): y below p = 2^255 − 19 and no sign bit on x = 0,
 * so each point has one encoding. A point of small order (order 1, 2, 4 or 8: the identity, the points
 * with y = 0, …) is refused: OpenSSL's verification (cofactorless, as RFC 8032 allows) accepts the
 * signature R = identity, s = 0 for every message under the identity, and forgeries as cheap under the
 * other small-order points, so such a key would let anyone who reads it act as its holder. With
 * `primeOrder`, a point with a small-order component (P + T, whose cofactored and cofactorless
 * verifications can disagree) is refused too: no key made from a secret (a multiple of 8 times the
 * base point) has one. noble's arithmetic decides; nothing here is curve math of its own.
 */
function ed25519KeyProblem(hex: string, primeOrder: boolean): string | null {
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return "public key must be 32 bytes for ed25519 (hex)";
  try {
    ed25519.Point.fromHex(hex, true);
  } catch {
    return "public key is not a point on ed25519 (RFC 8032 §5.1.3 decoding fails)";
  }
  let point: InstanceType<typeof ed25519.Point>;
  try {
    point = ed25519.Point.fromHex(hex, false);
  } catch {
    return "public key is not the canonical encoding of its ed25519 point (y must be below 2^255 − 19, and x = 0 takes no sign bit)";
  }
  if (point.isSmallOrder())
    return "public key is an ed25519 point of small order (the identity or a point of order 2, 4 or 8), under which anyone can forge signatures";
  if (primeOrder && !point.isTorsionFree())
    return "public key is an ed25519 point outside the prime-order subgroup (it has a small-order component)";
  return null;
}

function ed25519PublicKeyObject(hex: string): crypto.KeyObject {
  return cached(`ed25519:${hex}`, () => {
    // Held to the rule where signatures are verified, not only where keys are registered: a stamp
    // names any key, and a database may hold rows no registration checked (older versions, by hand).
    const problem = ed25519KeyProblem(hex, false);
    if (problem) throw new Error(problem);
    return crypto.createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(hex, "hex").toString("base64url") }, format: "jwk" });
  });
}

const CURVE_NAMES: Record<ApiKeyCurve, string> = {
  API_KEY_CURVE_P256: "P-256",
  API_KEY_CURVE_SECP256K1: "secp256k1",
  API_KEY_CURVE_ED25519: "ed25519",
};

/** Why `hex` is not a compressed point of a short-Weierstrass curve (x below p, on the curve). Decoded
 * by OpenSSL (P-256) and libsecp256k1 (secp256k1, where it loads): every sign-up's API key passes
 * here, and @noble/curves' square root took ~0.1 ms of the event loop; a test holds both to noble's
 * answer on random and edge-case points. */
function compressedPointProblem(curve: "API_KEY_CURVE_P256" | "API_KEY_CURVE_SECP256K1", hex: string): string | null {
  const name = CURVE_NAMES[curve];
  if (hex.length !== 66 || !COMPRESSED_POINT.test(hex))
    return `public key must be 33 bytes for ${name}: a compressed point (02 or 03, then x), hex`;
  try {
    if (curve === "API_KEY_CURVE_P256") crypto.ECDH.convertKey(hex, "prime256v1", "hex", "hex", "uncompressed");
    else fastSecp256k1().convertPublicKey(Buffer.from(hex, "hex"), false);
    return null;
  } catch {
    return `public key is not a valid point on ${curve.replace("API_KEY_CURVE_", "")}`;
  }
}

/**
 * Checks that a public key is one a credential may hold: hex in the one encoding API keys use (a
 * compressed point for P-256 and secp256k1, 32 bytes for ed25519), a point of its curve, and for
 * ed25519 of prime order (ed25519KeyProblem). Every path that registers a key (API keys of users, of
 * sub-organizations' root users, bootstrap, invitations) asks this; stamps are held to the same
 * encodings and to ed25519's small-order rule when they are verified (stampKeyProblem).
 */
export function validatePublicKey(curve: ApiKeyCurve, hex: string): string | null {
  if (!isHex(hex)) return "public key must be hex";
  switch (curve) {
    case "API_KEY_CURVE_P256":
    case "API_KEY_CURVE_SECP256K1":
      return compressedPointProblem(curve, hex);
    case "API_KEY_CURVE_ED25519":
      return ed25519KeyProblem(hex, true);
    default:
      return `unknown curve ${String(curve)}`;
  }
}

/**
 * Why a stamp's public key cannot verify any signature, or null: the encodings and curve checks of
 * validatePublicKey, and for ed25519 the small-order rule, but not its subgroup rule (a key with a
 * small-order component gives its forger nothing: signing still takes the secret of its prime-order
 * part). Verification enforces exactly this; it is asked again only to say why a stamp failed.
 */
export function stampKeyProblem(curve: ApiKeyCurve, hex: string): string | null {
  if (curve === "API_KEY_CURVE_ED25519") return isHex(hex) ? ed25519KeyProblem(hex, false) : "public key must be hex";
  return validatePublicKey(curve, hex);
}

/** ECDSA P-256 / SHA-256 over `message`, signature DER. */
export function verifyP256Der(publicKeyHex: string, message: Uint8Array, derSignature: Uint8Array): boolean {
  return crypto.verify("sha256", message, { key: p256PublicKeyObject(publicKeyHex), dsaEncoding: "der" }, derSignature);
}

/**
 * verifyP256Der on a thread of libuv's pool (node:crypto's callback form), so the event loop goes on
 * meanwhile: a P-256 verification (~70 µs) was the largest single cost of a signed request on the
 * event loop, and the other core was mostly idle (docs/benchmarks.md#stamps-verified-off-the-event-loop).
 * Rejects what the synchronous form throws on (a key not on the curve, a signature that does not decode).
 */
export function verifyP256DerOffLoop(publicKeyHex: string, message: Uint8Array, derSignature: Uint8Array): Promise<boolean> {
  return verifyOnPool("sha256", message, { key: p256PublicKeyObject(publicKeyHex), dsaEncoding: "der" }, derSignature);
}

/** verifyEd25519 on a thread of libuv's pool, as verifyP256DerOffLoop. */
export function verifyEd25519OffLoop(publicKeyHex: string, message: Uint8Array, signature: Uint8Array): Promise<boolean> {
  return verifyOnPool(null, message, ed25519PublicKeyObject(publicKeyHex), signature);
}

/** crypto.verify in its callback form, which runs on libuv's pool, as a promise. */
function verifyOnPool(
  algorithm: string | null,
  message: Uint8Array,
  key: crypto.KeyObject | crypto.VerifyKeyObjectInput,
  signature: Uint8Array,
): Promise<boolean> {
  return new Promise((resolve, reject) =>
    crypto.verify(algorithm, message, key, signature, (error, valid) => (error ? reject(error) : resolve(valid))),
  );
}

/** ECDSA secp256k1 over SHA-256(message), signature DER. High-s signatures are accepted: stamps are
 * replay-protected by the body fingerprint, not by signature uniqueness. */
export function verifySecp256k1Der(publicKeyHex: string, message: Uint8Array, derSignature: Uint8Array): boolean {
  if (!COMPRESSED_POINT.test(publicKeyHex)) return false;
  return fastSecp256k1().verifyDer(derSignature, sha256(message), Buffer.from(publicKeyHex, "hex"));
}

/** ECDSA secp256k1 over the EIP-191 personal-message hash of `message` (Ethereum wallets), signature DER. */
export function verifySecp256k1Eip191Der(publicKeyHex: string, message: Uint8Array, derSignature: Uint8Array): boolean {
  if (!COMPRESSED_POINT.test(publicKeyHex)) return false;
  const prefix = Buffer.from(`\x19Ethereum Signed Message:\n${message.length}`, "utf8");
  const digest = keccak_256(Buffer.concat([prefix, message]));
  return fastSecp256k1().verifyDer(derSignature, digest, Buffer.from(publicKeyHex, "hex"));
}

export function verifyEd25519(publicKeyHex: string, message: Uint8Array, signature: Uint8Array): boolean {
  return crypto.verify(null, message, ed25519PublicKeyObject(publicKeyHex), signature);
}

/** A fresh P-256 key pair: compressed public key and raw private scalar, both hex. */
export function generateP256KeyPair(): { publicKey: string; privateKey: string } {
  const ecdh = crypto.createECDH("prime256v1");
  ecdh.generateKeys();
  return { publicKey: ecdh.getPublicKey("hex", "compressed"), privateKey: ecdh.getPrivateKey("hex").padStart(64, "0") };
}

export const sha256 = (data: Uint8Array | string) => crypto.createHash("sha256").update(data).digest();
