// Every request the console makes goes to the public API and is stamped here, in the browser, as the
// official clients stamp: X-Stamp with an API key (WebCrypto P-256), or X-Stamp-Webauthn with one
// passkey assertion per request (@turnkey/webauthn-stamper). There is no cookie and no session.
import { p256 } from "@noble/curves/nist.js";
import { WebauthnStamper } from "@turnkey/webauthn-stamper";

export interface Stamper {
  readonly kind: "API key" | "passkey";
  stamp(body: string): Promise<{ header: string; value: string }>;
}

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code?: string,
  ) {
    super(message);
  }
}

const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
const base64url = (bytes: Uint8Array) =>
  btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
const fromHex = (text: string) => {
  if (!/^([0-9a-f]{2})+$/i.test(text)) throw new Error("not hexadecimal");
  return Uint8Array.from(text.match(/../g)!, (b) => Number.parseInt(b, 16));
};

/**
 * An API key held by the page: the private key is imported into WebCrypto as a non-extractable
 * key (no script, this one included, can read it back), and the pasted text is not kept.
 */
export async function apiKeyStamper(publicKeyHex: string, privateKeyHex: string): Promise<Stamper> {
  const publicKey = publicKeyHex.trim().toLowerCase();
  let secret: Uint8Array;
  let point: Uint8Array;
  try {
    secret = fromHex(privateKeyHex.trim());
    point = p256.Point.fromHex(publicKey).toBytes(false);
  } catch {
    throw new Error("The API public key must be a compressed P-256 key (66 hexadecimal digits) and the private key 64 hexadecimal digits");
  }
  if (secret.length !== 32 || hex(p256.getPublicKey(secret, true)) !== publicKey)
    throw new Error("The API private key does not belong to this API public key");
  const key = await crypto.subtle.importKey(
    "jwk",
    { kty: "EC", crv: "P-256", d: base64url(secret), x: base64url(point.slice(1, 33)), y: base64url(point.slice(33)), ext: false },
    { name: "ECDSA", namedCurve: "P-256" },
    false,
    ["sign"],
  );
  secret.fill(0);
  return {
    kind: "API key",
    async stamp(body) {
      const raw = new Uint8Array(await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, key, new TextEncoder().encode(body)));
      const signature = hex(p256.Signature.fromBytes(raw, "compact").toBytes("der"));
      const stamp = JSON.stringify({ publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256", signature });
      return { header: "X-Stamp", value: base64url(new TextEncoder().encode(stamp)) };
    },
  };
}

let chosenRelyingParty = "";

/**
 * The relying party the console's passkeys belong to: the host the console is served from, unless
 * the person signing in names another (a registrable suffix of that host, such as the domain of the
 * application whose passkeys the organization's users already hold). The server accepts the ids of
 * SIGIL_WEBAUTHN_RP_IDS (docs/console.md).
 */
export const relyingPartyId = () => chosenRelyingParty || location.hostname;
export const chooseRelyingParty = (id: string) => {
  chosenRelyingParty = id.trim();
};

const fromBase64url = (text: string) => Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));

/**
 * A passkey: each stamp is a new WebAuthn assertion over the request body's SHA-256. Once the first
 * assertion names the credential, later ones ask for that credential only. A browser runs one
 * WebAuthn request at a time, so stamps are made one after the other.
 */
export function passkeyStamper(): Stamper & { credentialId?: string } {
  let stamper = new WebauthnStamper({ rpId: relyingPartyId() });
  let queue: Promise<unknown> = Promise.resolve();
  const stampNow = async (body: string) => {
    const { stampHeaderName, stampHeaderValue } = await stamper.stamp(body);
    if (!self.credentialId) {
      self.credentialId = (JSON.parse(stampHeaderValue) as { credentialId: string }).credentialId;
      stamper = new WebauthnStamper({
        rpId: relyingPartyId(),
        allowCredentials: [{ type: "public-key", id: fromBase64url(self.credentialId) }],
      });
    }
    return { header: stampHeaderName, value: stampHeaderValue };
  };
  const self: Stamper & { credentialId?: string } = {
    kind: "passkey",
    stamp(body) {
      const stamped = queue.then(() => stampNow(body));
      queue = stamped.catch(() => undefined);
      return stamped;
    },
  };
  return self;
}

