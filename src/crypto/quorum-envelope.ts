// Messages encrypted to a quorum key the way the product's enclaves receive them (QOS's P-256
// encryption, which @turnkey/crypto's encryptToEnclave / encryptOauth2ClientSecret produce): an
// ephemeral P-256 key agrees a secret with the receiver (ECDH, the shared point's x), HMAC-SHA512
// keyed by ephemeral public ‖ receiver public ‖ x over the label "qos_encryption_hmac_message" gives
// the AES-256-GCM key (its first 32 bytes), and the AAD binds both public keys with their lengths.
// The envelope is Borsh: a 12-byte nonce, the 65-byte ephemeral key, then a u32 (little-endian)
// length and the ciphertext with its tag: three fixed fields, read here rather than through the
// `borsh` package (not otherwise a dependency). Only opening is needed; the primitives are node:crypto's.
import crypto from "node:crypto";

const NONCE_BYTES = 12;
const PUBLIC_KEY_BYTES = 65;
const TAG_BYTES = 16;
const HMAC_LABEL = Buffer.from("qos_encryption_hmac_message", "utf8");

export class QuorumEnvelopeError extends Error {
  override name = "QuorumEnvelopeError";
}

interface Envelope {
  nonce: Buffer;
  ephemeralPublic: Buffer;
  ciphertext: Buffer;
}

function parseEnvelope(bytes: Buffer): Envelope {
  const header = NONCE_BYTES + PUBLIC_KEY_BYTES + 4;
  if (bytes.length < header + TAG_BYTES) throw new QuorumEnvelopeError("too short to be an encrypted envelope");
  const length = bytes.readUInt32LE(NONCE_BYTES + PUBLIC_KEY_BYTES);
  if (bytes.length !== header + length) throw new QuorumEnvelopeError("its length field does not match its size");
  return {
    nonce: bytes.subarray(0, NONCE_BYTES),
    ephemeralPublic: bytes.subarray(NONCE_BYTES, NONCE_BYTES + PUBLIC_KEY_BYTES),
    ciphertext: bytes.subarray(header),
  };
}

const withLength = (key: Buffer) => Buffer.concat([key, Buffer.of(key.length)]);

/**
 * Opens an envelope (hex, as encryptOauth2ClientSecret returns it) encrypted to the key pair whose
 * private half is `receiver` and whose uncompressed public key is `receiverPublic`. Throws
 * QuorumEnvelopeError when it is not such an envelope or was encrypted to another key.
 */
export function openQuorumEnvelope(receiver: crypto.KeyObject, receiverPublic: Buffer, envelopeHex: string): Buffer {
  const hex = envelopeHex.startsWith("0x") ? envelopeHex.slice(2) : envelopeHex;
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) throw new QuorumEnvelopeError("it is not hex");
  const envelope = parseEnvelope(Buffer.from(hex, "hex"));
  let shared: Buffer;
  try {
    const ephemeral = crypto.createPublicKey({
      key: {
        kty: "EC",
        crv: "P-256",
        x: envelope.ephemeralPublic.subarray(1, 33).toString("base64url"),
        y: envelope.ephemeralPublic.subarray(33).toString("base64url"),
      },
      format: "jwk",
    });
    if (envelope.ephemeralPublic[0] !== 4) throw new Error("not uncompressed");
    shared = crypto.diffieHellman({ privateKey: receiver, publicKey: ephemeral });
  } catch {
    throw new QuorumEnvelopeError("its ephemeral key is not a P-256 point");
  }
  const mac = crypto
    .createHmac("sha512", Buffer.concat([envelope.ephemeralPublic, receiverPublic, shared]))
    .update(HMAC_LABEL)
    .digest();
  shared.fill(0);
  const key = mac.subarray(0, 32);
  try {
    const decipher = crypto.createDecipheriv("aes-256-gcm", key, envelope.nonce);
    decipher.setAAD(Buffer.concat([withLength(envelope.ephemeralPublic), withLength(receiverPublic)]));
    decipher.setAuthTag(envelope.ciphertext.subarray(envelope.ciphertext.length - TAG_BYTES));
    return Buffer.concat([decipher.update(envelope.ciphertext.subarray(0, envelope.ciphertext.length - TAG_BYTES)), decipher.final()]);
  } catch {
    throw new QuorumEnvelopeError("it does not decrypt with this key (encrypted to another key, or altered)");
  } finally {
    mac.fill(0);
  }
}
