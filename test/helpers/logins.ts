// What the login suites share: opening a credential bundle as a client does, and reading the error
// of a request that must fail.
import { decryptCredentialBundle, getPublicKey } from "@turnkey/crypto";

/** The API key pair a credential bundle carries, rebuilt as a client would from the decrypted key. */
export function keyFromBundle(credentialBundle: string, target: { privateKey: string }) {
  const privateKey = decryptCredentialBundle(credentialBundle, target.privateKey);
  return { privateKey, publicKey: Buffer.from(getPublicKey(Buffer.from(privateKey, "hex"), true)).toString("hex") };
}

/** The message a request that must fail was refused with (fails the test if it succeeded). */
export async function errorOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return String((error as Error).message ?? error);
  }
  throw new Error("expected the request to fail");
}
