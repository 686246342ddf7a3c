// IP allowlists end to end, through @turnkey/sdk-server as a backend drives them: set_ip_allowlist,
// get_ip_allowlist and remove_ip_allowlist, and their enforcement on real connections. The server
// is reached on both loopback families (127.0.0.1 and ::1); a client binds its source address (127.0.0.1,
// 127.0.0.2, ::1) through an undici Agent's `localAddress` (the global dispatcher fetch uses), so the allowed and the refused path
// both run over TCP. A refusal leaves every table as it was (the full-table snapshot), not even an
// activity; the way back for a locked-out organization is the operator's command or a root passkey.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import net from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { fromAddress } from "./helpers/source-address.js";
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
import { TurnkeyBrowserClient } from "@turnkey/sdk-browser";
import { clientAddress, normalizeCidr, trustedProxyTest } from "../src/auth/ip-allowlists.js";

let h: Harness;
let v4: string;
let v6: string;

beforeAll(async () => {
  h = await startHarness({}, { ipv6: true });
  v4 = h.url;
  v6 = h.urlIpv6!;
});
afterAll(() => h.close());

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
  await fromAddress("127.0.0.1", () =>
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
    await fromAddress("127.0.0.2", () => root.getWhoami({}));
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

describe("IPv6 addresses with an embedded IPv4 tail", () => {
  it("reads ::a.b.c.d as an IPv6 address, and only ::ffff:a.b.c.d as IPv4", () => {
    // Node reports a peer ::cb00:7105 as "::203.0.113.5": it is an IPv6 client, not 203.0.113.5.
    const peer = clientAddress("::203.0.113.5")!;
    expect(peer.kind()).toBe("ipv6");
    expect(peer.toString()).toBe("::cb00:7105");
    expect(clientAddress("::ffff:203.0.113.5")!.toString()).toBe("203.0.113.5");
    expect(clientAddress("0:0:0:0:0:ffff:203.0.113.5")!.toString()).toBe("203.0.113.5");
    expect(clientAddress("::1.2.3.4.5")).toBeUndefined();
    expect(clientAddress("127.1")).toBeUndefined();
    // Rules: ::a.b.c.d stays IPv6; an IPv4-mapped block is stored as the IPv4 block it maps.
    expect(normalizeCidr("::127.0.0.2/128")).toEqual({ cidr: "::7f00:2/128", family: "ipv6" });
    expect(normalizeCidr("::ffff:127.0.0.2/128")).toEqual({ cidr: "127.0.0.2/32", family: "ipv4" });
    expect(normalizeCidr("::ffff:203.0.113.7/120")).toEqual({ cidr: "203.0.113.0/24", family: "ipv4" });
  });

  it("a trusted proxy block of IPv4 addresses does not take in an IPv6 peer or hop that ends in one of them", () => {
    const trusted = trustedProxyTest(["10.0.0.0/8", "2001:db8::/48"]);
    expect(trusted("10.1.2.3")).toBe(true);
    expect(trusted("::ffff:10.1.2.3")).toBe(true);
    expect(trusted("2001:db8::1")).toBe(true);
    expect(trusted("::10.1.2.3")).toBe(false);
    expect(trusted("::ffff:11.0.0.1")).toBe(false);
    expect(trusted("not-an-address")).toBe(false);
  });

  it("stores ::a.b.c.d and ::ffff:a.b.c.d rules as what they are, and matches clients accordingly", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    await fromAddress("127.0.0.1", () =>
      root.setIpAllowlist({
        enabled: true,
        rules: [{ cidr: "::127.0.0.2/128" }, { cidr: "::ffff:127.0.0.1/128" }, { cidr: "::1/128" }],
      }),
    );
    expect((await fromAddress("127.0.0.1", () => root.getIpAllowlist({}))).allowlist.rules.map((r) => r.cidr)).toEqual([
      "::7f00:2/128",
      "127.0.0.1/32",
      "::1/128",
    ]);
    // 127.0.0.1 is let in by the mapped rule; 127.0.0.2 is not by ::127.0.0.2, an IPv6 address.
    await fromAddress("127.0.0.1", () => root.getWhoami({}));
    await fromAddress("127.0.0.2", () => refusedChangingNothing(() => root.getWhoami({}), notAllowed("127.0.0.2")));
  });

  describe("requests from such a peer (a loopback connection whose socket reports that address, as Node would)", () => {
    let proxied: Harness;
    let org: TestOrganization;
    beforeAll(async () => {
      proxied = await startHarness({ SIGIL_TRUSTED_PROXIES: "127.0.0.2/32" });
      org = await proxied.organization();
      await proxied.sdk(org, org.key).setIpAllowlist({
        enabled: true,
        rules: [{ cidr: "203.0.113.0/24" }, { cidr: "127.0.0.1/32" }],
      });
    });
    afterAll(() => proxied.close());

    /** whoami, stamped by the root key, over a connection the server sees as coming from `remoteAddress`. */
    async function whoamiFrom(remoteAddress: string, forwardedFor?: string) {
      const listener = net.createServer((socket) => {
        Object.defineProperty(socket, "remoteAddress", { value: remoteAddress });
        proxied.server.app.server.emit("connection", socket);
      });
      await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
      const { port } = listener.address() as net.AddressInfo;
      const { body, headers } = signedRequest({ organizationId: org.organizationId }, org.key);
      const before = await proxied.snapshot();
      try {
        const response = await fetch(`http://127.0.0.1:${port}/public/v1/query/whoami`, {
          method: "POST",
          body,
          headers: { ...headers, "content-type": "application/json", ...(forwardedFor ? { "x-forwarded-for": forwardedFor } : {}) },
        });
        expect(await proxied.snapshot()).toEqual(before);
        return { status: response.status, json: (await response.json()) as any };
      } finally {
        listener.close();
      }
    }

    it("an IPv6 peer ::203.0.113.5 is not the IPv4 client 203.0.113.5", async () => {
      expect((await whoamiFrom("203.0.113.5")).status).toBe(200);
      expect((await whoamiFrom("::ffff:203.0.113.5")).status).toBe(200);
      const refused = await whoamiFrom("::203.0.113.5");
      expect(refused.status).toBe(403);
      expect(refused.json.message).toContain("requests from ::cb00:7105 are not allowed");
    });

    it("an IPv6 peer ::127.0.0.2 is not the trusted proxy 127.0.0.2: its X-Forwarded-For is not read", async () => {
      expect((await whoamiFrom("127.0.0.2", "203.0.113.9")).status).toBe(200);
      expect((await whoamiFrom("::ffff:127.0.0.2", "203.0.113.9")).status).toBe(200);
      const refused = await whoamiFrom("::127.0.0.2", "203.0.113.9");
      expect(refused.status).toBe(403);
      expect(refused.json.message).toContain("requests from ::7f00:2 are not allowed");
      // Nor is such a hop a trusted proxy's: the client is the hop itself, an IPv6 address.
      const hop = await whoamiFrom("127.0.0.2", "203.0.113.9, ::127.0.0.2");
      expect(hop.status).toBe(403);
      expect(hop.json.message).toContain("requests from ::7f00:2 are not allowed");
    });
  });
});

