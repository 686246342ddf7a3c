// Public keys, wherever a request hands one in: one encoding per key, a point of its curve, and for
// ed25519 RFC 8032 §5.1.3's strict decoding (y below p, no sign bit on x = 0) of a point that is not of
// small order (crypto/keys.ts). Wycheproof-style bad keys go through every path that registers an API
// key, every login that takes a session key and every encryption target, each refused with its code
// and nothing changed but its FAILED activity. The reported exploit — the identity point as an
// ed25519 API key, under which the constant signature 01‖0…0 verifies for every body — is shown
// impossible both ways: the key cannot be registered, and a row holding it (a database written before
// the check) stamps nothing. P-256's "hybrid" encodings (06/07‖x‖y), which OpenSSL reads as the same
// point, are refused wherever a P-256 key is taken, stamps included.
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ed25519 } from "@noble/curves/ed25519.js";
import { p256 } from "@noble/curves/nist.js";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import { stampKeyProblem, validatePublicKey, decompressP256 } from "../src/crypto/keys.js";
import { verifyApiKeyStamp, verifyApiKeyStampInline, type ApiKeyStamp } from "../src/auth/stamps.js";
import {
  apiKeyStamp,
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  startHarness,
  type ApiKeyPair,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { startOidcIssuer, type TestIssuer } from "./helpers/oidc-issuer.js";

/** Little-endian 32 bytes of `n` (an ed25519 encoding of y = n), with x's sign bit when asked. */
const littleEndian = (n: bigint, sign = false) => {
  const bytes = Buffer.from(n.toString(16).padStart(64, "0"), "hex").reverse();
  if (sign) bytes[31]! |= 0x80;
  return bytes.toString("hex");
};
const P = 2n ** 255n - 19n;
// The points of order 8 (Wycheproof's and libsodium's blocklists), and of order 2.
const ORDER_8 = [
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
];
const validEd25519 = () => {
  const { publicKey, privateKey } = crypto.generateKeyPairSync("ed25519");
  return { publicKey: Buffer.from(publicKey.export({ format: "jwk" }).x!, "base64url").toString("hex"), privateKey };
};
// A key's point plus a point of order 8: on the curve, not of small order, outside the prime-order subgroup.
const mixed = ed25519.Point.fromHex(validEd25519().publicKey).add(ed25519.Point.fromHex(ORDER_8[0]!)).toHex();

/** [name, hex, what the refusal says] */
const BAD_ED25519: Array<[string, string, string]> = [
  ["02‖0…0, not on the curve", `02${"00".repeat(31)}`, "not a point on ed25519"],
  ["y = p, a non-canonical encoding", littleEndian(P), "not the canonical encoding"],
  ["y = p + 3, a non-canonical encoding of a point that decodes", littleEndian(P + 3n), "not the canonical encoding"],
  ["x = 0 with its sign bit set (the identity's −0)", littleEndian(1n, true), "not the canonical encoding"],
  ["the identity, 01‖0…0", littleEndian(1n), "small order"],
  ["y = 0 (order 4)", "00".repeat(32), "small order"],
  ["y = 0 with the sign bit (order 4)", littleEndian(0n, true), "small order"],
  ["y = −1 (order 2)", littleEndian(P - 1n), "small order"],
  ...ORDER_8.map((hex, i): [string, string, string] => [`order-8 point #${i + 1}`, hex, "small order"]),
  ["a valid point plus an order-8 point (mixed order)", mixed, "outside the prime-order subgroup"],
];

/** A P-256 key in the encodings Sigil refuses: hybrid (06/07‖x‖y) and its other spellings. */
function p256Spellings(key: ApiKeyPair) {
  const point = decompressP256(key.publicKey);
  const hybrid = `${point[64]! & 1 ? "07" : "06"}${point.subarray(1).toString("hex")}`;
  const pPlus5 = (0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn + 5n).toString(16);
  return {
    hybrid,
    hybrid33: `06${key.publicKey.slice(2)}`,
    uncompressed: point.toString("hex"),
    // x = 5 is on P-256; x = p + 5 spells it again, past the field.
    xPastField: `02${pPlus5}`,
    offCurve: `02${"00".repeat(31)}01`,
  };
}

describe("the rule (crypto/keys.ts)", () => {
  it.each(BAD_ED25519)("refuses the ed25519 key %s", (_name, hex, why) => {
    expect(validatePublicKey("API_KEY_CURVE_ED25519", hex)).toContain(why);
  });

  it("holds stamps to the same decoding and small-order rule; a mixed-order key gives a forger nothing, so a stamp is not refused for it", () => {
    for (const [, hex, why] of BAD_ED25519)
      if (why === "outside the prime-order subgroup") expect(stampKeyProblem("API_KEY_CURVE_ED25519", hex)).toBeNull();
      else expect(stampKeyProblem("API_KEY_CURVE_ED25519", hex)).toContain(why);
  });

  it("accepts a real ed25519 key, and a P-256 or secp256k1 key only as a compressed point on its curve", () => {
    expect(validatePublicKey("API_KEY_CURVE_ED25519", validEd25519().publicKey)).toBeNull();
    const key = newKeyPair();
    expect(validatePublicKey("API_KEY_CURVE_P256", key.publicKey)).toBeNull();
    const spellings = p256Spellings(key);
    for (const hex of [spellings.hybrid, spellings.hybrid33, spellings.uncompressed])
      expect(validatePublicKey("API_KEY_CURVE_P256", hex)).toContain("must be 33 bytes for P-256: a compressed point");
    for (const hex of [spellings.xPastField, spellings.offCurve])
      expect(validatePublicKey("API_KEY_CURVE_P256", hex)).toContain("not a valid point");
    const secp = crypto.createECDH("secp256k1");
    secp.generateKeys();
    expect(validatePublicKey("API_KEY_CURVE_SECP256K1", secp.getPublicKey("hex", "compressed"))).toBeNull();
    const secpPoint = secp.getPublicKey();
    const secpHybrid = `${secpPoint[64]! & 1 ? "07" : "06"}${secpPoint.subarray(1).toString("hex")}`;
    expect(validatePublicKey("API_KEY_CURVE_SECP256K1", secpHybrid)).toContain("must be 33 bytes");
  });

  it("decodes compressed P-256 and secp256k1 points (OpenSSL, libsecp256k1) exactly as @noble/curves does: random x, x past the field, x = 0", () => {
    const P = {
      API_KEY_CURVE_P256: 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn,
      API_KEY_CURVE_SECP256K1: 0xfffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc2fn,
    } as const;
    const nobleAccepts = (curve: keyof typeof P, hex: string) => {
      try {
        (curve === "API_KEY_CURVE_P256" ? p256 : secp256k1).Point.fromHex(hex);
        return true;
      } catch {
        return false;
      }
    };
    const x64 = (x: bigint) => x.toString(16).padStart(64, "0");
    for (const curve of Object.keys(P) as (keyof typeof P)[]) {
      const edges = [0n, 1n, 5n, P[curve] - 1n, P[curve], P[curve] + 1n, P[curve] + 5n, 2n ** 256n - 1n].map(x64);
      const randoms = Array.from({ length: 400 }, () => crypto.randomBytes(32).toString("hex"));
      let accepted = 0;
      for (const x of [...edges, ...randoms])
        for (const prefix of ["02", "03"]) {
          const hex = `${prefix}${x}`;
          const ok = validatePublicKey(curve, hex) === null;
          expect(ok, `${curve} ${hex}`).toBe(nobleAccepts(curve, hex));
          if (ok) accepted++;
          else expect(validatePublicKey(curve, hex)).toContain("not a valid point");
        }
      // About half of all x are on the curve: both answers were exercised.
      expect(accepted).toBeGreaterThan(200);
      expect(accepted).toBeLessThan(700);
    }
  });

  it("verifies no stamp under the identity: 01‖0…0 as the signature holds for every body under OpenSSL's equation, and is refused", async () => {
    const stamp: ApiKeyStamp = {
      kind: "API_KEY",
      publicKey: littleEndian(1n),
      scheme: "SIGNATURE_SCHEME_TK_API_ED25519",
      signature: `01${"00".repeat(63)}`,
    };
    // The flaw itself, shown with node:crypto directly: the identity "verifies" anything.
    const identity = crypto.createPublicKey({
      key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(stamp.publicKey, "hex").toString("base64url") },
      format: "jwk",
    });
    expect(crypto.verify(null, Buffer.from("any body"), identity, Buffer.from(stamp.signature, "hex"))).toBe(true);
    for (const body of ["any body", '{"organizationId":"x"}'].map((b) => Buffer.from(b))) {
      expect(await verifyApiKeyStamp(stamp, body)).toBe(false);
      expect(verifyApiKeyStampInline(stamp, body)).toBe(false);
    }
  });

  it("verifies no P-256 or secp256k1 stamp whose key is spelled in another encoding than the compressed one", async () => {
    const key = newKeyPair();
    const body = Buffer.from('{"organizationId":"x"}');
    const signed = JSON.parse(Buffer.from(apiKeyStamp(body, key), "base64url").toString()) as { signature: string };
    const stamp: ApiKeyStamp = {
      kind: "API_KEY",
      publicKey: key.publicKey,
      scheme: "SIGNATURE_SCHEME_TK_API_P256",
      signature: signed.signature,
    };
    expect(await verifyApiKeyStamp(stamp, body)).toBe(true);
    const { hybrid, uncompressed } = p256Spellings(key);
    for (const publicKey of [hybrid, uncompressed]) {
      expect(await verifyApiKeyStamp({ ...stamp, publicKey }, body)).toBe(false);
      expect(verifyApiKeyStampInline({ ...stamp, publicKey }, body)).toBe(false);
    }
    const { privateKey, publicKey } = crypto.generateKeyPairSync("ec", { namedCurve: "secp256k1" });
    const point = crypto.ECDH.convertKey(
      Buffer.from(publicKey.export({ format: "der", type: "spki" })).subarray(-65),
      "secp256k1",
      undefined,
      undefined,
      "uncompressed",
    ) as Buffer;
    const secpStamp: ApiKeyStamp = {
      kind: "API_KEY",
      publicKey: crypto.ECDH.convertKey(point, "secp256k1", undefined, "hex", "compressed") as string,
      scheme: "SIGNATURE_SCHEME_TK_API_SECP256K1",
      signature: crypto.sign("sha256", body, privateKey).toString("hex"),
    };
    expect(verifyApiKeyStampInline(secpStamp, body)).toBe(true);
    const secpHybrid = `${point[64]! & 1 ? "07" : "06"}${point.subarray(1).toString("hex")}`;
    for (const spelled of [secpHybrid, point.toString("hex")])
      expect(verifyApiKeyStampInline({ ...secpStamp, publicKey: spelled }, body)).toBe(false);
  });
});

