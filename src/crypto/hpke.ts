// Encryption to a key the client holds (RFC 9180 HPKE, through @hpke/core): base mode,
// DHKEM(P-256, HKDF-SHA256), HKDF-SHA256, AES-256-GCM, info "turnkey_hpke", and — the product's
// choice — the encapsulated key followed by the receiver's key (both uncompressed) as the AAD. One
// message per encapsulation. This is how exported keys leave the service and imported ones arrive.
import { CipherSuite, DhkemP256HkdfSha256, HkdfSha256, Aes256Gcm } from "@hpke/core";
import { p256 } from "@noble/curves/nist.js";

const INFO = new TextEncoder().encode("turnkey_hpke");
const suite = new CipherSuite({ kem: new DhkemP256HkdfSha256(), kdf: new HkdfSha256(), aead: new Aes256Gcm() });

export class HpkeError extends Error {
  override name = "HpkeError";
}

/** A P-256 public key as 65 uncompressed bytes, from compressed or uncompressed hex. */
export function uncompressedP256(publicKeyHex: string, field: string): Uint8Array {
  const hex = publicKeyHex.startsWith("0x") ? publicKeyHex.slice(2) : publicKeyHex;
  if (!/^(0[23][0-9a-fA-F]{64}|04[0-9a-fA-F]{128})$/.test(hex))
    throw new HpkeError(`${field} must be a P-256 public key in hex (65 bytes uncompressed, 04…, or 33 bytes compressed)`);
  try {
    return p256.Point.fromHex(hex.toLowerCase()).toBytes(false);
  } catch {
    throw new HpkeError(`${field} is not a point on P-256`);
  }
}

export interface Sealed {
  /** The encapsulated key, 65 bytes uncompressed, hex. */
  encappedPublic: string;
  /** AES-256-GCM ciphertext with its tag, hex. */
  ciphertext: string;
}

const concat = (a: Uint8Array, b: Uint8Array) => {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
};

/** Encrypts `plaintext` to the holder of `receiverPublicKey` (uncompressed, 65 bytes). */
export async function sealTo(receiverPublicKey: Uint8Array, plaintext: Uint8Array): Promise<Sealed> {
  const recipientPublicKey = await suite.kem.deserializePublicKey(receiverPublicKey);
  const sender = await suite.createSenderContext({ recipientPublicKey, info: INFO });
  const enc = new Uint8Array(sender.enc);
  const ciphertext = new Uint8Array(await sender.seal(plaintext, concat(enc, receiverPublicKey)));
  return { encappedPublic: Buffer.from(enc).toString("hex"), ciphertext: Buffer.from(ciphertext).toString("hex") };
}

/** Decrypts a message sealed to our key pair (private scalar, uncompressed public key). */
export async function openWith(privateKey: Uint8Array, publicKey: Uint8Array, sealed: Sealed): Promise<Uint8Array> {
  let enc: Uint8Array;
  try {
    enc = uncompressedP256(sealed.encappedPublic, "encappedPublic");
  } catch (error) {
    throw new HpkeError((error as Error).message);
  }
  if (!/^([0-9a-fA-F]{2})+$/.test(sealed.ciphertext)) throw new HpkeError("ciphertext must be hex");
  try {
    const recipientKey = await suite.kem.deserializePrivateKey(privateKey);
    const recipient = await suite.createRecipientContext({ recipientKey, enc, info: INFO });
    return new Uint8Array(await recipient.open(Buffer.from(sealed.ciphertext, "hex"), concat(enc, publicKey)));
  } catch {
    throw new HpkeError("the bundle does not decrypt with this target key (corrupted, or encrypted to another key)");
  }
}
