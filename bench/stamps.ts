// Stamp verification: our path (node:crypto, cached key object) against a pure-JS reference.
import crypto from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import { parseApiKeyStamp, verifyApiKeyStampInline } from "../src/auth/stamps.js";
import { decompressP256, generateP256KeyPair } from "../src/crypto/keys.js";

import { measure } from "./measure.js";

const key = generateP256KeyPair();
const body = Buffer.from(
  JSON.stringify({
    organizationId: crypto.randomUUID(),
    parameters: { users: [] },
    timestampMs: String(Date.now()),
    type: "ACTIVITY_TYPE_CREATE_USERS_V4",
  }),
);
const privateKey = crypto.createPrivateKey({
  key: { kty: "EC", crv: "P-256", d: Buffer.from(key.privateKey, "hex").toString("base64url"), ...xy(key.publicKey) },
  format: "jwk",
});
const signature = crypto.sign("sha256", body, { key: privateKey, dsaEncoding: "der" });
const header = Buffer.from(
  JSON.stringify({ publicKey: key.publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256", signature: signature.toString("hex") }),
).toString("base64url");

export const stampVerification = measure("X-Stamp parse + verify (node:crypto)", 5000, () => {
  if (!verifyApiKeyStampInline(parseApiKeyStamp(header), body)) throw new Error("stamp did not verify");
});
const reference = measure("P-256 verify, pure JS reference (@noble/curves)", 1000, () => {
  if (!p256.verify(signature, body, Buffer.from(key.publicKey, "hex"), { format: "der", lowS: false }))
    throw new Error("reference did not verify");
});
console.log(`stamp verification is ${(reference / stampVerification).toFixed(1)}x faster than the pure-JS reference\n`);

function xy(compressedHex: string) {
  const point = decompressP256(compressedHex);
  return { x: point.subarray(1, 33).toString("base64url"), y: point.subarray(33).toString("base64url") };
}
