// What one PKCS#11 round trip per secret would cost a signature (docs/hsm.md): Sigil unwraps the data
// key once at start and opens each sealed key in memory; the other design would ask the token to
// decrypt the signing key on every signature. Measured in one run, on one core, against the crypto
// ceiling of a sign_raw_payload (bench/ceiling.ts): an in-memory open (AES-256-GCM, node:crypto) and
// one AES-GCM decryption by SoftHSM2 through pkcs11js, each of a 32-byte key. SoftHSM2 is a library
// in this process: a network HSM adds its round trip (commonly a millisecond or more) to each call.
// Run: npm run build && node --import tsx bench/token-unseal.ts
import crypto from "node:crypto";
import { Keyring } from "../src/crypto/envelope.js";
import { TokenKey } from "../src/crypto/token-key.js";
import { createSoftToken } from "../test/helpers/softhsm.js";
import { measureCeiling } from "./ceiling.js";
import { measure } from "./measure.js";
import { loadSigner } from "./signers.js";

const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 5000);
const identity = { organizationId: "org", kind: "wallet_account.private_key", resourceId: "account" };

const softToken = createSoftToken("sigil-bench");
try {
  const signer = await loadSigner("native").catch(() => loadSigner("noble"));
  const ceiling = measureCeiling(signer, ITERATIONS);
  const keyring = new Keyring(crypto.randomBytes(32));
  const sealed = keyring.seal(crypto.randomBytes(32), identity);
  const inMemoryNs = measure("open a sealed key in memory (AES-256-GCM, node:crypto)", ITERATIONS, () => keyring.open(sealed, identity));
  const token = TokenKey.open(softToken.config);
  let tokenNs: number;
  try {
    const aad = Buffer.from("bench");
    const wrapped = token.wrap(crypto.randomBytes(32), aad);
    tokenNs = measure("open a key by the token (SoftHSM2 AES-GCM via pkcs11js)", ITERATIONS, () => token.unwrap(wrapped, aad));
  } finally {
    token.close();
  }
  const ceilingNs = ceiling.microsecondsPerRequest * 1000;
  const summary = {
    signer: ceiling.signer,
    ceilingMicroseconds: ceiling.microsecondsPerRequest,
    inMemoryOpenMicroseconds: Math.round(inMemoryNs / 10) / 100,
    tokenOpenMicroseconds: Math.round(tokenNs / 10) / 100,
    tokenOverInMemory: Math.round((tokenNs / inMemoryNs) * 10) / 10,
    inMemoryShareOfCeiling: Math.round((inMemoryNs / ceilingNs) * 1000) / 1000,
    tokenShareOfCeiling: Math.round((tokenNs / ceilingNs) * 1000) / 1000,
  };
  console.log(JSON.stringify(summary));
} finally {
  softToken.remove();
}
