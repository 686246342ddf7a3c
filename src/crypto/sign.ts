// Signatures with the service's keys: secp256k1 over a 32-byte digest with the recovery id
// (libsecp256k1 when it loads, see secp256k1.ts); P-256 likewise (@noble/curves); ed25519 over the
// message itself (node:crypto, OpenSSL); BIP-340 Schnorr by the key itself (Spark identity keys) or
// by its Taproot output key (@noble/curves). docs/cryptography.md says which library does what.
import crypto from "node:crypto";
import { schnorr } from "@noble/curves/secp256k1.js";
import { taprootTweakPrivKey } from "@scure/btc-signer/utils.js";
import { p256 } from "@noble/curves/nist.js";
import type { Curve } from "./hd.js";
import { secp256k1 } from "./secp256k1.js";

/** r, s and v as the API carries them: hex without 0x; v is the recovery id ("00" or "01"). */
export interface RawSignature {
  r: string;
  s: string;
  v: string;
}

/** Which library computes each kind of signature in this process, as `sigil info` and the start-up log
 * name them (docs/cryptography.md says why). */
export function signatureLibraries(): { secp256k1: string; ed25519: string; p256: string; bip340: string } {
  return { secp256k1: secp256k1().name, ed25519: "node:crypto (OpenSSL)", p256: "@noble/curves", bip340: "@noble/curves" };
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

export class SigningError extends Error {
  override name = "SigningError";
}

/** Signs a 32-byte digest (secp256k1 with low S, as Ethereum and Bitcoin require; or P-256). */
export function signDigest(curve: Exclude<Curve, "CURVE_ED25519">, privateKey: Uint8Array, digest: Uint8Array): RawSignature {
  if (digest.length !== 32)
    throw new SigningError(
      `a ${curve} signature is over a 32-byte digest, got ${digest.length} bytes: hash the payload (hashFunction) or send its 32-byte hash`,
    );
  if (curve === "CURVE_SECP256K1") {
    const { signature, recovery } = secp256k1().sign(digest, privateKey);
    return { r: hex(signature.subarray(0, 32)), s: hex(signature.subarray(32, 64)), v: recovery.toString(16).padStart(2, "0") };
  }
  // P-256 stays with noble: OpenSSL (node:crypto) would sign with a random nonce and give no recovery
  // id, so the same request would get a different signature each time and no v; P-256 wallet
  // signatures are rare besides (stamps are verified with OpenSSL, see keys.ts).
  const recovered = p256.sign(digest, privateKey, { prehash: false, format: "recovered" });
  return { r: hex(recovered.subarray(1, 33)), s: hex(recovered.subarray(33, 65)), v: recovered[0]!.toString(16).padStart(2, "0") };
}

/** Signs a message with ed25519 (which hashes internally): r and s are the two 32-byte halves.
 * RFC 8032 signatures are deterministic: OpenSSL gives the bytes @noble/curves gave (a test holds
 * them to that on thousands of keys), about 10x faster. */
export function signEd25519(privateKey: Uint8Array, message: Uint8Array): RawSignature {
  if (privateKey.length !== 32) throw new SigningError(`an ed25519 private key is 32 bytes, got ${privateKey.length}`);
  // A JWK, not PKCS#8 DER: OpenSSL 3 decodes DER keys through its slow decoder framework (~450 µs a
  // key here, against ~35 µs). Node reads only `d` of a private OKP JWK and derives the public key
  // itself, but wants `x` to be a string: the empty one says we have none.
  const key = crypto.createPrivateKey({
    key: { kty: "OKP", crv: "Ed25519", d: Buffer.from(privateKey.buffer, privateKey.byteOffset, 32).toString("base64url"), x: "" },
    format: "jwk",
  });
  const signature = crypto.sign(null, message, key);
  return { r: hex(signature.subarray(0, 32)), s: hex(signature.subarray(32)), v: "00" };
}

/**
 * Signs a 32-byte digest with plain BIP-340 Schnorr by the key itself, no Taproot tweak: what the
 * product signs with when signWith is a Spark address (spark.mdx, "Signing configurations"). r and s
 * are the signature's two 32-byte halves; v is "00", there being no recovery id.
 */
export function signSchnorr(privateKey: Uint8Array, digest: Uint8Array): RawSignature {
  if (digest.length !== 32) {
    throw new SigningError(
      `a BIP-340 Schnorr signature is over a 32-byte digest, got ${digest.length} bytes: hash the payload (hashFunction) or send its 32-byte hash`,
    );
  }
  // Fresh auxiliary randomness, as in signTaprootKeyPath.
  const signature = schnorr.sign(digest, privateKey);
  return { r: hex(signature.subarray(0, 32)), s: hex(signature.subarray(32)), v: "00" };
}

/**
 * Signs a 32-byte digest (a BIP-341 sighash) with BIP-340 Schnorr by the key a P2TR address commits
 * to: the BIP-86 output key, i.e. the account's key tweaked with TapTweak(x(P)) and no script tree,
 * which is what the product signs with when signWith is a P2TR address and what a key-path spend
 * verifies against. r and s are the signature's two 32-byte halves (r || s is the 64-byte witness
 * signature for SIGHASH_DEFAULT); v is "00", there being no recovery id.
 */
export function signTaprootKeyPath(internalPrivateKey: Uint8Array, digest: Uint8Array): RawSignature {
  if (digest.length !== 32) {
    throw new SigningError(
      `a Taproot (BIP-340) signature is over a 32-byte sighash, got ${digest.length} bytes: send the sighash with HASH_FUNCTION_NO_OP`,
    );
  }
  const outputPrivateKey = taprootTweakPrivKey(internalPrivateKey);
  try {
    // noble's default auxiliary randomness (32 fresh random bytes), as BIP-340 recommends: the nonce
    // stays bound to key and message, and the fresh bytes blunt side-channel and fault attacks.
    const signature = schnorr.sign(digest, outputPrivateKey);
    return { r: hex(signature.subarray(0, 32)), s: hex(signature.subarray(32)), v: "00" };
  } finally {
    outputPrivateKey.fill(0);
  }
}
