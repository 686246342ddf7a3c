// The secp256k1 signers (with recovery id) this machine may have, for the references the bench
// compares Sigil with: libsecp256k1 through its N-API binding, the same library built to WASM
// (tiny-secp256k1), and pure JS (@noble/curves). They are Sigil's own loaders (src/crypto/secp256k1.ts,
// which refuse to pass one library off as another), each loaded explicitly: the ceiling is the fastest
// one here, whichever the server happens to use. All three give the same RFC 6979 signature.
import { loadSecp256k1, SECP256K1_CHOICES, type Secp256k1Choice } from "../src/crypto/secp256k1.js";

export const SIGNER_NAMES = SECP256K1_CHOICES;
export type SignerName = Secp256k1Choice;

export interface RecoverableSigner {
  name: SignerName;
  library: string;
  /** A low-S signature over a 32-byte digest: r ‖ s (64 bytes) and the recovery id. */
  sign(digest: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recoveryId: number };
}

/** Loads one signer; throws, saying why, when this machine cannot run it. */
export async function loadSigner(name: SignerName): Promise<RecoverableSigner> {
  const library = loadSecp256k1(name);
  return {
    name,
    library: library.name,
    sign: (digest, privateKey) => {
      const { signature, recovery } = library.sign(digest, privateKey);
      return { signature, recoveryId: recovery };
    },
  };
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
