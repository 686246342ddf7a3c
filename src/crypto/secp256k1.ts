// secp256k1 ECDSA (signatures with recovery id, verification, public keys), by the fastest library
// that loads here, chosen once per process:
//   1. libsecp256k1, native (the `secp256k1` N-API binding): Bitcoin Core's constant-time library,
//      about 10x @noble/curves' signing speed on this hardware;
//   2. libsecp256k1 compiled to WebAssembly (`tiny-secp256k1`): the same C code, about 4x noble's
//      speed, for platforms with no prebuilt binary and no compiler;
//   3. @noble/curves (pure JavaScript): always there.
// All three give the same bytes: RFC 6979 deterministic nonces, low S, the same recovery id (a test
// holds them to that on thousands of random keys). SIGIL_SECP256K1 (native, wasm, noble) forces one
// (config.ts reads it; the server chooses at start).
import { createRequire } from "node:module";
import { secp256k1 as noble } from "@noble/curves/secp256k1.js";
import { bytesToNumberBE } from "@noble/curves/utils.js";

export type Secp256k1Choice = "native" | "wasm" | "noble";
export const SECP256K1_CHOICES: readonly Secp256k1Choice[] = ["native", "wasm", "noble"];

export const SECP256K1_NAMES: Record<Secp256k1Choice, string> = {
  native: "libsecp256k1 (native)",
  wasm: "libsecp256k1 (wasm)",
  noble: "@noble/curves",
};

export interface Secp256k1 {
  choice: Secp256k1Choice;
  /** What `sigil info` and the start-up log call it. */
  name: string;
  /** ECDSA over a 32-byte digest: RFC 6979 nonce, low S; r‖s (64 bytes) and the recovery id (0 or 1). */
  sign(digest: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recovery: number };
  /** ECDSA verification of a DER signature over a 32-byte digest; a high-S signature is accepted as its
   * low-S twin, and anything malformed (signature, key) is simply not valid. */
  verifyDer(derSignature: Uint8Array, digest: Uint8Array, publicKey: Uint8Array): boolean;
  /** The public key of a valid private key: 33-byte compressed point (65-byte uncompressed if asked). */
  publicKey(privateKey: Uint8Array, compressed?: boolean): Uint8Array;
  /** A SEC 1 public key (33 or 65 bytes) in the form asked; throws when it is not a point of the curve. */
  convertPublicKey(publicKey: Uint8Array, compressed: boolean): Uint8Array;
  /** (privateKey + tweak) mod n as a new 32-byte key, for BIP-32's child keys; undefined when the tweak
   * is not below n or the sum is zero (BIP-32: that child does not exist). Absent where the library
   * is pure JavaScript: HD derivation then goes through @scure/bip32 (crypto/hd.ts). */
  privateKeyTweakAdd?(privateKey: Uint8Array, tweak: Uint8Array): Uint8Array | undefined;
}

// A public key as API keys and accounts carry it: SEC 1 compressed or uncompressed. libsecp256k1 also
// parses the "hybrid" 0x06/0x07 form, which noble refuses; refused here so every choice agrees.
const isSec1PublicKey = (key: Uint8Array) => (key.length === 33 && (key[0] === 2 || key[0] === 3)) || (key.length === 65 && key[0] === 4);

const require = createRequire(import.meta.url);

const ORDER = Buffer.from(noble.Point.Fn.toBytes(noble.Point.CURVE().n - 1n)).map((b, i) => (i === 31 ? b + 1 : b));

/** The digest reduced mod n, as RFC 6979 feeds it to the nonce (bits2octets). A hash is below n but
 * for odds of 2^-128; a caller of sign_raw_payload with HASH_FUNCTION_NO_OP may send any 32 bytes. */
function reducedDigest(digest: Uint8Array): Uint8Array {
  if (Buffer.compare(digest, ORDER) < 0) return digest;
  return noble.Point.Fn.toBytes(noble.Point.Fn.create(bytesToNumberBE(digest)));
}

function loadNative(): Secp256k1 {
  // The bindings entry, never the package's main one: that one falls back, silently, to `elliptic`
  // (pure JS, slower than noble) when the addon does not load; this one throws, and we say why.
  const lib = require("secp256k1/bindings") as typeof import("secp256k1");
  return {
    choice: "native",
    name: SECP256K1_NAMES.native,
    sign(digest, privateKey) {
      // The libsecp256k1 in this binding hands its RFC 6979 nonce function the digest unreduced; RFC
      // 6979, noble and the WASM build's newer libsecp256k1 reduce it mod n first. The signature is
      // valid either way, but for a digest >= n the bytes would differ: reduced here, they do not.
      const { signature, recid } = lib.ecdsaSign(reducedDigest(digest), privateKey);
      return { signature, recovery: recid };
    },
    verifyDer(derSignature, digest, publicKey) {
      if (!isSec1PublicKey(publicKey)) return false;
      try {
        // libsecp256k1's DER parser; its verify takes low S only, so a high-S signature is normalized first.
        const compact = lib.signatureNormalize(lib.signatureImport(derSignature));
        return lib.ecdsaVerify(compact, digest, publicKey);
      } catch {
        return false;
      }
    },
    publicKey: (privateKey, compressed = true) => lib.publicKeyCreate(privateKey, compressed),
    convertPublicKey(publicKey, compressed) {
      if (!isSec1PublicKey(publicKey)) throw new Error("not a SEC 1 public key");
      return lib.publicKeyConvert(publicKey, compressed);
    },
    privateKeyTweakAdd(privateKey, tweak) {
      // The binding adds in place: on a copy, so the parent key stays as it was.
      const child = Uint8Array.from(privateKey);
      try {
        return lib.privateKeyTweakAdd(child, tweak);
      } catch {
        child.fill(0);
        return undefined;
      }
    },
  };
}

