// Query stamps sign only the body, which has no timestamp: a captured query answers again for as long
// as its credential lives. SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS bounds that life for queries: API
// keys (session keys included) and read-only sessions older than it are refused; submits, which
// carry their own timestamp, and passkeys, which are meant to last, are not.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyBrowserClient } from "@turnkey/sdk-browser";
import { startHarness, newKeyPair, signedRequest, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { errorOf } from "./helpers/logins.js";
import { SoftwarePasskey } from "./helpers/passkey.js";

const HOUR = 3_600_000;
const ERROR_DETAIL = "type.googleapis.com/errors.v1.TurnkeyErrorDetail";

describe("with SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS", () => {
  let h: Harness;
  let org: TestOrganization;
  // The server's clock runs `offset` ms ahead of the test's, so credentials can be made old.
  let offset = 0;

  beforeAll(async () => {
    h = await startHarness(
      { SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS: "3600", SIGIL_READ_ONLY_SESSION_SECONDS: "86400", SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400" },
      { clock: () => Date.now() + offset },
    );
  });
  afterAll(() => h.close());

  it("a captured query answers again while its key is young, and is refused once the key is older than the limit", async () => {
    org = await h.organization("Replay");
    offset = 0;
    const captured = signedRequest({ organizationId: org.organizationId }, org.key);
    const first = await h.post("/public/v1/query/whoami", captured.body, captured.headers);
    expect(first.status).toBe(200);
    // The same bytes, sent again, by anyone who saw them: the same answer (and on another endpoint that takes the same body).
    expect((await h.post("/public/v1/query/whoami", captured.body, captured.headers)).status).toBe(200);
    expect((await h.post("/public/v1/query/list_wallets", captured.body, captured.headers)).status).toBe(200);

    offset = HOUR; // the key is now exactly as old as the limit
    const before = await h.snapshot();
    const replay = await h.post("/public/v1/query/whoami", captured.body, captured.headers);
    expect(replay.status).toBe(401);
    expect(replay.json.code).toBe(16);
    expect(replay.json.details).toEqual([{ "@type": ERROR_DETAIL, turnkeyErrorCode: "CREDENTIAL_TOO_OLD_FOR_QUERIES" }]);
    expect(replay.json.message).toContain(`API key ${org.apiKeyId} is more than 3600 s old`);
    expect(replay.json.message).toContain("SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS");
    expect((await h.post("/public/v1/query/list_wallets", captured.body, captured.headers)).status).toBe(401);
    // The official client gets the same refusal for a fresh stamp by the same key.
    expect(await errorOf(h.sdk(org, org.key, fastPoller).getWallets({}))).toContain("CREDENTIAL_TOO_OLD_FOR_QUERIES");
    expect(await h.snapshot()).toBe(before);
  });

  it("the old key still submits (a submit's timestamp bounds its own replay), and the key it creates queries", async () => {
    offset = HOUR + 1000;
    const old = h.sdk(org, org.key, fastPoller);
    const fresh = newKeyPair();
    await old.createApiKeys({
      userId: org.userId,
      apiKeys: [{ apiKeyName: "rotated", publicKey: fresh.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    expect((await h.sdk(org, fresh, fastPoller).getWhoami({})).userId).toBe(org.userId);
    // A session key is an API key too: young when the login makes it, old an hour later.
    const sessionKey = newKeyPair();
    await old.stampLogin({ publicKey: sessionKey.publicKey, expirationSeconds: "86400" });
    const asSession = h.sdk(org, sessionKey, fastPoller);
    expect((await asSession.getWhoami({})).userId).toBe(org.userId);
    offset += HOUR;
    expect(await errorOf(asSession.getWhoami({}))).toContain("CREDENTIAL_TOO_OLD_FOR_QUERIES");
  });

  it("a read-only session answers queries only for the limit after it was issued, even if it expires later", async () => {
    offset = 0;
    const reader = await h.organization("Reader");
    const { session } = await h.sdk(reader, reader.key, fastPoller).createReadOnlySession({});
    const whoami = () =>
      new TurnkeyBrowserClient({ apiBaseUrl: h.url, readOnlySession: session, organizationId: reader.organizationId }).getWhoami({
        organizationId: reader.organizationId,
      });
    expect((await whoami()).userId).toBe(reader.userId);
    offset = HOUR + 1000;
    const before = await h.snapshot();
    expect(await errorOf(whoami())).toContain("CREDENTIAL_TOO_OLD_FOR_QUERIES");
    const raw = await h.post("/public/v1/query/whoami", JSON.stringify({ organizationId: reader.organizationId }), {
      "X-Session": session,
    });
    expect(raw.status).toBe(401);
    expect(raw.json.details[0].turnkeyErrorCode).toBe("CREDENTIAL_TOO_OLD_FOR_QUERIES");
    expect(raw.json.message).toContain("the read-only session is more than 3600 s old");
    expect(await h.snapshot()).toBe(before);
  });

  it("passkeys are not limited: a user cannot replace one the way a program rotates a key", async () => {
    offset = 0;
    const holder = await h.organization("Passkeys");
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    await h.sdk(holder, holder.key, fastPoller).createUsers({
      users: [
        {
          userName: "passkey user",
          apiKeys: [],
          oauthProviders: [],
          userTags: [],
          authenticators: [
            { authenticatorName: "laptop", challenge: registration.challenge, attestation: registration.attestation as any },
          ],
        },
      ],
    });
    offset = 10 * HOUR;
    const body = JSON.stringify({ organizationId: holder.organizationId });
    const response = await h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": passkey.stamp(body) });
    expect(response.status).toBe(200);
    expect(response.json.username).toBe("passkey user");
  });
});

describe("without the setting (the default)", () => {
  let h: Harness;
  let offset = 0;
  beforeAll(async () => {
    h = await startHarness({}, { clock: () => Date.now() + offset });
  });
  afterAll(() => h.close());

  it("an API key queries however old it is", async () => {
    expect(h.config.queryCredentialMaxAgeMs).toBeNull();
    const org = await h.organization("No limit");
    offset = 10 * 365 * 24 * HOUR;
    const captured = signedRequest({ organizationId: org.organizationId }, org.key);
    expect((await h.post("/public/v1/query/whoami", captured.body, captured.headers)).status).toBe(200);
  });
});
