// A software WebAuthn authenticator: it makes registrations (attestation "none") and assertions the
// way a platform authenticator does, so passkey flows are tested without a browser.
import crypto from "node:crypto";
import { isoCBOR } from "@simplewebauthn/server/helpers";
import { compressP256 } from "../../src/crypto/keys.js";

export interface AssertionOptions {
  /** Clear the user-presence flag (a malformed or malicious authenticator). */
  withoutUserPresence?: boolean;
  /** Sign a different challenge than the request's. */
  challengeOverride?: string;
  origin?: string;
}

export class SoftwarePasskey {
  readonly credentialId = crypto.randomBytes(16);
  private readonly keyPair = crypto.generateKeyPairSync("ec", { namedCurve: "P-256" });
  private counter = 0;

  constructor(
    readonly rpId = "localhost",
    readonly origin = "http://localhost:3000",
  ) {}

  get credentialIdBase64url(): string {
    return this.credentialId.toString("base64url");
  }

  private rpIdHash(): Buffer {
    return crypto.createHash("sha256").update(this.rpId).digest();
  }

  private coseKey(point?: { x: Buffer; y: Buffer }): Uint8Array {
    const jwk = this.keyPair.publicKey.export({ format: "jwk" });
    return isoCBOR.encode(
      new Map<number, number | Uint8Array>([
        [1, 2], // kty: EC2
        [3, -7], // alg: ES256
        [-1, 1], // crv: P-256
        [-2, point?.x ?? Buffer.from(jwk.x!, "base64url")],
        [-3, point?.y ?? Buffer.from(jwk.y!, "base64url")],
      ]),
    );
  }

  /** The compressed P-256 public key the server is expected to store. */
  publicKeyCompressedHex(): string {
    const jwk = this.keyPair.publicKey.export({ format: "jwk" });
    const uncompressed = Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x!, "base64url"), Buffer.from(jwk.y!, "base64url")]);
    return compressP256(uncompressed);
  }

  /** A registration for `challenge` (base64url), in the v1Attestation shape of the API; `point`
   * puts other coordinates in its public key (a broken or malicious authenticator). */
  register(challenge = crypto.randomBytes(32).toString("base64url"), point?: { x: Buffer; y: Buffer }) {
    const clientDataJson = Buffer.from(JSON.stringify({ type: "webauthn.create", challenge, origin: this.origin, crossOrigin: false }));
    const flags = 0x01 | 0x04 | 0x40; // user present, user verified, attested credential data
    const authData = Buffer.concat([
      this.rpIdHash(),
      Buffer.from([flags]),
      Buffer.alloc(4), // sign count 0
      Buffer.alloc(16), // aaguid
      Buffer.from([this.credentialId.length >> 8, this.credentialId.length & 0xff]),
      this.credentialId,
      Buffer.from(this.coseKey(point)),
    ]);
    const attestationObject = Buffer.from(
      isoCBOR.encode(
        new Map<string, unknown>([
          ["fmt", "none"],
          ["attStmt", new Map()],
          ["authData", authData],
        ]) as any,
      ),
    );
    return {
      challenge,
      attestation: {
        credentialId: this.credentialIdBase64url,
        clientDataJson: clientDataJson.toString("base64url"),
        attestationObject: attestationObject.toString("base64url"),
        transports: ["AUTHENTICATOR_TRANSPORT_INTERNAL"],
      },
    };
  }

  /** Raw assertion parts over a challenge given as bytes (what navigator.credentials.get receives). */
  assert(challengeBytes: Uint8Array, options: AssertionOptions = {}) {
    const challenge = options.challengeOverride ?? Buffer.from(challengeBytes).toString("base64url");
    const clientDataJSON = Buffer.from(
      JSON.stringify({ type: "webauthn.get", challenge, origin: options.origin ?? this.origin, crossOrigin: false }),
    );
    this.counter += 1;
    const counter = Buffer.alloc(4);
    counter.writeUInt32BE(this.counter);
    const flags = options.withoutUserPresence ? 0x04 : 0x05;
    const authenticatorData = Buffer.concat([this.rpIdHash(), Buffer.from([flags]), counter]);
    const signed = Buffer.concat([authenticatorData, crypto.createHash("sha256").update(clientDataJSON).digest()]);
    const signature = crypto.sign("sha256", signed, { key: this.keyPair.privateKey, dsaEncoding: "der" });
    return { clientDataJSON, authenticatorData, signature };
  }

  /** The X-Stamp-Webauthn header for a request body, as @turnkey/webauthn-stamper produces it. */
  stamp(body: string, options: AssertionOptions = {}): string {
    const challenge = Buffer.from(crypto.createHash("sha256").update(body).digest("hex"), "utf8");
    const a = this.assert(challenge, options);
    return JSON.stringify({
      authenticatorData: a.authenticatorData.toString("base64url"),
      clientDataJson: a.clientDataJSON.toString("base64url"),
      credentialId: this.credentialIdBase64url,
      signature: a.signature.toString("base64url"),
    });
  }

  /**
   * Installs this authenticator as `navigator.credentials.get`, so the official WebauthnStamper
   * (which calls the browser API) runs unchanged in Node.
   */
  installAsNavigator(): () => void {
    const previous = Object.getOwnPropertyDescriptor(globalThis, "navigator");
    const toArrayBuffer = (b: Buffer) => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
    const get = async (options: { publicKey: { challenge: Uint8Array } }) => {
      const a = this.assert(options.publicKey.challenge);
      return {
        type: "public-key",
        id: this.credentialIdBase64url,
        rawId: toArrayBuffer(this.credentialId),
        authenticatorAttachment: "platform",
        response: {
          clientDataJSON: toArrayBuffer(a.clientDataJSON),
          authenticatorData: toArrayBuffer(a.authenticatorData),
          signature: toArrayBuffer(a.signature),
          userHandle: null,
        },
        getClientExtensionResults: () => ({}),
      };
    };
    Object.defineProperty(globalThis, "navigator", { value: { credentials: { get } }, configurable: true, writable: true });
    return () => {
      if (previous) Object.defineProperty(globalThis, "navigator", previous);
      else delete (globalThis as { navigator?: unknown }).navigator;
    };
  }
}
