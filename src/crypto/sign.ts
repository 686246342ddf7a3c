// Signatures with the service's keys (@noble/curves): secp256k1 and P-256 over a 32-byte digest,
// with the recovery id; ed25519 over the message itself; BIP-340 Schnorr by the key itself (Spark
// identity keys) or by its Taproot output key.
import { schnorr, secp256k1 } from "@noble/curves/secp256k1.js";
import { taprootTweakPrivKey } from "@scure/btc-signer/utils.js";
import { p256 } from "@noble/curves/nist.js";
import { ed25519 } from "@noble/curves/ed25519.js";
import type { Curve } from "./hd.js";

/** r, s and v as the API carries them: hex without 0x; v is the recovery id ("00" or "01"). */
export interface RawSignature {
  r: string;
  s: string;
  v: string;
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
  const recovered = (curve === "CURVE_SECP256K1" ? secp256k1 : p256).sign(digest, privateKey, { prehash: false, format: "recovered" });
  return { r: hex(recovered.subarray(1, 33)), s: hex(recovered.subarray(33, 65)), v: recovered[0]!.toString(16).padStart(2, "0") };
}

/** Signs a message with ed25519 (which hashes internally): r and s are the two 32-byte halves. */
export function signEd25519(privateKey: Uint8Array, message: Uint8Array): RawSignature {
  const signature = ed25519.sign(message, privateKey);
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