function loadWasm(): Secp256k1 {
  // The package's CommonJS build compiles the WebAssembly module synchronously on load.
  const lib = require("tiny-secp256k1") as typeof import("tiny-secp256k1");
  return {
    choice: "wasm",
    name: SECP256K1_NAMES.wasm,
    sign(digest, privateKey) {
      const { signature, recoveryId } = lib.signRecoverable(digest, privateKey);
      return { signature, recovery: recoveryId };
    },
    verifyDer(derSignature, digest, publicKey) {
      if (!isSec1PublicKey(publicKey)) return false;
      try {
        // tiny-secp256k1 has no DER parser: noble's (the one every stamp went through before).
        // Its verify, not strict, accepts high S (it normalizes).
        const compact = noble.Signature.fromBytes(derSignature, "der").toBytes("compact");
        return lib.verify(digest, publicKey, compact, false);
      } catch {
        return false;
      }
    },
    publicKey(privateKey, compressed = true) {
      const point = lib.pointFromScalar(privateKey, compressed);
      if (!point) throw new Error("private key is not a valid secp256k1 scalar");
      return point;
    },
    convertPublicKey(publicKey, compressed) {
      if (!isSec1PublicKey(publicKey)) throw new Error("not a SEC 1 public key");
      const point = lib.pointCompress(publicKey, compressed);
      if (!lib.isPoint(point)) throw new Error("not a point of the curve");
      return point;
    },
    privateKeyTweakAdd(privateKey, tweak) {
      // Throws on a tweak not below n, answers null on a zero sum: both mean no child here.
      try {
        return lib.privateAdd(privateKey, tweak) ?? undefined;
      } catch {
        return undefined;
      }
    },
  };
}

function loadNoble(): Secp256k1 {
  return {
    choice: "noble",
    name: SECP256K1_NAMES.noble,
    sign(digest, privateKey) {
      const recovered = noble.sign(digest, privateKey, { prehash: false, format: "recovered" });
      return { signature: recovered.subarray(1), recovery: recovered[0]! };
    },
    verifyDer(derSignature, digest, publicKey) {
      if (!isSec1PublicKey(publicKey)) return false;
      try {
        return noble.verify(derSignature, digest, publicKey, { format: "der", lowS: false, prehash: false });
      } catch {
        return false;
      }
    },
    publicKey: (privateKey, compressed = true) => noble.getPublicKey(privateKey, compressed),
    convertPublicKey: (publicKey, compressed) => noble.Point.fromBytes(publicKey).toBytes(compressed),
  };
}

const LOADERS: Record<Secp256k1Choice, () => Secp256k1> = { native: loadNative, wasm: loadWasm, noble: loadNoble };

/** One implementation by name; throws (saying why) when it cannot load here. For tests and benchmarks
 * that compare them; the service uses secp256k1(). */
export function loadSecp256k1(choice: Secp256k1Choice): Secp256k1 {
  const load = LOADERS[choice];
  if (!load) throw new Error(`unknown secp256k1 implementation ${JSON.stringify(choice)}: use one of ${SECP256K1_CHOICES.join(", ")}`);
  try {
    return load();
  } catch (error) {
    throw new Error(`${SECP256K1_NAMES[choice]} did not load: ${error instanceof Error ? error.message.split("\n")[0] : String(error)}`);
  }
}

export interface Secp256k1Selection {
  implementation: Secp256k1;
  /** Why each faster implementation was passed over, in order; empty when the first choice loaded. */
  fallbacks: string[];
  /** Forced by SIGIL_SECP256K1 (or the caller) rather than the fastest that loaded. */
  forced: boolean;
}

let selection: Secp256k1Selection | undefined;

/**
 * Chooses the implementation now: `choice` forces one (and throws when it cannot load, so a forced
 * choice never silently becomes another); without it, the fastest that loads. Called at start with
 * the configured choice; a later call replaces the choice (tests compare them in one process).
 */
export function selectSecp256k1(choice?: Secp256k1Choice | null): Secp256k1Selection {
  if (choice) {
    selection = { implementation: loadSecp256k1(choice), fallbacks: [], forced: true };
    return selection;
  }
  const fallbacks: string[] = [];
  for (const candidate of SECP256K1_CHOICES) {
    try {
      selection = { implementation: loadSecp256k1(candidate), fallbacks, forced: false };
      return selection;
    } catch (error) {
      if (candidate === "noble") throw error;
      fallbacks.push((error as Error).message);
    }
  }
  throw new Error("unreachable: @noble/curves always loads");
}

/** The choice made so far; on first use, when nothing chose yet (a script, a test), the fastest that
 * loads. The server and `sigil info` choose from the configuration (SIGIL_SECP256K1); a signature
 * thread, as the process that started it chose. */
export function secp256k1Selection(): Secp256k1Selection {
  return selection ?? selectSecp256k1();
}

/** The implementation in use. */
export const secp256k1 = (): Secp256k1 => secp256k1Selection().implementation;
