// Sessions through the official clients: stamp_login's JWT decoded by the clients' own parsers and
// its key then used to stamp requests; credential bundles opened by @turnkey/crypto; expiry,
// invalidateExisting and read-only sessions; and the ways a login request can be wrong.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLocalJWKSet, jwtVerify } from "jose";
// The parser @turnkey/core itself runs on the session a login returns (not exported from its index).
import { parseSession as coreParseSession } from "@turnkey/core/dist/utils.js";
import { generateP256KeyPair } from "@turnkey/crypto";
import { TurnkeyBrowserClient } from "@turnkey/sdk-browser";
import {
  startHarness,
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { fastPoller, organizationWith } from "./helpers/organizations.js";
import { errorOf, keyFromBundle } from "./helpers/logins.js";

let h: Harness;
let org: TestOrganization;
let sdk: ReturnType<Harness["sdk"]>;
// The server's clock runs `offset` ms ahead of the test's, so sessions can be made to expire.
let offset = 0;

beforeAll(async () => {
  h = await startHarness(
    { SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400", SIGIL_SESSION_MAX_SECONDS: "86400" },
    { clock: () => Date.now() + offset },
  );
  org = await h.organization("Sessions");
  sdk = h.sdk(org, org.key, fastPoller);
});
afterAll(() => h.close());

describe("stamp_login", () => {
  it("returns a signed session JWT the clients parse; its key then stamps requests as the user", async () => {
    const sessionKey = newKeyPair();
    const { session } = await sdk.stampLogin({ publicKey: sessionKey.publicKey });
    const parsed = coreParseSession(session);
    expect(parsed).toMatchObject({
      sessionType: "SESSION_TYPE_READ_WRITE",
      userId: org.userId,
      organizationId: org.organizationId,
      publicKey: sessionKey.publicKey,
    });
    const lifetime = parsed.expiry - Date.now() / 1000;
    expect(lifetime).toBeGreaterThan(14 * 60);
    expect(lifetime).toBeLessThanOrEqual(15 * 60 + 1);

    // Signed ES256 by the key the deployment publishes.
    const jwks = (await (await fetch(`${h.url}/.well-known/jwks.json`)).json()) as { keys: object[] };
    const { payload, protectedHeader } = await jwtVerify(session, createLocalJWKSet(jwks as never));
    expect(protectedHeader.alg).toBe("ES256");
    expect(payload.user_id).toBe(org.userId);
    const sigil = (await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as { sessionJwks: unknown };
    expect(sigil.sessionJwks).toEqual(jwks);

    const asSession = h.sdk(org, sessionKey, fastPoller);
    expect((await asSession.getWhoami({})).userId).toBe(org.userId);
    const wallet = await asSession.createWallet({ walletName: "made in a session", accounts: [] });
    expect(wallet.walletId).toBeTruthy();
    // The session key is an API key of the user that expires with the session.
    const { apiKeys } = await sdk.getApiKeys({ userId: org.userId });
    const stored = apiKeys.find((k) => k.credential.publicKey === sessionKey.publicKey);
    expect(stored?.expirationSeconds).toBe("900");
  });

  it("refuses a login naming an unknown session profile, issuing no session", async () => {
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => sdk.stampLogin({ publicKey: newKeyPair().publicKey, sessionProfileId: "3c6a9b4e-2f1d-4c8b-9a7e-5d0f1b2c3d4e" }),
      { message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND") },
    );
    expect(JSON.stringify(failure)).toContain("SESSION_PROFILE_NOT_FOUND");
  });

  it("a session key stops working when the session expires: API_KEY_EXPIRED", async () => {
    const sessionKey = newKeyPair();
    await sdk.stampLogin({ publicKey: sessionKey.publicKey, expirationSeconds: "120" });
    const asSession = h.sdk(org, sessionKey, fastPoller);
    expect((await asSession.getWhoami({})).userId).toBe(org.userId);
    offset += 121_000;
    try {
      expect(await errorOf(asSession.getWhoami({}))).toContain("API_KEY_EXPIRED");
      expect(await errorOf(asSession.createWallet({ walletName: "too late", accounts: [] }))).toContain("API_KEY_EXPIRED");
    } finally {
      offset -= 121_000;
    }
  });

  it("invalidateExisting revokes the user's earlier login sessions, not other keys or other kinds", async () => {
    const first = newKeyPair();
    const second = newKeyPair();
    const third = newKeyPair();
    await sdk.stampLogin({ publicKey: first.publicKey });
    await sdk.stampLogin({ publicKey: second.publicKey });
    const target = generateP256KeyPair();
    const readWrite = await sdk.createReadWriteSession({ targetPublicKey: target.publicKeyUncompressed });
    expect((await h.sdk(org, first, fastPoller).getWhoami({})).userId).toBe(org.userId);
    await sdk.stampLogin({ publicKey: third.publicKey, invalidateExisting: true });
    expect(await errorOf(h.sdk(org, first, fastPoller).getWhoami({}))).toContain("PUBLIC_KEY_NOT_FOUND");
    expect(await errorOf(h.sdk(org, second, fastPoller).getWhoami({}))).toContain("PUBLIC_KEY_NOT_FOUND");
    expect((await h.sdk(org, third, fastPoller).getWhoami({})).userId).toBe(org.userId);
    // The root's own API key and the read-write session are other kinds of keys: untouched.
    expect((await sdk.getWhoami({})).userId).toBe(org.userId);
    expect((await h.sdk(org, keyFromBundle(readWrite.credentialBundle, target), fastPoller).getWhoami({})).userId).toBe(org.userId);
  });

  it("a passkey-less API user of another organization cannot log in here", async () => {
    const other = await h.organization("Other");
    const request = signedRequest(
      {
        type: "ACTIVITY_TYPE_STAMP_LOGIN",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { publicKey: newKeyPair().publicKey },
      },
      other.key,
    );
    const response = await h.post("/public/v1/submit/stamp_login", request.body, request.headers);
    expect(response.status).toBe(403);
    expect(JSON.stringify(response.json)).toContain("ORGANIZATION_MISMATCH");
  });

  describe("bad input is refused and changes nothing", () => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ["a public key that is not a P-256 point", { publicKey: "02" + "ff".repeat(32) }, "INVALID_PUBLIC_KEY"],
      ["a public key that is not hex", { publicKey: "not a key" }, "INVALID_PUBLIC_KEY"],
      [
        "a session longer than the server grants",
        { publicKey: newKeyPair().publicKey, expirationSeconds: "86401" },
        "SESSION_EXPIRATION_TOO_LONG",
      ],
      ["an expiration that is not a number", { publicKey: newKeyPair().publicKey, expirationSeconds: "soon" }, "INVALID_EXPIRATION"],
      ["the key the caller already stamps with", { publicKey: "" }, "API_KEY_ALREADY_EXISTS"],
    ];
    it.each(cases)("%s", async (_name, parameters, code) => {
      const params = parameters.publicKey === "" ? { publicKey: org.key.publicKey } : parameters;
      const before = await h.snapshot();
      const request = signedRequest(
        { type: "ACTIVITY_TYPE_STAMP_LOGIN", timestampMs: String(Date.now()), organizationId: org.organizationId, parameters: params },
        org.key,
      );
      const response = await h.post("/public/v1/submit/stamp_login", request.body, request.headers);
      expect(response.status).toBeGreaterThanOrEqual(400);
      expect(JSON.stringify(response.json)).toContain(code);
      // Only the failed activity is recorded.
      const after = JSON.parse(await h.snapshot());
      const earlier = JSON.parse(before);
      expect(after.api_keys).toEqual(earlier.api_keys);
      expect(after.activities.length).toBe(earlier.activities.length + 1);
    });
  });
});

describe("create_read_write_session", () => {
  it("seals a new session key to targetPublicKey; decryptCredentialBundle opens it and the key stamps", async () => {
    const target = generateP256KeyPair();
    const result = await sdk.createReadWriteSession({ targetPublicKey: target.publicKeyUncompressed, apiKeyName: "browser tab" });
    expect(result).toMatchObject({
      organizationId: org.organizationId,
      organizationName: "Sessions",
      userId: org.userId,
      username: "root",
    });
    const key = keyFromBundle(result.credentialBundle, target);
    const client = h.sdk(org, key, fastPoller);
    expect((await client.getWhoami({})).userId).toBe(org.userId);
    const { apiKey } = await sdk.getApiKey({ apiKeyId: result.apiKeyId });
    expect(apiKey).toMatchObject({ apiKeyName: "browser tab", expirationSeconds: "900", credential: { publicKey: key.publicKey } });
  });

  it("V1 names the user by email", async () => {
    const { org: team, root, members } = await organizationWith(h, ["ada"]);
    await root.updateUser({ userId: members.ada!.userId, userEmail: "ada@example.com" });
    const target = generateP256KeyPair();
    const { body, headers } = signedRequest(
      {
        type: "ACTIVITY_TYPE_CREATE_READ_WRITE_SESSION",
        timestampMs: String(Date.now()),
        organizationId: team.organizationId,
        parameters: { targetPublicKey: target.publicKeyUncompressed, email: "ada@example.com" },
      },
      team.key,
    );
    const response = await h.post("/public/v1/submit/create_read_write_session", body, headers);
    expect(response.status).toBe(200);
    const result = response.json.activity.result.createReadWriteSessionResult;
    expect(result.userId).toBe(members.ada!.userId);
    const key = keyFromBundle(result.credentialBundle, target);
    expect((await h.sdk(team, key, fastPoller).getWhoami({})).userId).toBe(members.ada!.userId);
  });

  it("a session for another user needs a policy or the root quorum", async () => {
    const { org: team, root, members } = await organizationWith(h, ["alice", "bob"]);
    const target = generateP256KeyPair();
    // Alice (no policy) may not impersonate Bob...
    expect(
      await errorOf(
        members.alice!.client.createReadWriteSession({ targetPublicKey: target.publicKeyUncompressed, userId: members.bob!.userId }),
      ),
    ).toContain("POLICY_DENIED");
    // ...but may open a session of her own, and the root may open one for Bob.
    await members.alice!.client.createReadWriteSession({ targetPublicKey: target.publicKeyUncompressed });
    const forBob = await root.createReadWriteSession({ targetPublicKey: target.publicKeyUncompressed, userId: members.bob!.userId });
    expect((await h.sdk(team, keyFromBundle(forBob.credentialBundle, target), fastPoller).getWhoami({})).userId).toBe(members.bob!.userId);
  });

  it("refuses a target that is not a P-256 key, creating no key", async () => {
    const before = (await sdk.getApiKeys({ userId: org.userId })).apiKeys.length;
    expect(await errorOf(sdk.createReadWriteSession({ targetPublicKey: "04" + "00".repeat(64) }))).toContain("INVALID_TARGET_PUBLIC_KEY");
    expect((await sdk.getApiKeys({ userId: org.userId })).apiKeys.length).toBe(before);
  });
});

describe("read-only sessions", () => {
  it("create_read_only_session returns a read-only session JWT for an hour", async () => {
    const result = await sdk.createReadOnlySession({});
    expect(result).toMatchObject({ organizationId: org.organizationId, userId: org.userId, username: "root" });
    const parsed = coreParseSession(result.session);
    expect(parsed.sessionType).toBe("SESSION_TYPE_READ_ONLY");
    expect(Number(result.sessionExpiry)).toBe(parsed.expiry);
    expect(parsed.expiry - Date.now() / 1000).toBeGreaterThan(59 * 60);
    // The token reads for an hour: only this response carries it; the audit log keeps it redacted.
    const { activities } = await sdk.getActivities({ filterByType: ["ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION"] });
    expect(activities[0]!.result.createReadOnlySessionResult).toMatchObject({ session: "<redacted>", userId: org.userId });
    expect(JSON.stringify(await h.server.store.db.selectFrom("activities").select(["result", "intent", "votes"]).execute())).not.toContain(
      result.session,
    );
    // A retry cannot be answered with it: the first response was the only one.
    const { body, headers } = signedRequest(
      {
        type: "ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: {},
      },
      org.key,
    );
    expect((await h.post("/public/v1/submit/create_read_only_session", body, headers)).status).toBe(200);
    const retry = await h.post("/public/v1/submit/create_read_only_session", body, headers);
    expect(JSON.stringify(retry.json)).toContain("RESULT_NOT_REPEATABLE");
  });

  it("the browser client sends it as X-Session: it reads as the user, and every write is refused", async () => {
    const { session } = await sdk.createReadOnlySession({});
    const reader = new TurnkeyBrowserClient({ apiBaseUrl: h.url, readOnlySession: session, organizationId: org.organizationId });
    expect((await reader.getWhoami({ organizationId: org.organizationId })).userId).toBe(org.userId);
    expect(Array.isArray((await reader.getWallets({ organizationId: org.organizationId })).wallets)).toBe(true);
    const before = await h.snapshot();
    expect(
      await errorOf(reader.createWallet({ organizationId: org.organizationId, walletName: "not from a read-only session", accounts: [] })),
    ).toContain("READ_ONLY_SESSION");
    expect(await h.snapshot()).toBe(before);
  });

  it("refuses a read-write session JWT, an altered one, an expired one, and one whose credential was deleted", async () => {
    const whoami = (token: string) =>
      new TurnkeyBrowserClient({ apiBaseUrl: h.url, readOnlySession: token, organizationId: org.organizationId }).getWhoami({
        organizationId: org.organizationId,
      });
    // A stamp_login JWT names a key; it is not a bearer credential.
    const { session: readWrite } = await sdk.stampLogin({ publicKey: newKeyPair().publicKey });
    expect(await errorOf(whoami(readWrite))).toContain("SESSION_INVALID");
    const { session } = await sdk.createReadOnlySession({});
    const [header, payload, signature] = session.split(".");
    const claims = JSON.parse(Buffer.from(payload!, "base64url").toString());
    const forged = `${header}.${Buffer.from(JSON.stringify({ ...claims, exp: claims.exp + 86_400 })).toString("base64url")}.${signature}`;
    expect(await errorOf(whoami(forged))).toContain("SESSION_INVALID");
    offset += 3_601_000;
    try {
      expect(await errorOf(whoami(session))).toContain("SESSION_EXPIRED");
    } finally {
      offset -= 3_601_000;
    }
    // A member's session ends with the key that opened it.
    const { members, root } = await organizationWith(h, ["reader"]);
    const { session: memberSession, organizationId } = await members.reader!.client.createReadOnlySession({});
    const asMember = () =>
      new TurnkeyBrowserClient({ apiBaseUrl: h.url, readOnlySession: memberSession, organizationId }).getWhoami({ organizationId });
    expect((await asMember()).userId).toBe(members.reader!.userId);
    const { apiKeys } = await root.getApiKeys({ userId: members.reader!.userId });
    await root.deleteApiKeys({ userId: members.reader!.userId, apiKeyIds: apiKeys.map((k) => k.apiKeyId) });
    expect(await errorOf(asMember())).toContain("SESSION_INVALID");
  });
});
