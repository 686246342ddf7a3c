// OAuth / OIDC logins through the official clients, against an OIDC issuer the test runs on loopback
// (discovery document + JWKS; tokens signed by the test). A parent's backend logs in its
// sub-organizations' users, as with the product; then every way a token can be wrong.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import crypto from "node:crypto";
import { generateKeyPair } from "jose";
import { startOidcIssuer, TEST_AUDIENCE as AUDIENCE, type TestIssuer } from "./helpers/oidc-issuer.js";
import { generateP256KeyPair } from "@turnkey/crypto";
import { parseSession } from "@turnkey/core/dist/utils.js";
import {
  startHarness,
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { errorOf, keyFromBundle } from "./helpers/logins.js";

let oidc: TestIssuer;
let issuer: string;
let h: Harness;
let parent: TestOrganization;
let parentSdk: ReturnType<Harness["sdk"]>;

const nonceFor = (publicKey: string) => crypto.createHash("sha256").update(publicKey).digest("hex");
const idToken = (claims: Parameters<TestIssuer["token"]>[0], key?: Parameters<TestIssuer["token"]>[1]) => oidc.token(claims, key);

beforeAll(async () => {
  oidc = await startOidcIssuer();
  issuer = oidc.issuer;
  h = await startHarness({ SIGIL_OIDC_ALLOWED_ISSUERS: `${issuer},https://accounts.example.com` });
  parent = await h.organization("Social app");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
});
afterAll(async () => {
  await h.close();
  await oidc.close();
});

let counter = 0;
/** A sub-organization whose root user is linked to a fresh OIDC subject through createOauthProviders. */
async function socialUser() {
  counter += 1;
  const subject = `google-user-${counter}-${Date.now()}`;
  const rootKey = newKeyPair();
  const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
    subOrganizationName: `social ${counter}`,
    rootQuorumThreshold: 1,
    rootUsers: [
      {
        userName: `social ${counter}`,
        apiKeys: [{ apiKeyName: "device", publicKey: rootKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: [],
      },
    ],
  });
  const userId = rootUserIds![0]!;
  // The sub-organization's own root links the identity (a parent cannot write in a sub-organization).
  const { providerIds } = await h
    .sdk({ organizationId: subOrganizationId }, rootKey, fastPoller)
    .createOauthProviders({ userId, oauthProviders: [{ providerName: "Google", oidcToken: await idToken({ sub: subject }) }] });
  return { subOrganizationId, userId, subject, providerId: providerIds[0]!, rootKey };
}

describe("oauth (credential bundle)", () => {
  it("a token from the allowed issuer, with the target key's hash as nonce, opens a session key for the linked user", async () => {
    const user = await socialUser();
    const target = generateP256KeyPair();
    const oidcToken = await idToken({ sub: user.subject, nonce: nonceFor(target.publicKeyUncompressed) });
    const result = await parentSdk.oauth({
      organizationId: user.subOrganizationId,
      oidcToken,
      targetPublicKey: target.publicKeyUncompressed,
    });
    expect(result.userId).toBe(user.userId);
    const key = keyFromBundle(result.credentialBundle, target);
    const asUser = h.sdk({ organizationId: user.subOrganizationId }, key, fastPoller);
    expect((await asUser.getWhoami({})).userId).toBe(user.userId);
    const { apiKey } = await asUser.getApiKey({ apiKeyId: result.apiKeyId });
    expect(apiKey.apiKeyName).toMatch(/^Oauth - \d{4}-/);
    expect(apiKey.expirationSeconds).toBe("900");

    // The audit log keeps who the token named, never the token.
    const rows = await h.server.store.db
      .selectFrom("activities")
      .select(["intent", "votes"])
      .where("organization_id", "=", user.subOrganizationId)
      .execute();
    const logged = JSON.stringify(rows);
    expect(logged).not.toContain(oidcToken.split(".")[2]);
    // Not even the token that linked the identity (create_oauth_providers): neither intent nor vote.
    expect(logged).not.toMatch(/eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+/);
    expect(logged).toContain(user.subject);
  });

  it("invalidateExisting revokes the user's earlier OAuth keys", async () => {
    const user = await socialUser();
    const first = generateP256KeyPair();
    const second = generateP256KeyPair();
    const one = await parentSdk.oauth({
      organizationId: user.subOrganizationId,
      oidcToken: await idToken({ sub: user.subject, nonce: nonceFor(first.publicKeyUncompressed) }),
      targetPublicKey: first.publicKeyUncompressed,
    });
    await parentSdk.oauth({
      organizationId: user.subOrganizationId,
      oidcToken: await idToken({ sub: user.subject, nonce: nonceFor(second.publicKeyUncompressed) }),
      targetPublicKey: second.publicKeyUncompressed,
      invalidateExisting: true,
      apiKeyName: "second",
    });
    expect(
      await errorOf(
        h.sdk({ organizationId: user.subOrganizationId }, keyFromBundle(one.credentialBundle, first), fastPoller).getWhoami({}),
      ),
    ).toContain("PUBLIC_KEY_NOT_FOUND");
  });
});

describe("oauth_login (session JWT)", () => {
  it("refuses a login naming an unknown session profile, issuing no session", async () => {
    const user = await socialUser();
    const sessionKey = newKeyPair();
    const oidcToken = await idToken({ sub: user.subject, nonce: nonceFor(sessionKey.publicKey) });
    await refusedLeavingOnlyItsActivity(
      h,
      () =>
        parentSdk.oauthLogin({
          organizationId: user.subOrganizationId,
          oidcToken,
          publicKey: sessionKey.publicKey,
          sessionProfileId: "3c6a9b4e-2f1d-4c8b-9a7e-5d0f1b2c3d4e",
        }),
      { message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND") },
    );
    // No session key was registered: it stamps nothing.
    expect(await errorOf(h.sdk({ organizationId: user.subOrganizationId }, sessionKey, fastPoller).getWhoami({}))).toContain(
      "PUBLIC_KEY_NOT_FOUND",
    );
  });

  it("with a session profile: the profile caps the lifetime, and its scope holds on the session key", async () => {
    const user = await socialUser();
    // The parent's profile, as the sub-organization sees its parent's.
    const { sessionProfileId } = await parentSdk.createSessionProfile({
      sessionProfileName: "tags only",
      scope: "activity.type == 'ACTIVITY_TYPE_CREATE_USER_TAG'",
      expirationSeconds: "300",
    });
    const sessionKey = newKeyPair();
    const { session } = await parentSdk.oauthLogin({
      organizationId: user.subOrganizationId,
      oidcToken: await idToken({ sub: user.subject, nonce: nonceFor(sessionKey.publicKey) }),
      publicKey: sessionKey.publicKey,
      expirationSeconds: "3600",
      sessionProfileId,
    });
    expect(parseSession(session)).toMatchObject({ sessionType: "tags only", sessionProfileId, userId: user.userId });
    const lifetime = parseSession(session).expiry - Date.now() / 1000;
    expect(lifetime).toBeGreaterThan(290);
    expect(lifetime).toBeLessThanOrEqual(301);

    const asSession = h.sdk({ organizationId: user.subOrganizationId }, sessionKey, fastPoller);
    const { apiKeys } = await asSession.getApiKeys({ userId: user.userId });
    expect(apiKeys.find((k) => k.credential.publicKey === sessionKey.publicKey)?.credential).toMatchObject({ sessionProfileId });
    expect((await asSession.createUserTag({ userTagName: "allowed", userIds: [] })).userTagId).toBeTruthy();
    // The sub-organization's root user, and still the scope refuses what it does not name.
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => asSession.createPrivateKeyTag({ privateKeyTagName: "no", privateKeyIds: [] }),
      {
        message: expect.stringContaining("SESSION_SCOPE_DENIED"),
      },
    );
    expect(failure.message).toContain(sessionProfileId);
  });

  it("publicKey becomes a session key of the linked user; the client's parser reads the JWT", async () => {
    const user = await socialUser();
    const sessionKey = newKeyPair();
    const { session } = await parentSdk.oauthLogin({
      organizationId: user.subOrganizationId,
      oidcToken: await idToken({ sub: user.subject, nonce: nonceFor(sessionKey.publicKey) }),
      publicKey: sessionKey.publicKey,
    });
    expect(parseSession(session)).toMatchObject({
      userId: user.userId,
      organizationId: user.subOrganizationId,
      publicKey: sessionKey.publicKey,
    });
    expect((await h.sdk({ organizationId: user.subOrganizationId }, sessionKey, fastPoller).getWhoami({})).userId).toBe(user.userId);
  });
});

describe("OAuth providers", () => {
  it("lists and deletes a user's providers; a deleted identity no longer logs in", async () => {
    const user = await socialUser();
    const { oauthProviders } = await parentSdk.getOauthProviders({ organizationId: user.subOrganizationId, userId: user.userId });
    expect(oauthProviders).toEqual([
      expect.objectContaining({ providerId: user.providerId, providerName: "Google", issuer, audience: AUDIENCE, subject: user.subject }),
    ]);
    const own = h.sdk({ organizationId: user.subOrganizationId }, user.rootKey, fastPoller);
    expect((await own.deleteOauthProviders({ userId: user.userId, providerIds: [user.providerId] })).providerIds).toEqual([
      user.providerId,
    ]);
    expect((await parentSdk.getOauthProviders({ organizationId: user.subOrganizationId, userId: user.userId })).oauthProviders).toEqual([]);
    const sessionKey = newKeyPair();
    expect(
      await errorOf(
        parentSdk.oauthLogin({
          organizationId: user.subOrganizationId,
          oidcToken: await idToken({ sub: user.subject, nonce: nonceFor(sessionKey.publicKey) }),
          publicKey: sessionKey.publicKey,
        }),
      ),
    ).toContain("OAUTH_PROVIDER_NOT_FOUND");
    expect(await errorOf(own.deleteOauthProviders({ userId: user.userId, providerIds: [user.providerId] }))).toContain(
      "OAUTH_PROVIDER_NOT_FOUND",
    );
  });

  it("a sub-organization's own users link an identity only with a token its issuer signed", async () => {
    const user = await socialUser();
    const own = h.sdk({ organizationId: user.subOrganizationId }, user.rootKey, fastPoller);
    const before = (await own.getOauthProviders({ userId: user.userId })).oauthProviders;
    // Bare claims would let an end user claim a stranger's identity.
    expect(
      await errorOf(
        own.createOauthProviders({
          userId: user.userId,
          oauthProviders: [{ providerName: "Apple", oidcClaims: { iss: issuer, sub: "a-stranger", aud: AUDIENCE } }],
        }),
      ),
    ).toContain("OIDC_CLAIMS_NOT_ALLOWED");
    // So would a token nobody signed, or one signed by another key.
    const payload = (await idToken({ sub: "a-stranger" })).split(".")[1];
    const unsigned = `${Buffer.from(JSON.stringify({ alg: "none" })).toString("base64url")}.${payload}.`;
    const refusedUnsigned = await errorOf(
      own.createOauthProviders({ userId: user.userId, oauthProviders: [{ providerName: "Apple", oidcToken: unsigned }] }),
    );
    expect(refusedUnsigned).toContain("OIDC_TOKEN_INVALID");
    // In the token's terms, not jose's ("\"alg\" (Algorithm) Header Parameter value not allowed").
    expect(refusedUnsigned).toContain("the OIDC token is not valid: its algorithm (alg) is not one of RS256");
    expect(refusedUnsigned).not.toMatch(/Header Parameter/);
    const forged = await idToken({ sub: "a-stranger" }, (await generateKeyPair("RS256")).privateKey);
    expect(
      await errorOf(own.createOauthProviders({ userId: user.userId, oauthProviders: [{ providerName: "Apple", oidcToken: forged }] })),
    ).toContain("OIDC_SIGNATURE_INVALID");
    expect((await own.getOauthProviders({ userId: user.userId })).oauthProviders).toEqual(before);
  });

  it("in a top-level organization bare claims need a policy or the root quorum, even for one's own user", async () => {
    const team = await h.organization("Claims team");
    const root = h.sdk(team, team.key, fastPoller);
    const key = newKeyPair();
    const { userIds } = await root.createUsers({
      users: [
        {
          userName: "employee",
          apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    const employee = h.sdk(team, key, fastPoller);
    expect(
      await errorOf(
        employee.createOauthProviders({
          userId: userIds[0]!,
          oauthProviders: [{ providerName: "Google", oidcClaims: { iss: issuer, sub: "the-ceo", aud: AUDIENCE } }],
        }),
      ),
    ).toContain("POLICY_DENIED");
    // With a token of their own identity, no policy is needed.
    await employee.createOauthProviders({
      userId: userIds[0]!,
      oauthProviders: [{ providerName: "Google", oidcToken: await idToken({ sub: "the-employee" }) }],
    });
    // The root may vouch for claims.
    await root.createOauthProviders({
      userId: userIds[0]!,
      oauthProviders: [{ providerName: "Apple", oidcClaims: { iss: issuer, sub: "employee-apple", aud: AUDIENCE } }],
    });
  });

  it("the parent links an identity from its claims when it creates the sub-organization", async () => {
    const subject = `apple-user-${Date.now()}`;
    const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
      subOrganizationName: "claims",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "claims",
          apiKeys: [],
          authenticators: [],
          oauthProviders: [{ providerName: "Apple", oidcClaims: { iss: issuer, sub: subject, aud: AUDIENCE } } as never],
        },
      ],
    });
    const sessionKey = newKeyPair();
    const { session } = await parentSdk.oauthLogin({
      organizationId: subOrganizationId,
      oidcToken: await idToken({ sub: subject, nonce: nonceFor(sessionKey.publicKey) }),
      publicKey: sessionKey.publicKey,
    });
    expect(parseSession(session).userId).toBe(rootUserIds![0]);
  });
});

describe("tokens that must not log anyone in", () => {
  let user: Awaited<ReturnType<typeof socialUser>>;
  beforeAll(async () => {
    user = await socialUser();
  });

  const cases: Array<[string, (key: string) => Promise<string>, string]> = [
    [
      "signed by a key the issuer does not publish",
      async (key) => idToken({ sub: user.subject, nonce: nonceFor(key) }, (await generateKeyPair("RS256")).privateKey),
      "OIDC_SIGNATURE_INVALID",
    ],
    [
      "for another audience",
      (key) => idToken({ sub: user.subject, nonce: nonceFor(key), aud: "someone-elses-app" }),
      "OIDC_AUDIENCE_MISMATCH",
    ],
    [
      "expired",
      (key) => idToken({ sub: user.subject, nonce: nonceFor(key), exp: Math.floor(Date.now() / 1000) - 120 }),
      "OIDC_TOKEN_EXPIRED",
    ],
    ["that never expires (no exp)", (key) => idToken({ sub: user.subject, nonce: nonceFor(key), exp: 0 }), "OIDC_TOKEN_INVALID"],
    [
      "from an issuer the operator did not allow",
      (key) => idToken({ sub: user.subject, nonce: nonceFor(key), iss: "https://evil.example.net" }),
      "OIDC_ISSUER_NOT_ALLOWED",
    ],
    [
      "with the nonce of another key",
      (_key) => idToken({ sub: user.subject, nonce: nonceFor(newKeyPair().publicKey) }),
      "OIDC_NONCE_MISMATCH",
    ],
    ["without a nonce", (_key) => idToken({ sub: user.subject }), "OIDC_NONCE_MISMATCH"],
    ["for a subject no user is linked to", (key) => idToken({ sub: "somebody-else", nonce: nonceFor(key) }), "OAUTH_PROVIDER_NOT_FOUND"],
    ["that is not a JWT", async () => "not-a-token", "OIDC_TOKEN_INVALID"],
  ];

  it.each(cases)("a token %s is refused, and no key is made", async (_name, makeToken, code) => {
    const target = generateP256KeyPair();
    const oidcToken = await makeToken(target.publicKeyUncompressed);
    const keysBefore = await h.server.store.db
      .selectFrom("api_keys")
      .select("id")
      .where("organization_id", "=", user.subOrganizationId)
      .execute();
    const requestsBefore = oidc.requests.length;
    const { body, headers } = signedRequest(
      {
        type: "ACTIVITY_TYPE_OAUTH",
        timestampMs: String(Date.now()),
        organizationId: user.subOrganizationId,
        parameters: { oidcToken, targetPublicKey: target.publicKeyUncompressed },
      },
      parent.key,
    );
    const response = await h.post("/public/v1/submit/oauth", body, headers);
    expect(response.status).toBeGreaterThanOrEqual(400);
    expect(JSON.stringify(response.json)).toContain(code);
    expect(
      await h.server.store.db.selectFrom("api_keys").select("id").where("organization_id", "=", user.subOrganizationId).execute(),
    ).toEqual(keysBefore);
    // An issuer nobody allowed is never contacted (ours was asked nothing new either).
    if (code === "OIDC_ISSUER_NOT_ALLOWED") expect(oidc.requests.length).toBe(requestsBefore);
  });
});