/** A stamped POST to the public API; a refusal is thrown as the server worded it. */
export async function post<T = unknown>(stamper: Stamper, path: string, body: unknown): Promise<T> {
  const text = JSON.stringify(body);
  const { header, value } = await stamper.stamp(text);
  const response = await fetch(path, { method: "POST", headers: { "content-type": "application/json", [header]: value }, body: text });
  const answer = await response.json().catch(() => undefined);
  if (!response.ok) {
    const code = answer?.details?.find((d: { turnkeyErrorCode?: string }) => d?.turnkeyErrorCode)?.turnkeyErrorCode;
    throw new ApiError(answer?.message || `the server answered ${response.status}`, response.status, code);
  }
  return answer as T;
}

/** What a submit answers: the activity as the request left it. */
export interface SubmitAnswer {
  activity: { id: string; status: string; fingerprint: string; result: Record<string, { [key: string]: unknown } | undefined> };
}

export interface Session {
  stamper: Stamper;
  organizationId: string;
  organizationName: string;
  userId: string;
  username: string;
}

export const query = <T = unknown>(session: Session, operation: string, parameters: Record<string, unknown> = {}) =>
  post<T>(session.stamper, `/public/v1/query/${operation}`, { organizationId: session.organizationId, ...parameters });

export const submit = <T = SubmitAnswer>(session: Session, operation: string, type: string, parameters: Record<string, unknown>) =>
  post<T>(session.stamper, `/public/v1/submit/${operation}`, {
    type,
    timestampMs: String(Date.now()),
    organizationId: session.organizationId,
    parameters,
  });

/** Signs in: the first stamped request (whoami) tells who the key or passkey belongs to. */
export async function signIn(stamper: Stamper, organizationId: string): Promise<Session> {
  const me = await post<{ organizationId: string; organizationName: string; userId: string; username: string }>(
    stamper,
    "/public/v1/query/whoami",
    {
      organizationId,
    },
  );
  return { stamper, ...me };
}

const TRANSPORTS: Record<string, string> = {
  ble: "AUTHENTICATOR_TRANSPORT_BLE",
  internal: "AUTHENTICATOR_TRANSPORT_INTERNAL",
  nfc: "AUTHENTICATOR_TRANSPORT_NFC",
  usb: "AUTHENTICATOR_TRANSPORT_USB",
  hybrid: "AUTHENTICATOR_TRANSPORT_HYBRID",
};

/** Makes a passkey with the browser's authenticator and registers it for `userId` (create_authenticators). */
export async function registerPasskey(session: Session, userId: string, userName: string, authenticatorName: string) {
  const challenge = base64url(crypto.getRandomValues(new Uint8Array(32)));
  const credential = (await navigator.credentials.create({
    publicKey: {
      rp: { id: relyingPartyId(), name: "Sigil" },
      user: { id: new TextEncoder().encode(userId), name: userName, displayName: userName },
      challenge: new TextEncoder().encode(challenge),
      pubKeyCredParams: [{ type: "public-key", alg: -7 }],
      authenticatorSelection: { residentKey: "preferred", userVerification: "preferred" },
      attestation: "none",
      timeout: 5 * 60 * 1000,
    },
  })) as PublicKeyCredential | null;
  if (!credential) throw new Error("The browser made no passkey");
  const response = credential.response as AuthenticatorAttestationResponse;
  const transports = (response.getTransports?.() ?? []).map((t) => TRANSPORTS[t]).filter(Boolean);
  return submit(session, "create_authenticators", "ACTIVITY_TYPE_CREATE_AUTHENTICATORS_V2", {
    userId,
    authenticators: [
      {
        authenticatorName,
        challenge,
        attestation: {
          credentialId: base64url(new Uint8Array(credential.rawId)),
          clientDataJson: base64url(new Uint8Array(response.clientDataJSON)),
          attestationObject: base64url(new Uint8Array(response.attestationObject)),
          transports,
        },
      },
    ],
  });
}