describe("a link-local IPv6 peer with a zone id (fe80::…%eth0, what Node reports for one)", () => {
  let zoned: Harness;
  let org: TestOrganization;
  beforeAll(async () => {
    zoned = await startHarness({ SIGIL_TRUSTED_PROXIES: "fe80::2/128" });
    org = await zoned.organization();
    // ALLOW: a peer whose address could not be read would be let in, so a zoned peer must be read.
    await zoned.sdk(org, org.key).setIpAllowlist({
      enabled: true,
      onEvaluationError: "ALLOW",
      rules: [{ cidr: "fe80::1/128" }, { cidr: "203.0.113.0/24" }, { cidr: "127.0.0.1/32" }],
    });
  });
  afterAll(() => zoned.close());

  it("reads the address without its zone id (a zone names the interface, not the peer), and only an IPv6 address takes one", () => {
    expect(clientAddress("fe80::1%eth0")!.toString()).toBe("fe80::1");
    expect(clientAddress("fe80::1%25")!.toString()).toBe("fe80::1");
    expect(clientAddress("::ffff:10.0.0.1%eth0")!.toString()).toBe("10.0.0.1");
    for (const text of ["10.0.0.1%eth0", "fe80::1%", "fe80::1%eth0%1", "fe80::1%eth 0", "%eth0"])
      expect(clientAddress(text)).toBeUndefined();
    // Rules and trusted proxies name no zone.
    expect(normalizeCidr("fe80::1%eth0/128")).toContain("is not an IPv4 or IPv6 address");
    expect(trustedProxyTest(["fe80::2/128"])("fe80::2%eth0")).toBe(true);
  });

  /** whoami over a connection the server sees as coming from `remoteAddress` (with X-Forwarded-For, if given). */
  async function whoamiFrom(remoteAddress: string, forwardedFor?: string) {
    const listener = net.createServer((socket) => {
      Object.defineProperty(socket, "remoteAddress", { value: remoteAddress });
      zoned.server.app.server.emit("connection", socket);
    });
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    const { port } = listener.address() as net.AddressInfo;
    const { body, headers } = signedRequest({ organizationId: org.organizationId }, org.key);
    const before = await zoned.snapshot();
    try {
      const response = await fetch(`http://127.0.0.1:${port}/public/v1/query/whoami`, {
        method: "POST",
        body,
        headers: { ...headers, "content-type": "application/json", ...(forwardedFor ? { "x-forwarded-for": forwardedFor } : {}) },
      });
      expect(await zoned.snapshot()).toEqual(before);
      return { status: response.status, json: (await response.json()) as any };
    } finally {
      listener.close();
    }
  }

  it("is matched as its address: fe80::1%eth0 is let in by fe80::1/128, fe80::3%eth0 refused although the list ALLOWs unreadable addresses", async () => {
    expect((await whoamiFrom("fe80::1%eth0")).status).toBe(200);
    const refused = await whoamiFrom("fe80::3%eth0");
    expect(refused.status).toBe(403);
    expect(refused.json.details[0].turnkeyErrorCode).toBe("IP_NOT_ALLOWED");
    expect(refused.json.message).toContain("requests from fe80::3 are not allowed");
  });

  it("a trusted proxy on a link-local address is one with its zone id, and so is a forwarded hop", async () => {
    expect((await whoamiFrom("fe80::2%eth0", "203.0.113.9")).status).toBe(200);
    const outside = await whoamiFrom("fe80::2%eth0", "198.51.100.1");
    expect(outside.status).toBe(403);
    expect(outside.json.message).toContain("requests from 198.51.100.1 are not allowed");
    const zonedHop = await whoamiFrom("fe80::2%eth0", "203.0.113.9, fe80::3%eth1");
    expect(zonedHop.status).toBe(403);
    expect(zonedHop.json.message).toContain("requests from fe80::3 are not allowed");
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

  it("a prefix length with a leading zero (/020 reads as 20 to some and as octal 16 to others)", async () => {
    for (const [cidr, plain] of [
      ["10.0.0.0/020", "/20"],
      ["10.0.0.0/024", "/24"],
      ["2001:db8::/048", "/48"],
      ["2001:db8::/0128", undefined],
      ["10.0.0.1/00", "/0"],
    ] as const) {
      await refused(
        { enabled: true, rules: [{ cidr }] },
        {
          code: 3,
          message: plain
            ? expect.stringMatching(new RegExp(`rules\\[0\\]\\.cidr "${cidr}" has a prefix length with a leading zero: write ${plain},`))
            : expect.stringContaining(`rules[0].cidr "${cidr}" has no prefix length`),
        },
      );
    }
  });

  it("a block wider than /20 (IPv4) or /48 (IPv6)", async () => {
    await refused({ enabled: true, rules: [{ cidr: "10.0.0.0/8" }] }, { code: 3, message: expect.stringContaining("wider than /20") });
    await refused({ enabled: true, rules: [{ cidr: "2001:db8::/32" }] }, { code: 3, message: expect.stringContaining("wider than /48") });
  });

  it("an IPv4-mapped block wider than /20 once read as the IPv4 block it maps", async () => {
    await refused(
      { enabled: true, rules: [{ cidr: "::ffff:10.0.0.0/100" }] },
      { code: 3, message: expect.stringContaining("wider than /20, the widest IPv4 block a rule may name (an IPv4-mapped block") },
    );
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

describe("enforcement", () => {
  it("IPv4: lets 127.0.0.1 in and refuses 127.0.0.2 before anything happens (activities and queries), logging the attempt without its body", async () => {
    const logged = h.logLines.length;
    const org = await h.organization();
    await lockTo(org, ["127.0.0.1/32"]);
    const root = client(org, org.key);
    const tag = await fromAddress("127.0.0.1", () => root.createUserTag({ userTagName: "from inside", userIds: [] }));
    expect(tag.userTagId).toBeTruthy();

    const secretName = "tag-name-that-must-not-be-logged";
    await fromAddress("127.0.0.2", () =>
      refusedChangingNothing(() => root.createUserTag({ userTagName: secretName, userIds: [] }), notAllowed("127.0.0.2")),
    );
    await fromAddress("127.0.0.2", () => refusedChangingNothing(() => root.getWhoami({}), notAllowed("127.0.0.2")));
    await fromAddress("127.0.0.2", () => refusedChangingNothing(() => root.getIpAllowlist({}), notAllowed("127.0.0.2")));
    // Approvals are activities too.
    await fromAddress("127.0.0.2", () =>
      refusedChangingNothing(() => root.approveActivity({ fingerprint: "none" }), notAllowed("127.0.0.2")),
    );

    const refusals = h.logLines
      .slice(logged)
      .map((line) => JSON.parse(line))
      .filter((line) => line.errorCode === "IP_NOT_ALLOWED");
    expect(refusals.length).toBeGreaterThanOrEqual(4);
    expect(refusals[0]).toMatchObject({ msg: "request refused", ip: "127.0.0.2", status: 403, url: "/public/v1/submit/create_user_tag" });
    expect(h.logLines.join("\n")).not.toContain(secretName);
    // The answer names the code in the body the clients parse.
    const raw = await fromAddress("127.0.0.2", () =>
      h.post(
        "/public/v1/query/whoami",
        ...(Object.values(signedRequest({ organizationId: org.organizationId }, org.key)) as [string, Record<string, string>]),
      ),
    );
    expect(raw.status).toBe(403);
    expect(raw.json.details[0].turnkeyErrorCode).toBe("IP_NOT_ALLOWED");
  });

  it("IPv6: ::1 is let in by ::1/128 and refused by a list without it", async () => {
    const org = await h.organization();
    await lockTo(org, ["127.0.0.1/32", "::1/128"]);
    expect((await fromAddress("::1", () => client(org, org.key, v6).getWhoami({}))).organizationId).toBe(org.organizationId);
    await lockTo(org, ["127.0.0.1/32", "2001:db8::/48"]);
    await fromAddress("::1", () => refusedChangingNothing(() => client(org, org.key, v6).getWhoami({}), notAllowed("::1")));
    await fromAddress("127.0.0.1", () => client(org, org.key).getWhoami({}));
  });

  it("an API key's own list overrides the organization's; an empty one falls back; a disabled organization list enforces none", async () => {
    const { org, root, members } = await organizationWith(h, ["app"]);
    const app = client(org, members.app!.key);
    await lockTo(org, ["127.0.0.1/32"]);
    await fromAddress("127.0.0.1", () => root.setIpAllowlist({ publicKey: members.app!.key.publicKey, rules: [{ cidr: "127.0.0.2/32" }] }));

    await fromAddress("127.0.0.2", () => app.getWhoami({}));
    await fromAddress("127.0.0.1", () =>
      refusedChangingNothing(() => app.getWhoami({}), {
        code: 7,
        message: expect.stringContaining("127.0.0.1 are not allowed by API key"),
      }),
    );
    // The root key has no list of its own: the organization's applies.
    await fromAddress("127.0.0.1", () => root.getWhoami({}));
    await fromAddress("127.0.0.2", () => refusedChangingNothing(() => root.getWhoami({}), notAllowed("127.0.0.2")));

    // A key list with no rules falls back to the organization's.
    await fromAddress("127.0.0.1", () => root.setIpAllowlist({ publicKey: members.app!.key.publicKey, rules: [] }));
    await fromAddress("127.0.0.1", () => app.getWhoami({}));
    await fromAddress("127.0.0.2", () => refusedChangingNothing(() => app.getWhoami({}), notAllowed("127.0.0.2")));

    // With the organization's list disabled, no list is enforced, the key's included.
    await fromAddress("127.0.0.1", () => root.setIpAllowlist({ publicKey: members.app!.key.publicKey, rules: [{ cidr: "10.0.0.0/24" }] }));
    await fromAddress("127.0.0.1", () => root.setIpAllowlist({ enabled: false, rules: [{ cidr: "127.0.0.1/32" }] }));
    await fromAddress("127.0.0.2", () => app.getWhoami({}));
    await fromAddress("127.0.0.2", () => root.getWhoami({}));

    // An enabled organization list with no rules refuses every address.
    await fromAddress("127.0.0.1", () => root.setIpAllowlist({ enabled: true, rules: [] }));
    await fromAddress("127.0.0.1", () => refusedChangingNothing(() => root.getWhoami({}), notAllowed("127.0.0.1")));
  });

  it("holds a parent's key to the parent's list when it names a sub-organization; the sub-organization's own keys to none", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    const subKey = newKeyPair();
    const { subOrganizationId } = await fromAddress("127.0.0.1", () =>
      root.createSubOrganization({
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
      }),
    );
    await lockTo(org, ["127.0.0.1/32"]);
    const parentInSub = client({ organizationId: subOrganizationId }, org.key);
    await fromAddress("127.0.0.1", () => parentInSub.getUsers({}));
    await fromAddress("127.0.0.2", () => refusedChangingNothing(() => parentInSub.getUsers({}), notAllowed("127.0.0.2")));
    const sub = client({ organizationId: subOrganizationId }, subKey);
    await fromAddress("127.0.0.2", () => sub.createUserTag({ userTagName: "sub tag", userIds: [] }));
  });

  describe("a parent's API key registered again as a sub-organization user's key (delegated access)", () => {
    let org: TestOrganization;
    let delegated: ApiKeyPair;
    let endUserKey: ApiKeyPair;
    let subOrganizationId: string;
    let signWith: string;
    let n = 0;
    beforeAll(async () => {
      ({ org } = await organizationWith(h, []));
      const root = client(org, org.key);
      delegated = newKeyPair();
      endUserKey = newKeyPair();
      // The parent's backend holds the key as an API key of its own user, and as a root user of the end user's organization.
      await root.createUsers({
        users: [
          {
            userName: "backend",
            apiKeys: [{ apiKeyName: "delegated", publicKey: delegated.publicKey, curveType: "API_KEY_CURVE_P256" }],
            authenticators: [],
            oauthProviders: [],
            userTags: [],
          },
        ],
      });
      const sub = await root.createSubOrganization({
        subOrganizationName: "end user",
        rootQuorumThreshold: 1,
        rootUsers: [
          {
            userName: "end user",
            apiKeys: [{ apiKeyName: "device", publicKey: endUserKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
            authenticators: [],
            oauthProviders: [],
          },
          {
            userName: "delegated access",
            apiKeys: [{ apiKeyName: "delegated", publicKey: delegated.publicKey, curveType: "API_KEY_CURVE_P256" }],
            authenticators: [],
            oauthProviders: [],
          },
        ],
        wallet: {
          walletName: "end user's wallet",
          accounts: [
            {
              curve: "CURVE_SECP256K1",
              pathFormat: "PATH_FORMAT_BIP32",
              path: "m/44'/60'/0'/0/0",
              addressFormat: "ADDRESS_FORMAT_ETHEREUM",
            },
          ],
        },
      });
      subOrganizationId = sub.subOrganizationId;
      signWith = sub.wallet!.addresses[0]!;
    });

    /** whoami and sign_raw_payload in the sub-organization by `key`, as raw HTTP; the statements each sent. */
    const whoami = (key: ApiKeyPair) => {
      const { body, headers } = signedRequest({ organizationId: subOrganizationId }, key);
      return h.post("/public/v1/query/whoami", body, headers);
    };
    const sign = (key: ApiKeyPair) => {
      const { body, headers } = signedRequest(
        {
          type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
          timestampMs: String(Date.now()),
          organizationId: subOrganizationId,
          parameters: {
            signWith,
            payload: Buffer.from(`delegated ${n++}`).toString("hex"),
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_KECCAK256",
          },
        },
        key,
      );
      return h.post("/public/v1/submit/sign_raw_payload", body, headers);
    };
    /** A request that must be refused IP_NOT_ALLOWED for `address`, changing no row; the statements it sent. */
    async function refusedFrom(address: string, attempt: () => Promise<{ status: number; json: any }>) {
      const before = await h.snapshot();
      const tally = h.server.store.statements;
      tally.texts = [];
      let answer: { status: number; json: any };
      let texts: string[];
      try {
        answer = await fromAddress(address, attempt);
        texts = tally.texts;
      } finally {
        tally.texts = null;
      }
      expect(answer.status, JSON.stringify(answer.json)).toBe(403);
      expect(answer.json.details[0].turnkeyErrorCode).toBe("IP_NOT_ALLOWED");
      expect(answer.json.message).toContain(`requests from ${address} are not allowed`);
      expect(await h.snapshot()).toEqual(before);
      return texts;
    }
    const ok = async (address: string, attempt: () => Promise<{ status: number; json: any }>) => {
      const answer = await fromAddress(address, attempt);
      expect(answer.status, JSON.stringify(answer.json)).toBe(200);
      return answer.json;
    };

    it("naming the sub-organization, it is held to the parent's list (whoami and sign_raw_payload from outside refused, nothing changed); the end user's own key is not", async () => {
      await lockTo(org, ["127.0.0.1/32"]);
      try {
        // From the allowed address it reads and signs in the sub-organization, as the sub-organization's user.
        expect((await ok("127.0.0.1", () => whoami(delegated))).organizationId).toBe(subOrganizationId);
        expect((await ok("127.0.0.1", () => sign(delegated))).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
        await refusedFrom("127.0.0.2", () => whoami(delegated));
        // The key signed in the sub-organization a moment ago: on PostgreSQL this refusal comes from inside
        // the transaction (the known-key road, activities/known-keys.ts), which reads the parent's key too.
        const texts = await refusedFrom("127.0.0.2", () => sign(delegated));
        expect(texts.some((text) => /^select .* from "organizations" where .* for (share|update)( skip locked)?$/.test(text))).toBe(
          h.server.store.dialect === "postgres",
        );
        await refusedFrom("127.0.0.2", () => sign(delegated));
        // The end user's own key is the sub-organization's alone: no list holds it.
        expect((await ok("127.0.0.2", () => sign(endUserKey))).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
        expect((await ok("127.0.0.2", () => whoami(endUserKey))).organizationId).toBe(subOrganizationId);
      } finally {
        await fromAddress("127.0.0.1", () => client(org, org.key).removeIpAllowlist({}));
      }
    });

    it("the parent key's own list applies in its stead, as it does in the parent", async () => {
      await lockTo(org, ["127.0.0.1/32"]);
      const root = client(org, org.key);
      try {
        await fromAddress("127.0.0.1", () =>
          root.setIpAllowlist({ publicKey: delegated.publicKey, rules: [{ cidr: "127.0.0.2/32", label: "backend" }] }),
        );
        expect((await ok("127.0.0.2", () => sign(delegated))).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
        await refusedFrom("127.0.0.1", () => whoami(delegated));
        await refusedFrom("127.0.0.1", () => sign(delegated));
      } finally {
        await fromAddress("127.0.0.1", () => root.removeIpAllowlist({ publicKey: delegated.publicKey }));
        await fromAddress("127.0.0.1", () => root.removeIpAllowlist({}));
      }
    });

    it("a vote it stamps naming the sub-organization is held to the parent's list too", async () => {
      // Refused for its address before the activity it names is looked for.
      const vote = () => {
        const { body, headers } = signedRequest(
          {
            type: "ACTIVITY_TYPE_APPROVE_ACTIVITY",
            timestampMs: String(Date.now()),
            organizationId: subOrganizationId,
            parameters: { fingerprint: "ab".repeat(32) },
          },
          delegated,
        );
        return h.post("/public/v1/submit/approve_activity", body, headers);
      };
      await lockTo(org, ["127.0.0.1/32"]);
      try {
        const allowed = await fromAddress("127.0.0.1", vote);
        expect(allowed.json.details?.[0]?.turnkeyErrorCode, JSON.stringify(allowed.json)).not.toBe("IP_NOT_ALLOWED");
        await refusedFrom("127.0.0.2", vote);
      } finally {
        await fromAddress("127.0.0.1", () => client(org, org.key).removeIpAllowlist({}));
      }
    });

    it("a read-only session the key opened in the sub-organization is held to the parent's list too", async () => {
      const { body, headers } = signedRequest(
        {
          type: "ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION",
          timestampMs: String(Date.now()),
          organizationId: subOrganizationId,
          parameters: {},
        },
        delegated,
      );
      const opened = await h.post("/public/v1/submit/create_read_only_session", body, headers);
      expect(opened.status, JSON.stringify(opened.json)).toBe(200);
      const session = opened.json.activity.result.createReadOnlySessionResult.session as string;
      const read = () => h.post("/public/v1/query/whoami", JSON.stringify({ organizationId: subOrganizationId }), { "X-Session": session });
      await lockTo(org, ["127.0.0.1/32"]);
      try {
        expect((await ok("127.0.0.1", read)).organizationId).toBe(subOrganizationId);
        await refusedFrom("127.0.0.2", read);
      } finally {
        await fromAddress("127.0.0.1", () => client(org, org.key).removeIpAllowlist({}));
      }
    });
  });

  it("policies decide who may set and remove a list (resource CONFIG, actions UPDATE and DELETE)", async () => {
    const { org, root, members } = await organizationWith(h, ["admin"]);
    const admin = client(org, members.admin!.key);
    await refusedLeavingOnlyItsActivity(h, () => admin.setIpAllowlist({ enabled: false, rules: [] }), {
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY"),
    });
    await root.createPolicy({
      policyName: "admin sets allowlists",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${members.admin!.userId}')`,
      condition: "activity.resource == 'CONFIG' && activity.action == 'UPDATE'",
      notes: "",
    });
    expect((await admin.setIpAllowlist({ enabled: false, rules: [{ cidr: "10.0.0.0/24" }] })).activity.status).toBe(
      "ACTIVITY_STATUS_COMPLETED",
    );
    await refusedLeavingOnlyItsActivity(h, () => admin.removeIpAllowlist({}), { code: 7 });
    await root.createPolicy({
      policyName: "admin removes allowlists",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${members.admin!.userId}')`,
      condition: "activity.type == 'ACTIVITY_TYPE_REMOVE_IP_ALLOWLIST' && activity.action == 'DELETE'",
      notes: "",
    });
    await admin.removeIpAllowlist({});
    expect((await root.getIpAllowlist({})).allowlist.rules).toEqual([]);
    await refusedLeavingOnlyItsActivity(h, () => admin.removeIpAllowlist({}), {
      code: 5,
      message: expect.stringContaining("has no IP allowlist"),
    });
  });
});

describe("behind a trusted proxy (SIGIL_TRUSTED_PROXIES)", () => {
  let proxied: Harness;
  let org: TestOrganization;
  beforeAll(async () => {
    proxied = await startHarness({ SIGIL_TRUSTED_PROXIES: "127.0.0.2/32" });
    org = await proxied.organization();
    await proxied.sdk(org, org.key).setIpAllowlist({
      enabled: true,
      rules: [{ cidr: "203.0.113.0/24", label: "clients" }, { cidr: "127.0.0.1/32" }],
    });
  });
  afterAll(() => proxied.close());

  /** whoami, stamped by the root key, sent from `peer` with the X-Forwarded-For given (if any). */
  async function whoamiFrom(peer: string, forwardedFor?: string) {
    const { body, headers } = signedRequest({ organizationId: org.organizationId }, org.key);
    const before = await proxied.snapshot();
    const response = await fromAddress(peer, () =>
      proxied.post("/public/v1/query/whoami", body, {
        ...headers,
        ...(forwardedFor !== undefined ? { "X-Forwarded-For": forwardedFor } : {}),
      }),
    );
    expect(await proxied.snapshot()).toEqual(before);
    return response;
  }
  const refusedFrom = (response: { status: number; json: any }, address: string) => {
    expect(response.status).toBe(403);
    expect(response.json).toMatchObject({ code: 7, message: expect.stringContaining(`requests from ${address} are not allowed`) });
  };

  it("reads the client from X-Forwarded-For when the peer is a trusted proxy: the right-most hop that is not one", async () => {
    expect((await whoamiFrom("127.0.0.2", "203.0.113.9")).status).toBe(200);
    refusedFrom(await whoamiFrom("127.0.0.2", "198.51.100.1"), "198.51.100.1");
    // The proxy's own hop is skipped; an address written further left by the client is not believed.
    expect((await whoamiFrom("127.0.0.2", "203.0.113.9, 127.0.0.2")).status).toBe(200);
    refusedFrom(await whoamiFrom("127.0.0.2", "203.0.113.9, 198.51.100.1"), "198.51.100.1");
    // Without the header the client is the proxy itself.
    refusedFrom(await whoamiFrom("127.0.0.2"), "127.0.0.2");
  });

  it("ignores X-Forwarded-For from a peer that is not a trusted proxy", async () => {
    expect((await whoamiFrom("127.0.0.1", "198.51.100.1")).status).toBe(200);
    refusedFrom(await whoamiFrom("127.0.0.3", "203.0.113.9"), "127.0.0.3");
  });

  it("applies onEvaluationError when the forwarded address cannot be read", async () => {
    const denied = await whoamiFrom("127.0.0.2", "not-an-address");
    expect(denied.status).toBe(403);
    expect(denied.json.message).toContain("could not be determined");
    await fromAddress("127.0.0.1", () =>
      proxied.sdk(org, org.key).setIpAllowlist({
        enabled: true,
        onEvaluationError: "ALLOW",
        rules: [{ cidr: "203.0.113.0/24", label: "clients" }, { cidr: "127.0.0.1/32" }],
      }),
    );
    expect((await whoamiFrom("127.0.0.2", "not-an-address")).status).toBe(200);
    // ALLOW lets in only what cannot be read: a readable address outside the list is still refused.
    refusedFrom(await whoamiFrom("127.0.0.2", "198.51.100.1"), "198.51.100.1");
  });
});

describe("the way back for a locked-out organization", () => {
  const CLI = path.resolve("bin/sigil.js");
  const run = promisify(execFile);
  async function sigil(args: string[]) {
    const env = {
      PATH: process.env.PATH,
      ...(h.database.databaseUrl ? { SIGIL_DATABASE_URL: h.database.databaseUrl } : {}),
    };
    return run(process.execPath, [CLI, ...args, "--data-dir", h.database.dataDir], { env, timeout: 30_000 }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
    );
  }

  it("the operator's `sigil remove-ip-allowlist` removes the organization's list, or one key's", async () => {
    const { org, root, members } = await organizationWith(h, ["app"]);
    const app = client(org, members.app!.key);
    await fromAddress("127.0.0.1", () => root.setIpAllowlist({ publicKey: members.app!.key.publicKey, rules: [{ cidr: "10.9.8.0/24" }] }));
    await lockTo(org, []);
    await fromAddress("127.0.0.1", () => refusedChangingNothing(() => root.getWhoami({}), notAllowed("127.0.0.1")));

    const before = await h.snapshot();
    const none = await sigil(["remove-ip-allowlist", "--organization", org.organizationId, "--api-key", org.apiKeyId]);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain(`API key ${org.apiKeyId} of organization ${org.organizationId} has no IP allowlist`);
    const unknown = await sigil(["remove-ip-allowlist", "--organization", "no-such-organization"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("no organization no-such-organization");
    expect((await sigil(["remove-ip-allowlist"])).code).toBe(2);
    expect(await h.snapshot()).toEqual(before);

    const removed = await sigil(["remove-ip-allowlist", "--organization", org.organizationId]);
    expect(removed.code).toBe(0);
    expect(JSON.parse(removed.stdout)).toEqual({ organizationId: org.organizationId, apiKeyId: null, removed: true });
    // The running server applies it to the very next request.
    await fromAddress("127.0.0.2", () => root.getWhoami({}));
    expect((await root.getIpAllowlist({})).allowlist.rules).toEqual([]);

    // The key's list is not enforced without an enabled organization list, and can be removed the same way.
    await fromAddress("127.0.0.2", () => app.getWhoami({}));
    const appKeyId = (await root.getApiKeys({ userId: members.app!.userId })).apiKeys[0]!.apiKeyId;
    const keyRemoved = await sigil(["remove-ip-allowlist", "--organization", org.organizationId, "--api-key", appKeyId]);
    expect(keyRemoved.code).toBe(0);
    expect((await root.getIpAllowlist({ publicKey: members.app!.key.publicKey })).allowlist.rules).toEqual([]);
  });

  it("a root user's passkey is never held to the lists: the root quorum removes the list from anywhere", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    await root.createAuthenticators({
      userId: org.userId,
      authenticators: [
        { authenticatorName: "root passkey", challenge: registration.challenge, attestation: registration.attestation as any },
      ],
    });
    await lockTo(org, []);
    await fromAddress("127.0.0.2", () => refusedChangingNothing(() => root.getWhoami({}), notAllowed("127.0.0.2")));

    const restore = passkey.installAsNavigator();
    try {
      const withPasskey = new TurnkeyClient({ baseUrl: h.url }, new WebauthnStamper({ rpId: passkey.rpId }));
      const removal = await fromAddress("127.0.0.2", () =>
        withPasskey.removeIpAllowlist({
          type: "ACTIVITY_TYPE_REMOVE_IP_ALLOWLIST",
          timestampMs: String(Date.now()),
          organizationId: org.organizationId,
          parameters: {},
        }),
      );
      expect(removal.activity).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED", type: "ACTIVITY_TYPE_REMOVE_IP_ALLOWLIST" });
      expect(removal.activity.votes[0]).toMatchObject({ userId: org.userId, scheme: "SIGNATURE_SCHEME_TK_WEBAUTHN" });
    } finally {
      restore();
    }
    await fromAddress("127.0.0.2", () => root.getWhoami({}));
  });
});

describe("a retry answered from the audit log", () => {
  it("is held to the organization's list when the key that made it is gone", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    const rotating = newKeyPair();
    const { apiKeyIds } = await root.createApiKeys({
      userId: org.userId,
      apiKeys: [{ apiKeyName: "rotating", publicKey: rotating.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const body = JSON.stringify({
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { userTagName: "made before the key went", userIds: [] },
    });
    const { headers } = signedRequest(body, rotating);
    const first = await fromAddress("127.0.0.1", () => h.post("/public/v1/submit/create_user_tag", body, headers));
    expect(first.json.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    await root.deleteApiKeys({ userId: org.userId, apiKeyIds });
    await lockTo(org, ["127.0.0.1/32"]);

    const before = await h.snapshot();
    const refused = await fromAddress("127.0.0.2", () => h.post("/public/v1/submit/create_user_tag", body, headers));
    expect(refused.status).toBe(403);
    expect(refused.json.details[0].turnkeyErrorCode).toBe("IP_NOT_ALLOWED");
    const answered = await fromAddress("127.0.0.1", () => h.post("/public/v1/submit/create_user_tag", body, headers));
    expect(answered.json.activity.id).toBe(first.json.activity.id);
    expect(await h.snapshot()).toEqual(before);
  });

  it("is held to the parent's list when the parent's key that made it acted in a sub-organization", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    const { subOrganizationId } = await root.createSubOrganization({
      subOrganizationName: "sub",
      rootUsers: [
        {
          userName: "sub root",
          apiKeys: [{ apiKeyName: "k", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
      rootQuorumThreshold: 1,
    });
    const rotating = newKeyPair();
    const { apiKeyIds } = await root.createApiKeys({
      userId: org.userId,
      apiKeys: [{ apiKeyName: "rotating", publicKey: rotating.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    // A login step a parent requests in its sub-organization (it fails: no user has the address, and is recorded).
    const body = JSON.stringify({
      type: "ACTIVITY_TYPE_INIT_OTP_AUTH_V3",
      timestampMs: String(Date.now()),
      organizationId: subOrganizationId,
      parameters: { otpType: "OTP_TYPE_EMAIL", contact: "nobody@example.com", appName: "Demo" },
    });
    const { headers } = signedRequest(body, rotating);
    const first = await fromAddress("127.0.0.1", () => h.post("/public/v1/submit/init_otp_auth", body, headers));
    const recorded = await h.server.store.db
      .selectFrom("activities")
      .select("id")
      .where("organization_id", "=", subOrganizationId)
      .where("type", "=", "ACTIVITY_TYPE_INIT_OTP_AUTH_V3")
      .execute();
    expect(recorded).toHaveLength(1);
    await root.deleteApiKeys({ userId: org.userId, apiKeyIds });
    await lockTo(org, ["127.0.0.1/32"]);

    const before = await h.snapshot();
    const refused = await fromAddress("127.0.0.2", () => h.post("/public/v1/submit/init_otp_auth", body, headers));
    expect(refused.status).toBe(403);
    expect(refused.json.message).toContain(
      `requests from 127.0.0.2 are not allowed by the IP allowlist of organization ${org.organizationId}`,
    );
    const answered = await fromAddress("127.0.0.1", () => h.post("/public/v1/submit/init_otp_auth", body, headers));
    // The recorded failure, answered again; each answer has a request id of its own.
    const { requestId: answeredId, ...answeredBody } = answered.json;
    const { requestId: firstId, ...firstBody } = first.json;
    expect({ status: answered.status, json: answeredBody }).toEqual({ status: first.status, json: firstBody });
    expect(answeredId).not.toBe(firstId);
    expect(await h.snapshot()).toEqual(before);
  });

  it("is held to an expired key's own list", async () => {
    let now = Date.now();
    const timed = await startHarness({}, { clock: () => now });
    try {
      const org = await timed.organization();
      const root = timed.sdk(org, org.key, fastPoller);
      const expiring = newKeyPair();
      await root.createApiKeys({
        userId: org.userId,
        apiKeys: [{ apiKeyName: "expiring", publicKey: expiring.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "60" }],
      });
      await root.setIpAllowlist({ enabled: true, rules: [{ cidr: "127.0.0.1/32" }, { cidr: "127.0.0.2/32" }] });
      await root.setIpAllowlist({ publicKey: expiring.publicKey, rules: [{ cidr: "127.0.0.1/32" }] });
      const body = JSON.stringify({
        type: "ACTIVITY_TYPE_CREATE_USER_TAG",
        timestampMs: String(now),
        organizationId: org.organizationId,
        parameters: { userTagName: "made before the key expired", userIds: [] },
      });
      const { headers } = signedRequest(body, expiring);
      const first = await fromAddress("127.0.0.1", () => timed.post("/public/v1/submit/create_user_tag", body, headers));
      expect(first.json.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      now += 120_000;

      const before = await timed.snapshot();
      // The organization's list lets 127.0.0.2 in; the key's own does not, expired or not.
      const refused = await fromAddress("127.0.0.2", () => timed.post("/public/v1/submit/create_user_tag", body, headers));
      expect(refused.status).toBe(403);
      expect(refused.json.message).toContain("requests from 127.0.0.2 are not allowed by API key");
      const answered = await fromAddress("127.0.0.1", () => timed.post("/public/v1/submit/create_user_tag", body, headers));
      expect(answered.json.activity.id).toBe(first.json.activity.id);
      expect(await timed.snapshot()).toEqual(before);
    } finally {
      await timed.close();
    }
  });
});

describe("read-only sessions and session keys", () => {
  it("a read-only session a passkey opened is held to the organization's list: its token can be replayed, a passkey's stamp cannot", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    await root.createAuthenticators({
      userId: org.userId,
      authenticators: [{ authenticatorName: "passkey", challenge: registration.challenge, attestation: registration.attestation as any }],
    });
    const restore = passkey.installAsNavigator();
    let session: string;
    const withPasskey = new TurnkeyClient({ baseUrl: h.url }, new WebauthnStamper({ rpId: passkey.rpId }));
    try {
      const { activity } = await withPasskey.createReadOnlySession({
        type: "ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: {},
      });
      session = activity.result.createReadOnlySessionResult!.session;
    } finally {
      restore();
    }
    await lockTo(org, ["127.0.0.1/32"]);
    const reader = new TurnkeyBrowserClient({ apiBaseUrl: h.url, readOnlySession: session, organizationId: org.organizationId });
    expect((await fromAddress("127.0.0.1", () => reader.getWhoami({ organizationId: org.organizationId }))).userId).toBe(org.userId);
    const before = await h.snapshot();
    await expect(fromAddress("127.0.0.2", () => reader.getWhoami({ organizationId: org.organizationId }))).rejects.toMatchObject({
      message: expect.stringContaining("requests from 127.0.0.2 are not allowed"),
    });
    expect(await h.snapshot()).toEqual(before);
  });

  it("a login that replaces a user's session keys removes the lists kept for them", async () => {
    const org = await h.organization();
    const root = client(org, org.key);
    const sessionKey = newKeyPair();
    await root.stampLogin({ publicKey: sessionKey.publicKey });
    await root.setIpAllowlist({ publicKey: sessionKey.publicKey, rules: [{ cidr: "10.0.0.0/24" }] });
    const lists = () =>
      h.server.store.db.selectFrom("ip_allowlists").select("api_key_id").where("organization_id", "=", org.organizationId).execute();
    expect(await lists()).toHaveLength(1);
    await root.stampLogin({ publicKey: newKeyPair().publicKey, invalidateExisting: true });
    expect(await lists()).toEqual([]);
  });
});
