// Sub-organizations and organization features, through @turnkey/sdk-server (and @turnkey/http for
// the older activity versions): creation in every version, the parent's read-only view, isolation,
// whoami through the parent, delegated access, listing with filters, deletion, and features.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { backend } from "./helpers/backend.js";
import { startOidcIssuer, type TestIssuer } from "./helpers/oidc-issuer.js";
import { startHarness, newKeyPair, signedRequest, type Harness, type TestOrganization, type ApiKeyPair } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { migrationDatabase } from "./helpers/migration-database.js";
import { encryptOauth2ClientSecret } from "@turnkey/crypto";
import { SoftwarePasskey } from "./helpers/passkey.js";

let h: Harness;
let parent: TestOrganization;
let parentSdk: ReturnType<Harness["sdk"]>;

const ethAccount = {
  curve: "CURVE_SECP256K1" as const,
  pathFormat: "PATH_FORMAT_BIP32" as const,
  path: "m/44'/60'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_ETHEREUM" as const,
};

let oidc: TestIssuer;

beforeAll(async () => {
  oidc = await startOidcIssuer();
  h = await startHarness({ SIGIL_OIDC_ALLOWED_ISSUERS: oidc.issuer });
  parent = await h.organization("Parent");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
});
afterAll(async () => {
  await h.close();
  await oidc.close();
});

/** An identity token of the test's issuer for `sub`. */
const oidcToken = (sub: string) => oidc.token({ sub });

/** Every table as it was in the snapshot `before` but the audit log's (activities and their policy evaluations). */
async function expectOnlyAuditLogChanged(before: string): Promise<void> {
  const after = JSON.parse(await h.snapshot());
  for (const [table, rows] of Object.entries(JSON.parse(before)))
    if (table !== "activities" && table !== "policy_evaluations") expect(after[table], table).toEqual(rows);
}