describe("end to end", () => {
  let h: Harness;
  let org: TestOrganization;
  let root: ReturnType<Harness["sdk"]>;
  let oidc: TestIssuer;
  const subject = `public-keys-${Date.now()}`;
  /** An identity token of the root user's OAuth provider, issued for `publicKey` (its nonce). */
  const idTokenFor = (publicKey: string) =>
    oidc.token({ sub: subject, nonce: crypto.createHash("sha256").update(publicKey).digest("hex") });

  beforeAll(async () => {
    oidc = await startOidcIssuer();
    h = await startHarness({ SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400", SIGIL_OIDC_ALLOWED_ISSUERS: oidc.issuer });
    org = await h.organization();
    root = h.sdk(org, org.key, fastPoller);
    await root.createOauthProviders({
      userId: org.userId,
      oauthProviders: [{ providerName: "test", oidcToken: await oidc.token({ sub: subject }) }],
    });
  });
  afterAll(async () => {
    await h?.close();
    await oidc?.close();
  });

  const ed25519Key = (publicKey: string) => ({ apiKeyName: "ed25519 key", publicKey, curveType: "API_KEY_CURVE_ED25519" as const });
  const refusedKey = (why: string) => ({
    message: expect.stringMatching(new RegExp(`INVALID_PUBLIC_KEY[\\s\\S]*${why}|${why}[\\s\\S]*INVALID_PUBLIC_KEY`)),
  });

  describe.each(BAD_ED25519)("the ed25519 key %s", (_name, hex, why) => {
    it("is refused by create_api_keys, create_users and create_sub_organization, changing nothing but the FAILED activity", async () => {
      await refusedLeavingOnlyItsActivity(h, () => root.createApiKeys({ userId: org.userId, apiKeys: [ed25519Key(hex)] }), refusedKey(why));
      await refusedLeavingOnlyItsActivity(
        h,
        () =>
          root.createUsers({
            users: [{ userName: "holder", apiKeys: [ed25519Key(hex)], authenticators: [], oauthProviders: [], userTags: [] }],
          }),
        refusedKey(why),
      );
      await refusedLeavingOnlyItsActivity(
        h,
        () =>
          root.createSubOrganization({
            subOrganizationName: "end user",
            rootQuorumThreshold: 1,
            rootUsers: [{ userName: "end user", apiKeys: [ed25519Key(hex)], authenticators: [], oauthProviders: [] }],
          }),
        refusedKey(why),
      );
    });
  });

  it("bootstrap (sigil bootstrap's createOrganization) refuses the identity, creating nothing", async () => {
    const before = await h.snapshot();
    await expect(
      createOrganization(h.server.store.db, {
        organizationName: "forgeable",
        userName: "root",
        apiKeyName: "identity",
        apiPublicKey: littleEndian(1n),
        apiKeyCurve: "API_KEY_CURVE_ED25519",
      }),
    ).rejects.toMatchObject({ turnkeyErrorCode: "REQUEST_INVALID", message: expect.stringContaining("small order") });
    expect(await h.snapshot()).toEqual(before);
  });

  /** A raw submit or query stamped with an ed25519 key by `sign` (or a given signature). */
  async function edRequest(path: string, body: unknown, publicKey: string, signature: (bytes: Buffer) => string) {
    const text = JSON.stringify(body);
    const stamp = Buffer.from(
      JSON.stringify({ publicKey, scheme: "SIGNATURE_SCHEME_TK_API_ED25519", signature: signature(Buffer.from(text)) }),
    ).toString("base64url");
    return h.post(path, text, { "X-Stamp": stamp });
  }

  it("a real ed25519 key is registered and stamps", async () => {
    const key = validEd25519();
    await root.createApiKeys({ userId: org.userId, apiKeys: [ed25519Key(key.publicKey)] });
    const answer = await edRequest("/public/v1/query/whoami", { organizationId: org.organizationId }, key.publicKey, (b) =>
      crypto.sign(null, b, key.privateKey).toString("hex"),
    );
    expect(answer).toMatchObject({ status: 200, json: { userId: org.userId } });
  });

  describe("a row already holding a small-order key (written before keys were checked) stamps nothing", () => {
    let signWith: string;
    beforeAll(async () => {
      const { addresses } = await root.createWallet({
        walletName: "victim",
        accounts: [
          { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
        ],
      });
      signWith = addresses[0]!;
      // The root user holds each bad key, as a database written without the check could.
      for (const [i, [, hex, why]] of BAD_ED25519.entries()) {
        if (why === "outside the prime-order subgroup" || why === "not a point on ed25519") continue;
        await h.server.store.db
          .insertInto("api_keys")
          .values({
            id: crypto.randomUUID(),
            organization_id: org.organizationId,
            user_id: org.userId,
            name: `stored bad key ${i}`,
            public_key: hex,
            curve: "API_KEY_CURVE_ED25519",
            expiration_seconds: null,
            expires_at: null,
            created_at: Date.now(),
            updated_at: Date.now(),
          })
          .execute();
      }
    });

    const forged = () => `01${"00".repeat(63)}`;

    it("the reported exploit: whoami and sign_raw_payload with the identity and the constant signature are refused, nothing changed", async () => {
      const before = await h.snapshot();
      const whoami = await edRequest("/public/v1/query/whoami", { organizationId: org.organizationId }, littleEndian(1n), forged);
      expect(whoami.status).toBe(401);
      expect(whoami.json.details[0].turnkeyErrorCode).toBe("MALFORMED_STAMP");
      expect(whoami.json.message).toContain("small order");
      const sign = await edRequest(
        "/public/v1/submit/sign_raw_payload",
        {
          type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
          timestampMs: String(Date.now()),
          organizationId: org.organizationId,
          parameters: {
            signWith,
            payload: "0x68656c6c6f",
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_KECCAK256",
          },
        },
        littleEndian(1n),
        forged,
      );
      expect(sign.status).toBe(401);
      expect(sign.json.details[0].turnkeyErrorCode).toBe("MALFORMED_STAMP");
      expect(await h.snapshot()).toEqual(before);
    });

    it.each(BAD_ED25519.filter(([, , why]) => why === "small order" || why === "not the canonical encoding"))(
      "a stamp by the stored key %s is refused MALFORMED_STAMP whatever its signature",
      async (_name, hex, why) => {
        const before = await h.snapshot();
        for (const signature of [forged(), `${littleEndian(1n)}${"00".repeat(32)}`, hex + "00".repeat(32)]) {
          const answer = await edRequest("/public/v1/query/whoami", { organizationId: org.organizationId }, hex, () => signature);
          expect(answer.status).toBe(401);
          expect(answer.json.details[0].turnkeyErrorCode).toBe("MALFORMED_STAMP");
          expect(answer.json.message).toContain(why);
        }
        expect(await h.snapshot()).toEqual(before);
      },
    );
  });

  describe("P-256 keys in another encoding than the compressed point", () => {
    it("create_api_keys, create_users and create_sub_organization refuse hybrid, uncompressed, past-the-field and off-curve keys", async () => {
      const spellings = p256Spellings(newKeyPair());
      for (const hex of Object.values(spellings)) {
        const apiKeys = [{ apiKeyName: "k", publicKey: hex, curveType: "API_KEY_CURVE_P256" as const }];
        await refusedLeavingOnlyItsActivity(h, () => root.createApiKeys({ userId: org.userId, apiKeys }), refusedKey("public key"));
        await refusedLeavingOnlyItsActivity(
          h,
          () => root.createUsers({ users: [{ userName: "u", apiKeys, authenticators: [], oauthProviders: [], userTags: [] }] }),
          refusedKey("public key"),
        );
        await refusedLeavingOnlyItsActivity(
          h,
          () =>
            root.createSubOrganization({
              subOrganizationName: "end user",
              rootQuorumThreshold: 1,
              rootUsers: [{ userName: "end user", apiKeys, authenticators: [], oauthProviders: [] }],
            }),
          refusedKey("public key"),
        );
      }
    });

    it("an invitation's acceptance refuses a hybrid key before anything is read, changing nothing", async () => {
      const { hybrid } = p256Spellings(newKeyPair());
      const body = JSON.stringify({
        token: "x".repeat(43),
        apiKey: { apiKeyName: "k", publicKey: hybrid, curveType: "API_KEY_CURVE_P256" },
      });
      const before = await h.snapshot();
      const answer = await h.post("/invitations/accept", body, { "X-Stamp": apiKeyStamp(body, newKeyPair()) });
      expect(answer.status).toBe(400);
      expect(answer.json.details[0].turnkeyErrorCode).toBe("INVALID_PUBLIC_KEY");
      expect(await h.snapshot()).toEqual(before);
    });

    it("the logins' session keys (stamp_login, otp_login, oauth_login, verify_otp) refuse a hybrid key", async () => {
      const { hybrid } = p256Spellings(newKeyPair());
      const refused = { message: expect.stringContaining("INVALID_PUBLIC_KEY") };
      await refusedLeavingOnlyItsActivity(h, () => root.stampLogin({ publicKey: hybrid }), refused);
      const clientSignature = { publicKey: hybrid, scheme: "CLIENT_SIGNATURE_SCHEME_API_P256" as const, message: "{}", signature: "00" };
      await refusedLeavingOnlyItsActivity(
        h,
        () => root.otpLogin({ verificationToken: "not.a.token", publicKey: hybrid, clientSignature }),
        refused,
      );
      const oidcToken = await idTokenFor(hybrid);
      await refusedLeavingOnlyItsActivity(h, () => root.oauthLogin({ oidcToken, publicKey: hybrid }), refused);
      // verify_otp's first version names the key to bind the token to in publicKey (the client's sends it in the bundle).
      const verifyOtp = signedRequest(
        {
          type: "ACTIVITY_TYPE_VERIFY_OTP",
          timestampMs: String(Date.now()),
          organizationId: org.organizationId,
          parameters: { otpId: "none", otpCode: "123456", publicKey: hybrid },
        },
        org.key,
      );
      await refusedLeavingOnlyItsActivity(
        h,
        async () => {
          const answer = await h.post("/public/v1/submit/verify_otp", verifyOtp.body, verifyOtp.headers);
          if (answer.status !== 200) throw answer.json;
        },
        { details: [expect.objectContaining({ turnkeyErrorCode: "INVALID_PUBLIC_KEY" })] },
      );
    });

    it("encryption targets (export_wallet, create_read_write_session, oauth) refuse a hybrid key", async () => {
      const { hybrid } = p256Spellings(newKeyPair());
      const { walletId } = await root.createWallet({
        walletName: "exportable",
        accounts: [
          { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
        ],
      });
      const refused = { message: expect.stringContaining("INVALID_TARGET_PUBLIC_KEY") };
      await refusedLeavingOnlyItsActivity(h, () => root.exportWallet({ walletId, targetPublicKey: hybrid }), refused);
      await refusedLeavingOnlyItsActivity(h, () => root.createReadWriteSession({ targetPublicKey: hybrid }), refused);
      const oidcToken = await idTokenFor(hybrid);
      await refusedLeavingOnlyItsActivity(h, () => root.oauth({ oidcToken, targetPublicKey: hybrid }), refused);
    });

    it("a stamp naming a registered key in its hybrid spelling is refused MALFORMED_STAMP, though its signature holds", async () => {
      const { hybrid } = p256Spellings(org.key);
      const text = JSON.stringify({ organizationId: org.organizationId });
      const genuine = JSON.parse(Buffer.from(apiKeyStamp(text, org.key), "base64url").toString()) as Record<string, string>;
      const stamp = Buffer.from(JSON.stringify({ ...genuine, publicKey: hybrid })).toString("base64url");
      const before = await h.snapshot();
      const answer = await h.post("/public/v1/query/whoami", text, { "X-Stamp": stamp });
      expect(answer.status).toBe(401);
      expect(answer.json.details[0].turnkeyErrorCode).toBe("MALFORMED_STAMP");
      expect(answer.json.message).toContain("compressed point");
      expect(await h.snapshot()).toEqual(before);
    });

    it("an attested stamp whose key is spelled hybrid is refused MALFORMED_STAMP before its token is looked at", async () => {
      const key = newKeyPair();
      const { hybrid } = p256Spellings(key);
      const text = JSON.stringify({
        type: "ACTIVITY_TYPE_APPROVE_ACTIVITY",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { fingerprint: "none" },
      });
      const { signature } = JSON.parse(Buffer.from(apiKeyStamp(text, key), "base64url").toString()) as { signature: string };
      const header = Buffer.from(
        JSON.stringify({
          publicKey: hybrid,
          signature,
          publicKeyAttestation: "not.a.token",
          scheme: "STAMP_ATTESTED_SCHEME_P256_VERIFICATION_TOKEN",
        }),
      ).toString("base64url");
      const before = await h.snapshot();
      const answer = await h.post("/public/v1/submit/approve_activity", text, { "X-Stamp-Attested": header });
      expect(answer.status).toBe(401);
      expect(answer.json.details[0].turnkeyErrorCode).toBe("MALFORMED_STAMP");
      expect(await h.snapshot()).toEqual(before);
    });
  });
});
