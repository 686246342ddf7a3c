// IP allowlists end to end, through @turnkey/sdk-server as a backend drives them: set_ip_allowlist,
// get_ip_allowlist and remove_ip_allowlist, and their enforcement on real connections. The server
// listens on both loopback families (127.0.0.1 and ::1); a client binds its source address (127.0.0.1,
// 127.0.0.2, ::1) through an undici Agent's `connect.localAddress`, so the allowed and the refused path
// both run over TCP. A refusal leaves every table as it was (the full-table snapshot), not even an
// activity; the way back for a locked-out organization is the operator's command or a root passkey.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { Agent, getGlobalDispatcher, setGlobalDispatcher } from "undici";
import { Turnkey } from "@turnkey/sdk-server";
import { TurnkeyClient } from "@turnkey/http";
import { WebauthnStamper } from "@turnkey/webauthn-stamper";
import {
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  startHarness,
  type ApiKeyPair,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { fastPoller, organizationWith } from "./helpers/organizations.js";
import { SoftwarePasskey } from "./helpers/passkey.js";

let h: Harness;
let v4: string;
let v6: string;

beforeAll(async () => {
  h = await startHarness({}, { host: "localhost" });
  const port = new URL(h.url).port;
  v4 = `http://127.0.0.1:${port}`;
  v6 = `http://[::1]:${port}`;
});
afterAll(() => h.close());

/** Runs `work` with every fetch of this process leaving from `localAddress`. */
async function from<T>(localAddress: string, work: () => Promise<T>): Promise<T> {
  const previous = getGlobalDispatcher();
  const agent = new Agent({ connect: { localAddress } });
  setGlobalDispatcher(agent);
  try {
    return await work();
  } finally {
    setGlobalDispatcher(previous);
    await agent.close();
  }
}

/** sdk-server's client for `org` with `key`, at `base` (v4 or v6). */
function client(org: { organizationId: string }, key: ApiKeyPair, base = v4) {
  return new Turnkey({
    apiBaseUrl: base,
    apiPublicKey: key.publicKey,
    apiPrivateKey: key.privateKey,
    defaultOrganizationId: org.organizationId,
    ...fastPoller,
  }).apiClient();
}

/** A submit whose refusal changed nothing at all: no activity, no row anywhere. */
async function refusedChangingNothing(attempt: () => Promise<unknown>, rejection: Record<string, unknown>) {
  const before = await h.snapshot();
  await expect(attempt()).rejects.toMatchObject(rejection);
  expect(await h.snapshot()).toEqual(before);
}

const notAllowed = (address: string) => ({ code: 7, message: expect.stringContaining(`requests from ${address} are not allowed`) });

async function lockTo(org: TestOrganization, cidrs: string[], extra: Record<string, unknown> = {}) {
  await from("127.0.0.1", () =>
    client(org, org.key).setIpAllowlist({ enabled: true, rules: cidrs.map((cidr) => ({ cidr, label: "test" })), ...extra }),
  );
}

describe("set_ip_allowlist and get_ip_allowlist", () => {
  it("stores the organization's list normalized (host bits cleared, duplicates kept once with the first label) and answers it", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    expect(await root.getIpAllowlist({})).toEqual(
      expect.objectContaining({ allowlist: { organizationId: org.organizationId, rules: [] } }),
    );
    const set = await root.setIpAllowlist({
      enabled: false,
      rules: [
        { cidr: "192.168.1.100/24", label: "Office" },
        { cidr: "2001:DB8:0:0:1::5/48" },
        { cidr: "192.168.1.7/24", label: "again" },
        { cidr: "203.0.113.42/32", label: "Server" },
      ],
    });
    expect(set.activity).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED", type: "ACTIVITY_TYPE_SET_IP_ALLOWLIST" });
    expect(set.activity.intent.setIpAllowlistIntent).toMatchObject({ enabled: false });
    const { allowlist } = await root.getIpAllowlist({});
    expect(allowlist).toMatchObject({ organizationId: org.organizationId, enabled: false, onEvaluationError: "DENY" });
    expect(allowlist.publicKey).toBeUndefined();
    expect(allowlist.rules.map((r) => [r.cidr, r.label])).toEqual([
      ["192.168.1.0/24", "Office"],
      ["2001:db8::/48", ""],
      ["203.0.113.42/32", "Server"],
    ]);
    const firstCreatedAt = allowlist.rules[0]!.createdAt;
    expect(Number(firstCreatedAt)).toBeGreaterThan(0);

    // A replacement is whole: the rule left out is gone, a kept block keeps its createdAt.
    await root.setIpAllowlist({ enabled: false, onEvaluationError: "ALLOW", rules: [{ cidr: "192.168.1.0/24", label: "Renamed" }] });
    const replaced = (await root.getIpAllowlist({})).allowlist;
    expect(replaced).toMatchObject({
      onEvaluationError: "ALLOW",
      rules: [{ cidr: "192.168.1.0/24", label: "Renamed", createdAt: firstCreatedAt }],
    });

    // A disabled list is stored, not enforced: 127.0.0.2 is outside it and still gets through.
    await from("127.0.0.2", () => root.getWhoami({}));
  });

  it("keeps one list per API key, answered under its public key, with no enabled switch of its own", async () => {
    const { org, root, members } = await organizationWith(h, ["app"]);
    await root.setIpAllowlist({ publicKey: members.app!.key.publicKey, rules: [{ cidr: "10.1.2.3/24", label: "App" }] });
    const { allowlist } = await root.getIpAllowlist({ publicKey: members.app!.key.publicKey });
    expect(allowlist).toMatchObject({
      organizationId: org.organizationId,
      publicKey: members.app!.key.publicKey,
      onEvaluationError: "DENY",
      rules: [{ cidr: "10.1.2.0/24", label: "App" }],
    });
    expect(allowlist.enabled).toBeUndefined();
    expect((await root.getIpAllowlist({})).allowlist.rules).toEqual([]);

    // Deleting the key deletes its list.
    const keyId = (await root.getApiKeys({ userId: members.app!.userId })).apiKeys[0]!.apiKeyId;
    await root.deleteApiKeys({ userId: members.app!.userId, apiKeyIds: [keyId] });
    const left = await h.server.store.db
      .selectFrom("ip_allowlists")
      .select("api_key_id")
      .where("organization_id", "=", org.organizationId)
      .execute();
    expect(left).toEqual([]);
  });
});

