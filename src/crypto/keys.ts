// Public-key plumbing for the curves API keys and passkeys use. Signature math is node:crypto's
// (OpenSSL) for P-256 and Ed25519, and libsecp256k1's (or its fallbacks', see secp256k1.ts) for
// secp256k1; nothing here is hand-rolled.
import crypto from "node:crypto";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { secp256k1 as fastSecp256k1 } from "./secp256k1.js";

export type ApiKeyCurve = "API_KEY_CURVE_P256" | "API_KEY_CURVE_SECP256K1" | "API_KEY_CURVE_ED25519";

const HEX = /^[0-9a-fA-F]*$/;
export const isHex = (value: string) => value.length % 2 === 0 && HEX.test(value);

/** Uncompressed (04‖x‖y) P-256 point from a compressed one; throws when it is not on the curve. */
export function decompressP256(compressedHex: string): Buffer {
  return crypto.ECDH.convertKey(compressedHex, "prime256v1", "hex", undefined, "uncompressed") as Buffer;
}

export function compressP256(uncompressed: Uint8Array): string {
  return crypto.ECDH.convertKey(Buffer.from(uncompressed), "prime256v1", undefined, "hex", "compressed") as string;
}

// Key objects are costly to build and stamps reuse a handful of keys, so a bounded cache pays off.
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

function ed25519PublicKeyObject(hex: string): crypto.KeyObject {
  return cached(`ed25519:${hex}`, () =>
    crypto.createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(hex, "hex").toString("base64url") }, format: "jwk" }),
  );
}

/** Checks that a public key is well formed and on its curve, in the encoding API keys use. */
export function validatePublicKey(curve: ApiKeyCurve, hex: string): string | null {
  const lower = hex.toLowerCase();
  if (!isHex(lower)) return "public key must be hex";
  try {
    switch (curve) {
      case "API_KEY_CURVE_P256":
        if (lower.length !== 66) return "a P-256 public key must be 33 bytes (compressed point, hex)";
        decompressP256(lower);
        return null;
      case "API_KEY_CURVE_SECP256K1":
        if (lower.length !== 66) return "a secp256k1 public key must be 33 bytes (compressed point, hex)";
        secp256k1.Point.fromHex(lower);
        return null;
      case "API_KEY_CURVE_ED25519":
        if (lower.length !== 64) return "an ed25519 public key must be 32 bytes (hex)";
        ed25519PublicKeyObject(lower);
        return null;
    }
  } catch {
    return `public key is not a valid point on ${curve.replace("API_KEY_CURVE_", "")}`;
  }
}

/** ECDSA P-256 / SHA-256 over `message`, signature DER. */
export function verifyP256Der(publicKeyHex: string, message: Uint8Array, derSignature: Uint8Array): boolean {
  return crypto.verify("sha256", message, { key: p256PublicKeyObject(publicKeyHex), dsaEncoding: "der" }, derSignature);
}

/**
 * verifyP256Der on a thread of libuv's pool (node:crypto's callback form), so the event loop goes on
 * meanwhile: a P-256 verification (~70 µs) was the largest single cost of a signed request on the
 * event loop, and the other core was mostly idle (docs/benchmarks.md). Rejects what the synchronous
 * form throws on (a key not on the curve, a signature that does not decode).
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
  return fastSecp256k1().verifyDer(derSignature, sha256(message), Buffer.from(publicKeyHex, "hex"));
}

/** ECDSA secp256k1 over the EIP-191 personal-message hash of `message` (Ethereum wallets), signature DER. */
export function verifySecp256k1Eip191Der(publicKeyHex: string, message: Uint8Array, derSignature: Uint8Array): boolean {
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
