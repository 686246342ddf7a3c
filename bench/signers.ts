// The secp256k1 signers (with recovery id) this machine may have, for the references the bench
// compares Sigil with: libsecp256k1 through its N-API binding, the same library built to WASM
// (tiny-secp256k1), and pure JS (@noble/curves). All three give the same RFC 6979 signature.
import { createRequire } from "node:module";
import { secp256k1 } from "@noble/curves/secp256k1.js";

export const SIGNER_NAMES = ["native", "wasm", "noble"] as const;
export type SignerName = (typeof SIGNER_NAMES)[number];

export interface RecoverableSigner {
  name: SignerName;
  library: string;
  /** A low-S signature over a 32-byte digest: r ‖ s (64 bytes) and the recovery id. */
  sign(digest: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recoveryId: number };
}

const require = createRequire(import.meta.url);

/** Loads one signer; throws, saying why, when this machine cannot run it. */
export async function loadSigner(name: SignerName): Promise<RecoverableSigner> {
  switch (name) {
    case "native": {
      // `secp256k1/bindings` throws when the addon cannot load; plain `secp256k1` would fall back to
      // its slow JS build without a word, and be measured under the wrong name.
      const native = require("secp256k1/bindings") as {
        ecdsaSign(digest: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recid: number };
      };
      return {
        name,
        library: "libsecp256k1, N-API binding (secp256k1/bindings)",
        sign: (digest, privateKey) => {
          const { signature, recid } = native.ecdsaSign(digest, privateKey);
          return { signature, recoveryId: recid };
        },
      };
    }
    case "wasm": {
      const wasm = await import("tiny-secp256k1");
      return {
        name,
        library: "libsecp256k1, WASM (tiny-secp256k1)",
        sign: (digest, privateKey) => wasm.signRecoverable(digest, privateKey),
      };
    }
    case "noble":
      return {
        name,
        library: "pure JS (@noble/curves)",
        sign: (digest, privateKey) => {
          const recovered = secp256k1.sign(digest, privateKey, { prehash: false, format: "recovered" });
          return { signature: recovered.subarray(1), recoveryId: recovered[0]! };
        },
      };
  }
}

/** Every signer that loads here, and why each other one does not. */
export async function availableSigners(): Promise<{ signers: RecoverableSigner[]; unavailable: Partial<Record<SignerName, string>> }> {
  const signers: RecoverableSigner[] = [];
  const unavailable: Partial<Record<SignerName, string>> = {};
  for (const name of SIGNER_NAMES) {
    try {
      signers.push(await loadSigner(name));
    } catch (error) {
      unavailable[name] = (error as Error).message.split("\n")[0]!;
    }
  }
  return { signers, unavailable };
}