describe("bad lists are refused, changing nothing but their failed activity", () => {
  let org: TestOrganization;
  let root: ReturnType<typeof client>;
  beforeAll(async () => {
    org = await h.organization();
    root = client(org, org.key);
    await root.setIpAllowlist({ enabled: false, rules: [{ cidr: "198.51.100.0/24", label: "kept" }] });
  });
  const refused = (parameters: Record<string, unknown>, rejection: Record<string, unknown>) =>
    refusedLeavingOnlyItsActivity(h, () => root.setIpAllowlist(parameters as never), rejection);

  it("a malformed CIDR, naming its index and value", async () => {
    for (const cidr of [
      "10.0.0.0",
      "10.0.0.256/24",
      "10.0.0.0/33",
      "010.0.0.0/24",
      "2001:db8::/129",
      "fe80::1%eth0/64",
      "example.com/24",
      "10.0.0.0/",
    ]) {
      await refused(
        { enabled: true, rules: [{ cidr: "198.51.100.0/24" }, { cidr }] },
        { code: 3, message: expect.stringContaining(`rules[1].cidr ${JSON.stringify(cidr)}`) },
      );
    }
  });

  it("a block wider than /20 (IPv4) or /48 (IPv6)", async () => {
    await refused({ enabled: true, rules: [{ cidr: "10.0.0.0/8" }] }, { code: 3, message: expect.stringContaining("wider than /20") });
    await refused({ enabled: true, rules: [{ cidr: "2001:db8::/32" }] }, { code: 3, message: expect.stringContaining("wider than /48") });
  });

  it("more than 10 IPv4 or 10 IPv6 blocks (duplicates count once)", async () => {
    const v4Rules = Array.from({ length: 11 }, (_, i) => ({ cidr: `10.0.${i}.0/24` }));
    await refused({ enabled: true, rules: v4Rules }, { code: 3, message: expect.stringContaining("more than 10 distinct IPv4 blocks") });
    const v6Rules = Array.from({ length: 11 }, (_, i) => ({ cidr: `2001:db8:${i}::/48` }));
    await refused({ enabled: true, rules: v6Rules }, { code: 3, message: expect.stringContaining("more than 10 distinct IPv6 blocks") });
    // Ten distinct blocks, one given twice (once with host bits set): accepted, stored once.
    const withDuplicate = [...v4Rules.slice(0, 10), { cidr: "10.0.3.9/24" }];
    await root.setIpAllowlist({ enabled: false, rules: withDuplicate });
    expect((await root.getIpAllowlist({})).allowlist.rules).toHaveLength(10);
    await root.setIpAllowlist({ enabled: false, rules: [{ cidr: "198.51.100.0/24", label: "kept" }] });
  });

  it("an unknown API key, and another organization's", async () => {
    await refused(
      { publicKey: newKeyPair().publicKey, rules: [] },
      { code: 5, message: expect.stringContaining(`in organization ${org.organizationId}`) },
    );
    const other = await h.organization("Other");
    await refused(
      { publicKey: other.key.publicKey, rules: [] },
      { code: 5, message: expect.stringContaining("no API key with public key") },
    );
    await refusedLeavingOnlyItsActivity(h, () => root.removeIpAllowlist({ publicKey: other.key.publicKey }), { code: 5 });
    await expect(root.getIpAllowlist({ publicKey: other.key.publicKey })).rejects.toMatchObject({ code: 5 });
  });

  it("an onEvaluationError other than ALLOW or DENY, no rules, no enabled for the organization's list", async () => {
    await refused(
      { enabled: true, rules: [], onEvaluationError: "MAYBE" },
      { code: 3, message: expect.stringContaining('"MAYBE" is not ALLOW or DENY') },
    );
    await refused({ enabled: true }, { code: 3, message: expect.stringContaining("rules is required") });
    await refused({ rules: [] }, { code: 3, message: expect.stringContaining("enabled is required") });
  });

  it("a list in a sub-organization", async () => {
    const subKey = newKeyPair();
    const { subOrganizationId } = await root.createSubOrganization({
      subOrganizationName: "sub",
      rootUsers: [
        {
          userName: "sub root",
          apiKeys: [{ apiKeyName: "k", publicKey: subKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
      rootQuorumThreshold: 1,
    });
    const sub = client({ organizationId: subOrganizationId }, subKey);
    await refusedLeavingOnlyItsActivity(h, () => sub.setIpAllowlist({ enabled: true, rules: [] }), {
      code: 9,
      message: expect.stringContaining("is a sub-organization"),
    });
    await refusedLeavingOnlyItsActivity(h, () => sub.removeIpAllowlist({}), { code: 9 });
  });
});
