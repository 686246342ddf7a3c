// The crypto ceiling: the work no server can avoid for one sign_raw_payload request, in this
// process on one core — verify the request's P-256 stamp (node:crypto, as Sigil does), keccak-256
// the payload, one secp256k1 signature with its recovery id — with the fastest signer this machine
// has, not the one Sigil happens to use.
import crypto from "node:crypto";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { parseApiKeyStamp, verifyApiKeyStampInline } from "../src/auth/stamps.js";
import { apiKey, signRawPayloadParameters, stamp } from "./generator.js";
import { measure } from "./measure.js";
import { availableSigners, type RecoverableSigner, type SignerName } from "./signers.js";

export interface Ceiling {
  signer: SignerName;
  microsecondsPerRequest: number;
  singleCoreRequestsPerSecond: number;
}

/** A stamped sign_raw_payload body like the ones the generator sends, and a key to sign with. */
function sample() {
  const key = apiKey();
  const body = JSON.stringify({
    type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
    organizationId: crypto.randomUUID(),
    timestampMs: String(Date.now()),
    parameters: signRawPayloadParameters(`0x${"ab".repeat(20)}`, 1),
  });
  return { header: stamp(body, key), body: Buffer.from(body), payload: Buffer.from(signRawPayloadParameters("", 1).payload, "hex") };
}

export function measureCeiling(signer: RecoverableSigner, iterations = 2000): Ceiling {
  const { header, body, payload } = sample();
  const secret = secp256k1.utils.randomSecretKey();
  const nsPerOp = measure(`ceiling (${signer.name}): stamp verify + keccak + secp256k1 signature`, iterations, () => {
    if (!verifyApiKeyStampInline(parseApiKeyStamp(header), body)) throw new Error("stamp did not verify");
    signer.sign(keccak_256(payload), secret);
  });
  return {
    signer: signer.name,
    microsecondsPerRequest: Math.round(nsPerOp / 10) / 100,
    singleCoreRequestsPerSecond: Math.round(1e9 / nsPerOp),
  };
}

/**
 * Measures the signature alone and the whole ceiling with every signer that loads here, and picks
 * the fastest (by the whole ceiling). The slow pure-JS signer gets fewer iterations.
 */
export async function compareSigners() {
  const { signers, unavailable } = await availableSigners();
  const digest = keccak_256(Buffer.from("compare"));
  const secret = secp256k1.utils.randomSecretKey();
  const bySigner: Record<string, { library: string; signatureMicroseconds: number } & Ceiling> = {};
  let fastest: { signer: RecoverableSigner; ceiling: Ceiling } | undefined;
  for (const signer of signers) {
    const iterations = signer.name === "noble" ? 500 : 2000;
    const signatureNs = measure(`secp256k1 signature with recovery id (${signer.name})`, iterations, () => signer.sign(digest, secret));
    const ceiling = measureCeiling(signer, iterations);
    bySigner[signer.name] = { library: signer.library, signatureMicroseconds: Math.round(signatureNs / 10) / 100, ...ceiling };
    if (!fastest || ceiling.microsecondsPerRequest < fastest.ceiling.microsecondsPerRequest) fastest = { signer, ceiling };
  }
  if (!fastest) throw new Error(`no secp256k1 signer loads here: ${JSON.stringify(unavailable)}`);
  console.log(`fastest signer here: ${fastest.signer.library}\n`);
  return { fastest, bySigner, unavailable };
}
