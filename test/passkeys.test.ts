// Passkeys end to end: registration from an attestation, then requests stamped by the official
// @turnkey/webauthn-stamper driving a software authenticator (no browser).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyClient } from "@turnkey/http";
import { WebauthnStamper } from "@turnkey/webauthn-stamper";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { SoftwarePasskey } from "./helpers/passkey.js";

let h: Harness;
let org: TestOrganization;
let passkey: SoftwarePasskey;
let userId: string;

const noCredentials = { apiKeys: [], oauthProviders: [], userTags: [] };

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization();
  passkey = new SoftwarePasskey();
  const registration = passkey.register();
  const created = await h.sdk(org, org.key).createUsers({
    users: [
      {
        userName: "passkey user",
        ...noCredentials,
        authenticators: [{ authenticatorName: "laptop", challenge: registration.challenge, attestation: registration.attestation as any }],
      },
    ],
  });
  userId = created.userIds[0];
});
afterAll(() => h.close());

function whoamiBody(organizationId = org.organizationId) {
  return JSON.stringify({ organizationId });
}

describe("passkey stamps", () => {
  it("authenticates requests stamped by @turnkey/webauthn-stamper", async () => {
    const restore = passkey.installAsNavigator();
    try {
      const client = new TurnkeyClient({ baseUrl: h.url }, new WebauthnStamper({ rpId: passkey.rpId }));
      const me = await client.getWhoami({ organizationId: org.organizationId });
      expect(me).toMatchObject({ userId, username: "passkey user", organizationId: org.organizationId });
    } finally {
      restore();
    }
  });

  it("lets a root user holding a passkey submit activities with it", async () => {
    const rootPasskey = new SoftwarePasskey();
    const registration = rootPasskey.register();
    await h.sdk(org, org.key).createAuthenticators({
      userId: org.userId,
      authenticators: [{ authenticatorName: "root key", challenge: registration.challenge, attestation: registration.attestation as any }],
    });
    const restore = rootPasskey.installAsNavigator();
    try {
      const client = new TurnkeyClient({ baseUrl: h.url }, new WebauthnStamper({ rpId: rootPasskey.rpId }));
      const response = await client.createUserTag({
        type: "ACTIVITY_TYPE_CREATE_USER_TAG",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { userTagName: "via passkey", userIds: [] },
      });
      expect(response.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      expect(response.activity.votes[0]).toMatchObject({ userId: org.userId, scheme: "SIGNATURE_SCHEME_TK_WEBAUTHN" });
    } finally {
      restore();
    }
  });

  it("refuses an assertion made for another body (challenge mismatch)", async () => {
    const body = whoamiBody();
    const res = await h.post("/public/v1/query/whoami", body, {
      "X-Stamp-Webauthn": passkey.stamp(JSON.stringify({ organizationId: "other" })),
    });
    expect(res.status).toBe(401);
    expect(res.json.details[0].turnkeyErrorCode).toBe("SIGNATURE_INVALID");
    expect(res.json.message).toMatch(/challenge/);
  });

  it("refuses an assertion without user presence", async () => {
    const body = whoamiBody();
    const res = await h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": passkey.stamp(body, { withoutUserPresence: true }) });
    expect(res.status).toBe(401);
    expect(res.json.message).toMatch(/user presence/);
  });

  it("refuses a tampered signature", async () => {
    const body = whoamiBody();
    const stamp = JSON.parse(passkey.stamp(body));
    const sig = Buffer.from(stamp.signature, "base64url");
    sig[sig.length - 1] ^= 0x01;
    stamp.signature = sig.toString("base64url");
    const res = await h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": JSON.stringify(stamp) });
    expect(res.status).toBe(401);
    expect(res.json.details[0].turnkeyErrorCode).toBe("SIGNATURE_INVALID");
  });

  it("refuses a passkey nobody registered", async () => {
    const stranger = new SoftwarePasskey();
    const body = whoamiBody();
    const res = await h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": stranger.stamp(body) });
    expect(res.status).toBe(401);
    expect(res.json.details[0].turnkeyErrorCode).toBe("PUBLIC_KEY_NOT_FOUND");
  });

  it("says nothing about another organization's passkey to a stamp that does not verify", async () => {
    const other = await h.organization("Other");
    const body = JSON.stringify({ organizationId: other.organizationId });
    const stamp = JSON.parse(passkey.stamp(body));
    stamp.signature = Buffer.from("not a signature").toString("base64url");
    const forged = await h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": JSON.stringify(stamp) });
    expect(forged.status).toBe(401);
    expect(forged.json.details[0].turnkeyErrorCode).toBe("PUBLIC_KEY_NOT_FOUND");
    // With a genuine assertion the caller learns the passkey belongs to another organization.
    const genuine = await h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": passkey.stamp(body) });
    expect(genuine.status).toBe(403);
    expect(genuine.json.details[0].turnkeyErrorCode).toBe("ORGANIZATION_MISMATCH");
  });

  it("refuses a registration whose challenge is not the one presented, and stores nothing", async () => {
    const other = new SoftwarePasskey();
    const registration = other.register("Y2hhbGxlbmdlLXNpZ25lZA");
    const before = await h.server.store.db.selectFrom("authenticators").select("id").execute();
    await expect(
      h.sdk(org, org.key).createAuthenticators({
        userId,
        authenticators: [{ authenticatorName: "bad", challenge: "c29tZXRoaW5nLWVsc2U", attestation: registration.attestation as any }],
      }),
    ).rejects.toMatchObject({
      code: 3,
      // In the request's terms, not @simplewebauthn's ("Unexpected registration response challenge …").
      message: expect.stringContaining("attestation rejected: clientDataJson's challenge is not the challenge this request presents"),
      details: [expect.objectContaining({ turnkeyErrorCode: "INVALID_ATTESTATION" })],
    });
    const after = await h.server.store.db.selectFrom("authenticators").select("id").execute();
    expect(after).toEqual(before);
  });

  // A "none" attestation is signed by nobody, so its key is used for the first time by a later stamp:
  // it is checked at registration as every registered key is.
  const P256_P = Buffer.from("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff", "hex");
  const offCurve: Array<[string, { x: Buffer; y: Buffer }]> = [
    ["not on the curve", { x: Buffer.alloc(32, 1), y: Buffer.alloc(32, 1) }],
    ["all zeros", { x: Buffer.alloc(32), y: Buffer.alloc(32) }],
    ["x of 31 bytes", { x: Buffer.alloc(31, 1), y: Buffer.alloc(32, 1) }],
    ["x past the field's prime", { x: P256_P, y: Buffer.alloc(32, 1) }],
  ];
  for (const [why, point] of offCurve)
    it(`refuses a registration whose public key is ${why}, and stores nothing but its failed activity`, async () => {
      const registration = new SoftwarePasskey().register(undefined, point);
      const refused = await refusedLeavingOnlyItsActivity(
        h,
        () =>
          h.sdk(org, org.key).createAuthenticators({
            userId,
            authenticators: [{ authenticatorName: "bad", challenge: registration.challenge, attestation: registration.attestation as any }],
          }),
        {
          code: 3,
          message: expect.stringContaining("the passkey's public key is not a point on P-256"),
          details: [expect.objectContaining({ turnkeyErrorCode: "INVALID_ATTESTATION" })],
        },
      );
      expect(refused.failure).toMatchObject({ code: 3, message: expect.stringContaining("not a point on P-256") });
    });
});

describe("passkey stamps with configured origins and relying-party ids", () => {
  let strict: Harness;
  let strictOrg: TestOrganization;
  const good = new SoftwarePasskey("app.example.com", "https://app.example.com");

  beforeAll(async () => {
    strict = await startHarness({ SIGIL_WEBAUTHN_ORIGINS: "https://app.example.com", SIGIL_WEBAUTHN_RP_IDS: "app.example.com" });
    strictOrg = await strict.organization();
    const registration = good.register();
    await strict.sdk(strictOrg, strictOrg.key).createUsers({
      users: [
        {
          userName: "u",
          ...noCredentials,
          authenticators: [{ authenticatorName: "k", challenge: registration.challenge, attestation: registration.attestation as any }],
        },
      ],
    });
  });
  afterAll(() => strict.close());

  it("accepts the configured origin and relying party", async () => {
    const body = JSON.stringify({ organizationId: strictOrg.organizationId });
    const res = await strict.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": good.stamp(body) });
    expect(res.status).toBe(200);
  });

  it("refuses an assertion from another origin", async () => {
    const body = JSON.stringify({ organizationId: strictOrg.organizationId });
    const res = await strict.post("/public/v1/query/whoami", body, {
      "X-Stamp-Webauthn": good.stamp(body, { origin: "https://evil.example" }),
    });
    expect(res.status).toBe(401);
    expect(res.json.message).toMatch(/origin/);
  });

  it("refuses a registration made for another origin or relying party", async () => {
    const foreign = new SoftwarePasskey("localhost", "http://localhost:3000");
    const registration = foreign.register();
    await expect(
      strict.sdk(strictOrg, strictOrg.key).createUsers({
        users: [
          {
            userName: "v",
            ...noCredentials,
            authenticators: [{ authenticatorName: "k", challenge: registration.challenge, attestation: registration.attestation as any }],
          },
        ],
      }),
    ).rejects.toMatchObject({ code: 3 });
  });
});