async function subOrganization(
  name: string,
  options: { email?: string; key?: ApiKeyPair; extraRootUsers?: any[]; wallet?: boolean; oauthSubject?: string } = {},
) {
  const key = options.key ?? newKeyPair();
  const result = await parentSdk.createSubOrganization({
    subOrganizationName: name,
    rootQuorumThreshold: 1,
    rootUsers: [
      {
        userName: `${name} owner`,
        ...(options.email ? { userEmail: options.email } : {}),
        apiKeys: [{ apiKeyName: "owner key", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: options.oauthSubject ? [{ providerName: "example", oidcToken: await oidcToken(options.oauthSubject) }] : [],
      },
      ...(options.extraRootUsers ?? []),
    ],
    ...(options.wallet ? { wallet: { walletName: "default", accounts: [ethAccount] } } : {}),
  });
  return { ...result, key, sdk: h.sdk({ organizationId: result.subOrganizationId }, key, fastPoller) };
}

describe("create_sub_organization", () => {
  it("creates a sub-organization (V8, as the client sends it) with its root user, API key and wallet", async () => {
    const sub = await subOrganization("Alice", { email: "alice@example.com", wallet: true });
    expect(sub.subOrganizationId).toMatch(/^[0-9a-f-]{36}$/);
    expect(sub.rootUserIds).toHaveLength(1);
    expect(sub.wallet?.addresses[0]).toMatch(/^0x[0-9a-fA-F]{40}$/);
    const whoami = await sub.sdk.getWhoami({ organizationId: sub.subOrganizationId });
    expect(whoami).toMatchObject({
      organizationId: sub.subOrganizationId,
      organizationName: "Alice",
      userId: sub.rootUserIds![0],
      username: "Alice owner",
    });
    const wallets = await sub.sdk.getWallets({ organizationId: sub.subOrganizationId });
    expect(wallets.wallets.map((w) => w.walletId)).toEqual([sub.wallet!.walletId]);
    // The sub-organization's own key signs with its wallet.
    const signed = await sub.sdk.signRawPayload({
      organizationId: sub.subOrganizationId,
      signWith: sub.wallet!.addresses[0]!,
      payload: "00".repeat(32),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
    expect(signed.r).toMatch(/^[0-9a-f]{64}$/);
    const configs = await sub.sdk.getOrganizationConfigs({ organizationId: sub.subOrganizationId });
    expect(configs.configs.quorum).toEqual({ threshold: 1, userIds: sub.rootUserIds });
    expect(configs.configs.features?.map((f) => f.name).sort()).toEqual([
      "FEATURE_NAME_EMAIL_AUTH",
      "FEATURE_NAME_EMAIL_RECOVERY",
      "FEATURE_NAME_OTP_EMAIL_AUTH",
      "FEATURE_NAME_SMS_AUTH",
    ]);
  });

  it("accepts every version of the activity, each answered under its own result key", async () => {
    const client = h.http(parent.key);
    const key = newKeyPair();
    const rootUser = { userName: "root", apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey }], authenticators: [] };
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    const versions: Array<[string, Record<string, unknown>, string]> = [
      [
        "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION",
        {
          name: "v1",
          rootAuthenticator: { authenticatorName: "laptop", challenge: registration.challenge, attestation: registration.attestation },
        },
        "createSubOrganizationResult",
      ],
      [
        "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V2",
        { subOrganizationName: "v2", rootUsers: [rootUser], rootQuorumThreshold: 1 },
        "createSubOrganizationResult",
      ],
      [
        "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V3",
        {
          subOrganizationName: "v3",
          rootUsers: [rootUser],
          rootQuorumThreshold: 1,
          privateKeys: [{ privateKeyName: "k", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] }],
        },
        "createSubOrganizationResultV3",
      ],
      [
        "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V4",
        { subOrganizationName: "v4", rootUsers: [rootUser], rootQuorumThreshold: 1, wallet: { walletName: "w", accounts: [ethAccount] } },
        "createSubOrganizationResultV4",
      ],
      [
        "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V5",
        { subOrganizationName: "v5", rootUsers: [{ ...rootUser, oauthProviders: [] }], rootQuorumThreshold: 1 },
        "createSubOrganizationResultV5",
      ],
      [
        "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V6",
        {
          subOrganizationName: "v6",
          rootUsers: [
            { ...rootUser, apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }], oauthProviders: [] },
          ],
          rootQuorumThreshold: 1,
        },
        "createSubOrganizationResultV6",
      ],
      [
        "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V7",
        {
          subOrganizationName: "v7",
          rootUsers: [
            {
              ...rootUser,
              userPhoneNumber: "+14155550100",
              apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
              oauthProviders: [],
            },
          ],
          rootQuorumThreshold: 1,
          disableEmailAuth: true,
        },
        "createSubOrganizationResultV7",
      ],
    ];
    for (const [type, parameters, resultKey] of versions) {
      const { activity } = await client.createSubOrganization({
        type,
        organizationId: parent.organizationId,
        timestampMs: String(Date.now()),
        parameters,
      } as any);
      expect(activity.status, type).toBe("ACTIVITY_STATUS_COMPLETED");
      const result = (activity.result as any)[resultKey];
      expect(result.subOrganizationId, type).toMatch(/^[0-9a-f-]{36}$/);
      expect(result.rootUserIds, type).toHaveLength(1);
      if (type.endsWith("_V3")) expect(result.privateKeys[0].addresses[0].address).toMatch(/^0x/);
      if (type.endsWith("_V4")) expect(result.wallet.addresses).toHaveLength(1);
    }
    // The V1 sub-organization's passkey stamps for it.
    const v1 = (await parentSdk.getSubOrgIds({ filterType: "NAME", filterValue: "v1" })).organizationIds[0]!;
    const body = JSON.stringify({ organizationId: v1 });
    const res = await h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": passkey.stamp(body) });
    expect(res.status).toBe(200);
    expect(res.json.organizationId).toBe(v1);
  });

  it("refuses bad requests with their own errors, and creates nothing", async () => {
    const before = await h.snapshot();
    const key = newKeyPair();
    const owner = {
      userName: "owner",
      apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" as const }],
      authenticators: [],
      oauthProviders: [],
    };
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ subOrganizationName: "t", rootUsers: [owner], rootQuorumThreshold: 2 }, "ROOT_QUORUM_THRESHOLD_INVALID"],
      [{ subOrganizationName: "t", rootUsers: [owner], rootQuorumThreshold: 0 }, "ROOT_QUORUM_THRESHOLD_INVALID"],
      [{ subOrganizationName: "t", rootUsers: [], rootQuorumThreshold: 1 }, "REQUEST_INVALID"],
      [{ subOrganizationName: " ", rootUsers: [owner], rootQuorumThreshold: 1 }, "REQUEST_INVALID"],
      [{ subOrganizationName: "t", rootUsers: [{ ...owner, apiKeys: [] }], rootQuorumThreshold: 1 }, "ROOT_USER_WITHOUT_CREDENTIAL"],
      [
        {
          subOrganizationName: "t",
          rootUsers: [{ ...owner, apiKeys: [], userEmail: "a@example.com" }],
          rootQuorumThreshold: 1,
          disableEmailAuth: true,
          disableOtpEmailAuth: true,
        },
        "ROOT_USER_WITHOUT_CREDENTIAL",
      ],
      [{ subOrganizationName: "t", rootUsers: [owner], rootQuorumThreshold: 1, verificationToken: "token" }, "VERIFICATION_TOKEN_INVALID"],
      // A second root user known by email alone with email logins (codes and credentials) turned off:
      // the quorum of two could never be met. (With email auth on, the parent can log it in by email.)
      [
        {
          subOrganizationName: "t",
          rootUsers: [owner, { ...owner, userName: "by email", apiKeys: [], userEmail: "only@example.com" }],
          rootQuorumThreshold: 2,
          disableOtpEmailAuth: true,
          disableEmailAuth: true,
        },
        "ROOT_USER_WITHOUT_CREDENTIAL",
      ],
      [
        {
          subOrganizationName: "t",
          rootUsers: [{ ...owner, apiKeys: [], userPhoneNumber: "+15550001111" }],
          rootQuorumThreshold: 1,
          disableSmsAuth: true,
          disableEmailAuth: true,
          disableOtpEmailAuth: true,
        },
        "ROOT_USER_WITHOUT_CREDENTIAL",
      ],
      [
        {
          subOrganizationName: "t",
          rootUsers: [{ ...owner, apiKeys: [{ apiKeyName: "k", publicKey: "02ff", curveType: "API_KEY_CURVE_P256" }] }],
          rootQuorumThreshold: 1,
        },
        "INVALID_PUBLIC_KEY",
      ],
      [
        {
          subOrganizationName: "t",
          rootUsers: [owner],
          rootQuorumThreshold: 1,
          wallet: { walletName: "w", accounts: [{ ...ethAccount, path: "not a path" }] },
        },
        "INVALID_DERIVATION_PATH",
      ],
      // One public key for two root users, or twice for one: checked within the request (the new
      // organization has no keys of its own to collide with).
      [
        { subOrganizationName: "t", rootUsers: [owner, { ...owner, userName: "second" }], rootQuorumThreshold: 1 },
        "API_KEY_ALREADY_EXISTS",
      ],
      [
        {
          subOrganizationName: "t",
          rootUsers: [{ ...owner, apiKeys: [owner.apiKeys[0], { ...owner.apiKeys[0], apiKeyName: "again" }] }],
          rootQuorumThreshold: 1,
        },
        "API_KEY_ALREADY_EXISTS",
      ],
    ];
    for (const [parameters, code] of cases) {
      const request = signedRequest(
        {
          type: "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V7",
          organizationId: parent.organizationId,
          timestampMs: String(Date.now()),
          parameters,
        },
        parent.key,
      );
      const res = await h.post("/public/v1/submit/create_sub_organization", request.body, request.headers);
      expect(res.status, code).toBeGreaterThanOrEqual(400);
      expect(res.json.details[0].turnkeyErrorCode, JSON.stringify(parameters)).toBe(code);
    }
    // Only the refused activities were recorded.
    await expectOnlyAuditLogChanged(before);
  });

  it("does not let a sub-organization create its own", async () => {
    const sub = await subOrganization("Nested parent");
    const key = newKeyPair();
    await expect(
      sub.sdk.createSubOrganization({
        organizationId: sub.subOrganizationId,
        subOrganizationName: "grandchild",
        rootQuorumThreshold: 1,
        rootUsers: [
          {
            userName: "u",
            apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
            authenticators: [],
            oauthProviders: [],
          },
        ],
      }),
    ).rejects.toThrow(/NESTED_SUB_ORGANIZATION|cannot have their own/);
  });
});

