// Compact ES256 JWTs as the official clients read them. The clients decode the payload with a
// base64 (not base64url) decoder that drops '-' and '_', so the payload must encode without them. In
// base64url of ASCII text only the fourth character of a group can be '-' or '_', and only for the
// bytes '>', '?', '~' and DEL; escaping those as \u00XX in the JSON (which JSON.parse reads back)
// keeps every payload clean. The signature is the IEEE P-1363 r||s of ES256 (RFC 7518).
import crypto from "node:crypto";

const escapeUnsafe = (json: string) => json.replace(/[>?~\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
const encode = (value: unknown) => Buffer.from(escapeUnsafe(JSON.stringify(value)), "utf8").toString("base64url");

/** header.payload.signature, signed with `privateKey` (a P-256 KeyObject). */
export function signEs256Jwt(privateKey: crypto.KeyObject, claims: Record<string, unknown>, header: Record<string, unknown> = {}): string {
  const signingInput = `${encode({ alg: "ES256", typ: "JWT", ...header })}.${encode(claims)}`;
  const signature = crypto.sign("sha256", Buffer.from(signingInput), { key: privateKey, dsaEncoding: "ieee-p1363" });
  return `${signingInput}.${signature.toString("base64url")}`;
}

/** The claims of a JWT whose ES256 signature verifies with `publicKey`; null when it does not. */
export function verifyEs256Jwt(publicKey: crypto.KeyObject, token: string): Record<string, unknown> | null {
  const parts = token.split(".");
  if (parts.length !== 3) return null;
  try {
    const header = JSON.parse(Buffer.from(parts[0]!, "base64url").toString("utf8")) as { alg?: unknown };
    if (header.alg !== "ES256") return null;
    const ok = crypto.verify(
      "sha256",
      Buffer.from(`${parts[0]}.${parts[1]}`),
      { key: publicKey, dsaEncoding: "ieee-p1363" },
      Buffer.from(parts[2]!, "base64url"),
    );
    if (!ok) return null;
    const claims = JSON.parse(Buffer.from(parts[1]!, "base64url").toString("utf8")) as unknown;
    return claims && typeof claims === "object" && !Array.isArray(claims) ? (claims as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}