describe("the parent and its sub-organizations", () => {
  it("lets the parent read a sub-organization, but not write in it", async () => {
    const sub = await subOrganization("Readable", { wallet: true });
    const wallets = await parentSdk.getWallets({ organizationId: sub.subOrganizationId });
    expect(wallets.wallets).toHaveLength(1);
    const users = await parentSdk.getUsers({ organizationId: sub.subOrganizationId });
    expect(users.users.map((u) => u.userId)).toEqual(sub.rootUserIds);
    const activities = await parentSdk.getActivities({ organizationId: sub.subOrganizationId });
    expect(Array.isArray(activities.activities)).toBe(true);

    const before = await h.snapshot();
    const request = signedRequest(
      {
        type: "ACTIVITY_TYPE_CREATE_WALLET",
        organizationId: sub.subOrganizationId,
        timestampMs: String(Date.now()),
        parameters: { walletName: "intruder", accounts: [ethAccount] },
      },
      parent.key,
    );
    const res = await h.post("/public/v1/submit/create_wallet", request.body, request.headers);
    expect(res.status).toBe(403);
    expect(res.json.details[0].turnkeyErrorCode).toBe("PARENT_ORGANIZATION_READ_ONLY");
    expect(await h.snapshot()).toBe(before);
  });

  it("keeps sub-organizations apart from each other and from their parent", async () => {
    const a = await subOrganization("Sibling A");
    const b = await subOrganization("Sibling B");
    await expect(a.sdk.getUsers({ organizationId: b.subOrganizationId })).rejects.toThrow(/ORGANIZATION_MISMATCH|does not belong/);
    await expect(a.sdk.getUsers({ organizationId: parent.organizationId })).rejects.toThrow(/ORGANIZATION_MISMATCH|does not belong/);
    await expect(a.sdk.getSubOrgIds({ organizationId: parent.organizationId })).rejects.toThrow(/ORGANIZATION_MISMATCH|does not belong/);
  });

  it("refuses to guess when a key is a credential in several sub-organizations (anyone may register a public key)", async () => {
    const victim = await subOrganization("Victim");
    const attacker = await subOrganization("Attacker");
    // The attacker registers the victim's public key in its own sub-organization.
    await attacker.sdk.createApiKeys({
      userId: attacker.rootUserIds![0]!,
      apiKeys: [{ apiKeyName: "copied", publicKey: victim.key.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    await expect(victim.sdk.getWhoami({ organizationId: parent.organizationId })).rejects.toThrow(
      /AMBIGUOUS_SUB_ORGANIZATION|name the sub-organization/,
    );
    // Naming the sub-organization still works.
    expect((await victim.sdk.getWhoami({ organizationId: victim.subOrganizationId })).organizationId).toBe(victim.subOrganizationId);
  });

  it("answers whoami with the caller's sub-organization when the request names the parent", async () => {
    const sub = await subOrganization("Found through parent");
    const whoami = await sub.sdk.getWhoami({ organizationId: parent.organizationId });
    expect(whoami).toMatchObject({
      organizationId: sub.subOrganizationId,
      organizationName: "Found through parent",
      userId: sub.rootUserIds![0],
    });
    // The parent's own credential is answered as itself.
    expect((await parentSdk.getWhoami({ organizationId: sub.subOrganizationId })).organizationId).toBe(parent.organizationId);
  });

  it("delegated access: a key the parent holds, made a root user at creation, acts under the sub-organization's policies", async () => {
    const endUser = newKeyPair();
    // The parent's own key pair doubles as the delegated key: in the sub-organization, its user there is the one that acts.
    const sub = await parentSdk.createSubOrganization({
      subOrganizationName: "Delegated",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "Delegated Account",
          apiKeys: [{ apiKeyName: "backend", publicKey: parent.key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
        {
          userName: "End user",
          apiKeys: [{ apiKeyName: "device", publicKey: endUser.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
      wallet: { walletName: "main", accounts: [ethAccount] },
    });
    const [delegatedUserId, endUserId] = sub.rootUserIds!;
    const delegated = h.sdk({ organizationId: sub.subOrganizationId }, parent.key, fastPoller);
    expect((await delegated.getWhoami({ organizationId: sub.subOrganizationId })).userId).toBe(delegatedUserId);
    await delegated.createPolicy({
      policyName: "delegated may sign",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${delegatedUserId}')`,
      condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'",
      notes: "",
    });
    await delegated.updateRootQuorum({ threshold: 1, userIds: [endUserId!] });
    // No longer root: it signs because a policy says so, and may do nothing else.
    const signed = await delegated.signRawPayload({
      signWith: sub.wallet!.addresses[0]!,
      payload: "11".repeat(32),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
    expect(signed.s).toMatch(/^[0-9a-f]{64}$/);
    await expect(delegated.createWallet({ walletName: "not allowed", accounts: [ethAccount] })).rejects.toThrow(/POLICY_DENIED|denied/i);
  });
});

describe("list_suborgs and list_verified_suborgs", () => {
  it("lists the parent's sub-organizations, filtered by name, user, email, key, address or OIDC identity, a page at a time", async () => {
    const key = newKeyPair();
    const found = await subOrganization("Filterable", { email: "Filter.Me@example.com", key, wallet: true, oauthSubject: "subject-123" });
    await subOrganization("Other");
    const ids = async (filterType?: string, filterValue?: string) =>
      (await parentSdk.getSubOrgIds(filterType ? { filterType, filterValue } : {})).organizationIds;
    expect(await ids("NAME", "Filterable")).toEqual([found.subOrganizationId]);
    expect(await ids("USERNAME", "Filterable owner")).toEqual([found.subOrganizationId]);
    expect(await ids("EMAIL", "filter.me@example.com")).toEqual([found.subOrganizationId]);
    expect(await ids("PUBLIC_KEY", key.publicKey)).toEqual([found.subOrganizationId]);
    expect(await ids("WALLET_ACCOUNT_ADDRESS", found.wallet!.addresses[0])).toEqual([found.subOrganizationId]);
    expect(await ids("OIDC_TOKEN", await oidcToken("subject-123"))).toEqual([found.subOrganizationId]);
    expect(await ids("OIDC_TOKEN", await oidcToken("someone-else"))).toEqual([]);
    expect(await ids("NAME", "nobody")).toEqual([]);

    const all = (await parentSdk.getSubOrgIds({ paginationOptions: { limit: "100" } })).organizationIds;
    expect(all.length).toBeGreaterThanOrEqual(2);
    const first = (await parentSdk.getSubOrgIds({ paginationOptions: { limit: "1" } })).organizationIds;
    const second = (await parentSdk.getSubOrgIds({ paginationOptions: { limit: "1", after: first[0] } })).organizationIds;
    expect([...first, ...second]).toEqual(all.slice(0, 2));
    const back = (await parentSdk.getSubOrgIds({ paginationOptions: { limit: "1", before: second[0] } })).organizationIds;
    expect(back).toEqual(first);
  });

  it("refuses an unknown filter type and a filter without a value", async () => {
    await expect(parentSdk.getSubOrgIds({ filterType: "FAVOURITE_COLOUR", filterValue: "blue" })).rejects.toThrow(
      /FILTER_TYPE_INVALID|filterType must be one of/,
    );
    await expect(parentSdk.getSubOrgIds({ filterType: "EMAIL" })).rejects.toThrow(/filterValue is needed/);
    await expect(parentSdk.getVerifiedSubOrgIds({ filterType: "USERNAME", filterValue: "x" })).rejects.toThrow(
      /filterType must be one of EMAIL, PHONE_NUMBER/,
    );
  });

  it("lists as verified only sub-organizations whose contact was proven", async () => {
    const sub = await subOrganization("Verified", { email: "verified@example.com" });
    expect((await parentSdk.getVerifiedSubOrgIds({ filterType: "EMAIL", filterValue: "verified@example.com" })).organizationIds).toEqual(
      [],
    );
    // What a successful one-time-password verification records for the user.
    await h.server.store.db.updateTable("users").set({ email_verified_at: Date.now() }).where("id", "=", sub.rootUserIds![0]!).execute();
    expect((await parentSdk.getVerifiedSubOrgIds({ filterType: "EMAIL", filterValue: "verified@example.com" })).organizationIds).toEqual([
      sub.subOrganizationId,
    ]);
  });
});

describe("delete_sub_organization", () => {
  it("is refused to the parent, and while a wallet was never exported; then deletes everything but the audit log", async () => {
    const sub = await subOrganization("Doomed", { wallet: true });
    const parentAttempt = signedRequest(
      {
        type: "ACTIVITY_TYPE_DELETE_SUB_ORGANIZATION",
        organizationId: sub.subOrganizationId,
        timestampMs: String(Date.now()),
        parameters: { deleteWithoutExport: true },
      },
      parent.key,
    );
    const refused = await h.post("/public/v1/submit/delete_sub_organization", parentAttempt.body, parentAttempt.headers);
    expect(refused.status).toBe(403);
    expect(refused.json.details[0].turnkeyErrorCode).toBe("PARENT_ORGANIZATION_READ_ONLY");

    const before = await h.snapshot();
    await expect(sub.sdk.deleteSubOrganization({ organizationId: sub.subOrganizationId })).rejects.toThrow(
      /WALLET_NOT_EXPORTED|never exported/,
    );
    await expectOnlyAuditLogChanged(before);

    // Something of every kind the organization can hold beyond its wallet and users: each must go too.
    const { tlsFetcherEncryptPublicKey } = (await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as {
      tlsFetcherEncryptPublicKey: string;
    };
    await sub.sdk.createOauth2Credential({
      provider: "OAUTH2_PROVIDER_X",
      clientId: "doomed-client",
      encryptedClientSecret: await encryptOauth2ClientSecret("doomed-client-secret", tlsFetcherEncryptPublicKey),
    });
    await sub.sdk.createSessionProfile({ sessionProfileName: "doomed", scope: "true" });
    await sub.sdk.createMfaPolicy({
      userId: (await sub.sdk.getWhoami({})).userId,
      mfaPolicyName: "never",
      condition: "false",
      requiredAuthenticationMethods: [{ any: [{ type: "AUTHENTICATION_TYPE_API_KEY" }] }],
      order: 0,
    });

    const deleted = await sub.sdk.deleteSubOrganization({ organizationId: sub.subOrganizationId, deleteWithoutExport: true });
    expect(deleted.subOrganizationUuid).toBe(sub.subOrganizationId);
    await expect(sub.sdk.getWhoami({ organizationId: sub.subOrganizationId })).rejects.toThrow(/PUBLIC_KEY_NOT_FOUND|no API key/);
    await expect(parentSdk.getUsers({ organizationId: sub.subOrganizationId })).rejects.toThrow(/ORGANIZATION_NOT_FOUND|not found/);
    expect((await parentSdk.getSubOrgIds({ filterType: "NAME", filterValue: "Doomed" })).organizationIds).toEqual([]);
    const db = h.server.store.db;
    expect(await db.selectFrom("wallets").select("id").where("organization_id", "=", sub.subOrganizationId).execute()).toEqual([]);
    expect(await db.selectFrom("wallet_accounts").select("id").where("organization_id", "=", sub.subOrganizationId).execute()).toEqual([]);
    expect(
      (await db.selectFrom("activities").select("id").where("organization_id", "=", sub.subOrganizationId).execute()).length,
    ).toBeGreaterThan(0);
    // Only the audit log (and the organization's own row, marked deleted) remains: any table a later
    // change adds is held to this too.
    const left = Object.entries(JSON.parse(await h.snapshot()) as Record<string, string[]>)
      .filter(([table, rows]) =>
        rows
          .map((row) => JSON.parse(row))
          .some((row) => (table === "organizations" ? row.id : row.organization_id) === sub.subOrganizationId),
      )
      .map(([table]) => table)
      .sort();
    expect(left).toEqual(["activities", "organizations", "policy_evaluations"]);
  });
});

describe("organization features", () => {
  it("are set and removed by the root quorum, and read with the organization's configuration", async () => {
    const sub = await subOrganization("Features");
    const set = await sub.sdk.setOrganizationFeature({
      name: "FEATURE_NAME_WEBAUTHN_ORIGINS",
      value: "https://app.example.com, https://admin.example.com",
    });
    expect(set.features).toContainEqual({
      name: "FEATURE_NAME_WEBAUTHN_ORIGINS",
      value: "https://app.example.com,https://admin.example.com",
    });
    const removed = await sub.sdk.removeOrganizationFeature({ name: "FEATURE_NAME_EMAIL_AUTH" });
    expect(removed.features.map((f) => f.name)).not.toContain("FEATURE_NAME_EMAIL_AUTH");
    const configs = await parentSdk.getOrganizationConfigs({ organizationId: sub.subOrganizationId });
    expect(configs.configs.features).toEqual(removed.features);
  });

  it("a sign-up's login features are bits of its organization's row; given a value a login feature is a row and keeps it", async () => {
    const sub = await subOrganization("Feature bits");
    const db = h.server.store.db;
    const stored = async () => ({
      bits: Number(
        (await db.selectFrom("organizations").select("login_features").where("id", "=", sub.subOrganizationId).executeTakeFirstOrThrow())
          .login_features,
      ),
      rows: await db
        .selectFrom("organization_features")
        .select(["name", "value"])
        .where("organization_id", "=", sub.subOrganizationId)
        .execute(),
    });
    // The four defaults: no row of organization_features, four bits.
    expect(await stored()).toEqual({ bits: 15, rows: [] });
    const set = await sub.sdk.setOrganizationFeature({ name: "FEATURE_NAME_SMS_AUTH", value: "on" });
    expect(set.features).toContainEqual({ name: "FEATURE_NAME_SMS_AUTH", value: "on" });
    expect(set.features.filter((f) => f.name === "FEATURE_NAME_SMS_AUTH")).toHaveLength(1);
    expect(await stored()).toEqual({ bits: 7, rows: [{ name: "FEATURE_NAME_SMS_AUTH", value: "on" }] });
    const again = await sub.sdk.setOrganizationFeature({ name: "FEATURE_NAME_SMS_AUTH", value: "" });
    expect(again.features.map((f) => f.name)).toEqual([
      "FEATURE_NAME_EMAIL_AUTH",
      "FEATURE_NAME_EMAIL_RECOVERY",
      "FEATURE_NAME_OTP_EMAIL_AUTH",
      "FEATURE_NAME_SMS_AUTH",
    ]);
    expect(await stored()).toEqual({ bits: 15, rows: [] });
    await sub.sdk.setOrganizationFeature({ name: "FEATURE_NAME_EMAIL_RECOVERY", value: "kept" });
    const removed = await sub.sdk.removeOrganizationFeature({ name: "FEATURE_NAME_EMAIL_RECOVERY" });
    expect(removed.features.map((f) => f.name)).not.toContain("FEATURE_NAME_EMAIL_RECOVERY");
    await sub.sdk.removeOrganizationFeature({ name: "FEATURE_NAME_SMS_AUTH" });
    expect(await stored()).toEqual({ bits: 5, rows: [] });
    // Removed twice: refused, and nothing changed.
    const before = await h.snapshot();
    await expect(sub.sdk.removeOrganizationFeature({ name: "FEATURE_NAME_SMS_AUTH" })).rejects.toThrow(/FEATURE_NOT_FOUND|not set/);
    await expectOnlyAuditLogChanged(before);
    const configs = await parentSdk.getOrganizationConfigs({ organizationId: sub.subOrganizationId });
    expect(configs.configs.features).toEqual([
      { name: "FEATURE_NAME_EMAIL_AUTH", value: "" },
      { name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" },
    ]);
  });

  it("a root user reachable only by email keeps the organization from turning off the last email login, bit or row", async () => {
    const key = newKeyPair();
    // The owner's only lasting way in is its email: its API key expires.
    const created = await parentSdk.createSubOrganization({
      subOrganizationName: "Email only",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "email owner",
          userEmail: "email-only@example.com",
          apiKeys: [{ apiKeyName: "session", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "3600" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const sdk = h.sdk({ organizationId: created.subOrganizationId }, key, fastPoller);
    await sdk.removeOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH" });
    // EMAIL_AUTH as a row with a value still serves the email.
    await sdk.setOrganizationFeature({ name: "FEATURE_NAME_EMAIL_AUTH", value: "row" });
    const before = await h.snapshot();
    await expect(sdk.removeOrganizationFeature({ name: "FEATURE_NAME_EMAIL_AUTH" })).rejects.toThrow(/ROOT_QUORUM_UNREACHABLE|locked out/);
    await expectOnlyAuditLogChanged(before);
    // As a bit, the same.
    await sdk.setOrganizationFeature({ name: "FEATURE_NAME_EMAIL_AUTH", value: "" });
    await expect(sdk.removeOrganizationFeature({ name: "FEATURE_NAME_EMAIL_AUTH" })).rejects.toThrow(/ROOT_QUORUM_UNREACHABLE|locked out/);
    const configs = await parentSdk.getOrganizationConfigs({ organizationId: created.subOrganizationId });
    expect(configs.configs.features?.map((f) => f.name)).toContain("FEATURE_NAME_EMAIL_AUTH");
  });

  it("refuses malformed values, unknown features, and a non-root user even with a policy allowing it", async () => {
    const sub = await subOrganization("Feature rules");
    const before = await h.snapshot();
    await expect(
      sub.sdk.setOrganizationFeature({ name: "FEATURE_NAME_WEBAUTHN_ORIGINS", value: "https://app.example.com/path" }),
    ).rejects.toThrow(/not an origin/);
    await expect(
      sub.sdk.setOrganizationFeature({ name: "FEATURE_NAME_WEBHOOK", value: "https://user:secret@hooks.example.com/" }),
    ).rejects.toThrow(/credentials/);
    await expect(sub.sdk.setOrganizationFeature({ name: "FEATURE_NAME_TELEPORT" as any, value: "" })).rejects.toThrow();
    await expect(sub.sdk.removeOrganizationFeature({ name: "FEATURE_NAME_WEBHOOK" })).rejects.toThrow(/FEATURE_NOT_FOUND|not set/);
    await expectOnlyAuditLogChanged(before);

    const member = newKeyPair();
    const created = await sub.sdk.createUsers({
      users: [
        {
          userName: "member",
          apiKeys: [{ apiKeyName: "m", publicKey: member.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    await sub.sdk.createPolicy({
      policyName: "allow everything",
      effect: "EFFECT_ALLOW",
      condition: "true",
      consensus: `approvers.any(user, user.id == '${created.userIds[0]}')`,
      notes: "",
    });
    const memberSdk = h.sdk({ organizationId: sub.subOrganizationId }, member, fastPoller);
    await expect(memberSdk.setOrganizationFeature({ name: "FEATURE_NAME_SMS_AUTH", value: "" })).rejects.toThrow(
      /root quorum|POLICY_DENIED|denied/i,
    );
  });

  it("narrows, never widens, the operator's WebAuthn origins", async () => {
    const strict = await startHarness({ SIGIL_WEBAUTHN_ORIGINS: "https://wallet.example.com" });
    try {
      const organization = await strict.organization("Strict");
      const organizationSdk = strict.sdk(organization, organization.key, fastPoller);
      const passkey = new SoftwarePasskey(undefined, "https://evil.example.com");
      const registration = new SoftwarePasskey(undefined, "https://wallet.example.com");
      const reg = registration.register();
      await organizationSdk.createUsers({
        users: [
          {
            userName: "p",
            apiKeys: [],
            authenticators: [{ authenticatorName: "phone", challenge: reg.challenge, attestation: reg.attestation as any }],
            oauthProviders: [],
            userTags: [],
          },
        ],
      });
      await organizationSdk.setOrganizationFeature({
        name: "FEATURE_NAME_WEBAUTHN_ORIGINS",
        value: "https://evil.example.com,https://wallet.example.com",
      });
      const body = JSON.stringify({ organizationId: organization.organizationId });
      // Same credential, asserted from an origin the organization lists but the operator does not.
      Object.assign(passkey, { credentialId: registration.credentialId, keyPair: (registration as any).keyPair });
      expect((await strict.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": passkey.stamp(body) })).status).toBe(401);
      expect((await strict.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": registration.stamp(body) })).status).toBe(200);
    } finally {
      await strict.close();
    }
  });

  it("limits passkey stamps to the WebAuthn origins the parent sets, for its sub-organizations too", async () => {
    const sub = await subOrganization("Origins");
    const passkey = new SoftwarePasskey(undefined, "https://wallet.example.com");
    const registration = passkey.register();
    await sub.sdk.createUsers({
      users: [
        {
          userName: "passkey user",
          apiKeys: [],
          authenticators: [{ authenticatorName: "phone", challenge: registration.challenge, attestation: registration.attestation as any }],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    const whoami = async () => {
      const body = JSON.stringify({ organizationId: sub.subOrganizationId });
      return h.post("/public/v1/query/whoami", body, { "X-Stamp-Webauthn": passkey.stamp(body) });
    };
    expect((await whoami()).status).toBe(200);
    await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_WEBAUTHN_ORIGINS", value: "https://other.example.com" });
    try {
      expect((await whoami()).status).toBe(401);
      await parentSdk.setOrganizationFeature({
        name: "FEATURE_NAME_WEBAUTHN_ORIGINS",
        value: "https://other.example.com,https://wallet.example.com",
      });
      expect((await whoami()).status).toBe(200);
    } finally {
      await parentSdk.removeOrganizationFeature({ name: "FEATURE_NAME_WEBAUTHN_ORIGINS" });
    }
  });
});

describe("the parent's lock during sign-ups", () => {
  /** Resolves once a PostgreSQL backend waits for a row lock on the organizations table (a statement
   * stuck behind the holder's lock), the observable sign that a request is queued behind it. */
  async function someoneWaitsBehind(holder: pg.Client, settled: () => boolean) {
    for (;;) {
      // The holder is inside its transaction, where PostgreSQL keeps the first read of the activity
      // statistics until the transaction ends: each look asks for a fresh one.
      await holder.query("select pg_stat_clear_snapshot()");
      const { rows } = await holder.query(
        "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%from \"organizations\"%for%'",
      );
      if (rows[0].n > 0) return;
      if (settled()) throw new Error("the request was answered instead of waiting for the holder");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it("on PostgreSQL, a sign-up holds its parent's row shared: it completes while another transaction shares the row, and waits while one holds it exclusively", async () => {
    // SQLite has one write lock for every organization and activity: there is no row to share.
    if (backend !== "postgres") return;
    const holder = new pg.Client({ connectionString: h.database.databaseUrl! });
    await holder.connect();
    try {
      // Held shared (as a concurrent sign-up holds it): a sign-up goes through, but a change to the
      // parent (a policy) waits for the holder.
      await holder.query("begin");
      await holder.query("select id from organizations where id = $1 for share", [parent.organizationId]);
      const outcome = await Promise.race([
        subOrganization("Beside a shared holder").then(() => "signed up while the parent's row was held shared"),
        new Promise((resolve) => setTimeout(resolve, 10_000, "the sign-up waited for the shared holder")),
      ]);
      expect(outcome).toBe("signed up while the parent's row was held shared");
      let policyDone = false;
      const policy = parentSdk
        .createPolicy({ policyName: "while held", effect: "EFFECT_DENY", condition: "activity.resource == 'POLICY'", notes: "" })
        .finally(() => (policyDone = true));
      await someoneWaitsBehind(holder, () => policyDone);
      await holder.query("rollback");
      expect((await policy).policyId).toMatch(/^[0-9a-f-]{36}$/);

      // Held exclusively (as a policy change holds it): the sign-up waits, then completes.
      await holder.query("begin");
      await holder.query("select id from organizations where id = $1 for update", [parent.organizationId]);
      let signUpDone = false;
      const signUp = subOrganization("Behind an exclusive holder").finally(() => (signUpDone = true));
      await someoneWaitsBehind(holder, () => signUpDone);
      await holder.query("rollback");
      expect((await signUp).subOrganizationId).toMatch(/^[0-9a-f-]{36}$/);
    } finally {
      await holder.query("rollback").catch(() => undefined);
      await holder.end();
    }
  });

  it("sign-ups sent at once into one parent all complete, each with its own sub-organization", async () => {
    const created = await Promise.all(Array.from({ length: 8 }, (_, i) => subOrganization(`At once ${i}`, { wallet: true })));
    const ids = new Set(created.map((c) => c.subOrganizationId));
    expect(ids.size).toBe(8);
    const { organizationIds } = await parentSdk.getSubOrgIds({ filterType: "NAME", filterValue: "At once 3" });
    expect(organizationIds).toEqual([created[3]!.subOrganizationId]);
    for (const c of created) expect((await c.sdk.getWallets({ organizationId: c.subOrganizationId })).wallets).toHaveLength(1);
  });
});

describe("migration 0031_login_feature_bits", () => {
  it("folds the login features set without a value into their organization's bits and keeps every other feature as it was", async () => {
    const { db, migrateThrough, close } = await migrationDatabase();
    try {
      await migrateThrough("0029_users_by_email");
      for (const id of ["sub", "valued", "none"])
        await db.insertInto("organizations").values({ id, name: id, root_quorum_threshold: 1, created_at: 1, updated_at: 1 }).execute();
      const feature = (organization_id: string, name: string, value: string) => ({
        organization_id,
        name,
        value,
        created_at: 1,
        updated_at: 1,
      });
      await db
        .insertInto("organization_features")
        .values([
          feature("sub", "FEATURE_NAME_EMAIL_AUTH", ""),
          feature("sub", "FEATURE_NAME_EMAIL_RECOVERY", ""),
          feature("sub", "FEATURE_NAME_OTP_EMAIL_AUTH", ""),
          feature("sub", "FEATURE_NAME_SMS_AUTH", ""),
          feature("sub", "FEATURE_NAME_WEBHOOK", "https://hooks.example/sub"),
          feature("valued", "FEATURE_NAME_OTP_EMAIL_AUTH", ""),
          feature("valued", "FEATURE_NAME_SMS_AUTH", "kept"),
        ])
        .execute();
      await migrateThrough("0031_login_feature_bits");
      const organizations = await db.selectFrom("organizations").select(["id", "login_features"]).orderBy("id").execute();
      expect(organizations.map((o) => [o.id, Number(o.login_features)])).toEqual([
        ["none", 0],
        ["sub", 15],
        ["valued", 4],
      ]);
      expect(
        await db.selectFrom("organization_features").select(["organization_id", "name", "value"]).orderBy("organization_id").execute(),
      ).toEqual([
        { organization_id: "sub", name: "FEATURE_NAME_WEBHOOK", value: "https://hooks.example/sub" },
        { organization_id: "valued", name: "FEATURE_NAME_SMS_AUTH", value: "kept" },
      ]);
    } finally {
      await close();
    }
  });
});
