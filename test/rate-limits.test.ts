// Request rate limits (docs/rate-limits.md, services/rate-limits.ts): token buckets per credential, per
// sub-organization and per top-level organization, apart for activities, votes and queries, counted
// once the credential is known to be the organization's and before anything is locked or recorded.
// A refusal is 429 REQUEST_RATE_LIMITED with Retry-After and changes no table (but the limiter's own);
// a forged stamp or another organization's key spends nobody's bucket; a key's flood leaves its
// organization's other keys, and a sub-organization's its siblings, what the buckets above leave them;
// the root quorum acts through its reserve when a runaway key spent its organization's bucket, and
// votes pass while activities are spent. On PostgreSQL two server processes share the buckets.
//
// Buckets here refill at one token per 1,000 s: a test sees only their bursts, however slowly it runs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyRequestError } from "@turnkey/http";
import pino from "pino";
import { sql } from "kysely";
import { loadConfig } from "../src/config.js";
import { openStore } from "../src/store/database.js";
import { RATE_LIMIT_TABLE, rateLimiter } from "../src/services/rate-limits.js";
import { backend } from "./helpers/backend.js";
import { apiKeyStamp, newKeyPair, startHarness, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller, organizationWith } from "./helpers/organizations.js";
import { cliDeployment } from "./helpers/processes.js";

/** A bucket that holds `burst` requests and gets no token back while a test runs. */
const burstOf = (burst: number) => `0.001/${burst}`;
/** A bucket no test here reaches. */
const UNREACHED = "1000/100000";

const eth = {
  curve: "CURVE_SECP256K1",
  pathFormat: "PATH_FORMAT_BIP32",
  path: "m/44'/60'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_ETHEREUM",
} as const;

interface Answer {
  status: number;
  retryAfter: string | null;
  json: any;
}

/** A POST stamped by `key` (or by `stampKey`'s signature under `key`'s public key: a forgery), as sent. */
async function post(url: string, path: string, body: unknown, key: ApiKeyPair, forgedWith?: ApiKeyPair): Promise<Answer> {
  const text = JSON.stringify(body);
  let stamp = apiKeyStamp(text, key);
  if (forgedWith) {
    const forged = JSON.parse(Buffer.from(apiKeyStamp(text, forgedWith), "base64url").toString());
    stamp = Buffer.from(JSON.stringify({ ...forged, publicKey: key.publicKey })).toString("base64url");
  }
  const response = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/json", "X-Stamp": stamp },
    body: text,
  });
  return { status: response.status, retryAfter: response.headers.get("retry-after"), json: await response.json() };
}

let n = 0;
/** A sign_raw_payload body (each one new, so none is a retry of another). */
const signature = (organizationId: string, signWith: string) => ({
  type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
  timestampMs: String(Date.now()),
  organizationId,
  parameters: {
    signWith,
    payload: Buffer.from(`rate ${n++}`).toString("hex"),
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_KECCAK256",
  },
});
const userTag = (organizationId: string) => ({
  type: "ACTIVITY_TYPE_CREATE_USER_TAG",
  timestampMs: String(Date.now()),
  organizationId,
  parameters: { userTagName: `tag ${n++}`, userIds: [] },
});
const SIGN = "/public/v1/submit/sign_raw_payload";
const TAG = "/public/v1/submit/create_user_tag";
const WHOAMI = "/public/v1/query/whoami";

/** A 429 REQUEST_RATE_LIMITED whose message names `what` and `setting`, with its Retry-After. */
function expectRateLimited(answer: Answer, what: string, setting: string): void {
  expect(answer.status, JSON.stringify(answer.json)).toBe(429);
  expect(answer.json).toMatchObject({
    code: 8,
    details: [
      { "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode: "REQUEST_RATE_LIMITED" },
      { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: expect.stringMatching(/^\d+s$/) },
    ],
  });
  expect(answer.json.message).toContain(what);
  expect(answer.json.message).toContain(setting);
  // One token per 1,000 s: the wait is up to that, in whole seconds, and the header says the same.
  const seconds = Number(answer.retryAfter);
  expect(Number.isInteger(seconds) && seconds >= 1 && seconds <= 1000, String(answer.retryAfter)).toBe(true);
  expect(answer.json.details[1].retryDelay).toBe(`${seconds}s`);
}

/** `count` requests made by `make`, each refused as rate limited, changing no table (but the limiter's). */
async function refusedChangingNothing(h: Harness, count: number, make: () => Promise<Answer>, what: string, setting: string) {
  const before = await h.snapshot();
  for (let i = 0; i < count; i++) expectRateLimited(await make(), what, setting);
  expect(await h.snapshot()).toEqual(before);
}

const completed = (answer: Answer) => {
  expect(answer.status, JSON.stringify(answer.json)).toBe(200);
  return answer.json;
};

describe("the default limits", () => {
  let h: Harness;
  let org: TestOrganization;
  beforeAll(async () => {
    // No rate-limit setting: what a deployment gets when its operator sets none.
    h = await startHarness();
    org = await h.organization();
  });
  afterAll(() => h.close());

  it("refuse a flood of activities from one key beyond its burst and rate (100, then 50 a second), recording none of the refused", async () => {
    const flood = 400;
    const activitiesBefore = (
      await h.server.store.db.selectFrom("activities").select("id").where("organization_id", "=", org.organizationId).execute()
    ).length;
    const started = performance.now();
    const answers: Answer[] = [];
    // 400 activities, 50 in flight at a time: several hundred a second here.
    for (let i = 0; i < flood; i += 50)
      answers.push(...(await Promise.all(Array.from({ length: 50 }, () => post(h.url, TAG, userTag(org.organizationId), org.key)))));
    const seconds = (performance.now() - started) / 1000;
    const admitted = answers.filter((a) => a.status === 200).length;
    for (const refused of answers.filter((a) => a.status !== 200))
      expect(refused.json.details[0].turnkeyErrorCode, JSON.stringify(refused.json)).toBe("REQUEST_RATE_LIMITED");
    // The key's bucket (SIGIL_RATE_LIMIT_KEY_ACTIVITIES, 50 a second, burst 100) admits at most its burst
    // and what it got back meanwhile, however fast or slow the requests came.
    expect(admitted, `${admitted} admitted in ${seconds.toFixed(2)} s`).toBeLessThanOrEqual(Math.floor(100 + 50 * seconds) + 1);
    expect(admitted).toBeGreaterThanOrEqual(100);
    const activitiesAfter = (
      await h.server.store.db.selectFrom("activities").select("id").where("organization_id", "=", org.organizationId).execute()
    ).length;
    expect(activitiesAfter - activitiesBefore).toBe(admitted);
  });
});

describe("a key's bucket", () => {
  let h: Harness;
  let org: TestOrganization;
  let signWith: string;
  let flooder: ApiKeyPair;
  let flooderId: string;
  beforeAll(async () => {
    h = await startHarness({ SIGIL_RATE_LIMIT_KEY_ACTIVITIES: burstOf(4), SIGIL_RATE_LIMIT_KEY_QUERIES: burstOf(3) });
    org = await h.organization();
    const root = h.sdk(org, org.key);
    signWith = (await root.createWallet({ walletName: "w", accounts: [eth] })).addresses[0]!;
    flooder = newKeyPair();
    flooderId = (
      await root.createApiKeys({
        userId: org.userId,
        apiKeys: [{ apiKeyName: "flooder", publicKey: flooder.publicKey, curveType: "API_KEY_CURVE_P256" }],
      })
    ).apiKeyIds[0]!;
  });
  afterAll(() => h.close());

  it("holds its burst, then refuses with 429, Retry-After and REQUEST_RATE_LIMITED, recording nothing; forged stamps spend none of it", async () => {
    const sign = () => post(h.url, SIGN, signature(org.organizationId, signWith), flooder);
    // The first signature authenticates the key before its transaction; on PostgreSQL the next ones
    // are authenticated in it (the memory of accepted keys): both roads count.
    completed(await sign());
    // Stamps carrying the key but signed by another never reach its bucket, on either road.
    const forger = newKeyPair();
    for (let i = 0; i < 6; i++) {
      const forged = await post(h.url, SIGN, signature(org.organizationId, signWith), flooder, forger);
      expect(forged.status, JSON.stringify(forged.json)).toBe(401);
      expect(forged.json.details[0].turnkeyErrorCode).toBe("SIGNATURE_INVALID");
    }
    for (let i = 0; i < 3; i++) expect(completed(await sign()).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    await refusedChangingNothing(h, 3, sign, `credential ${flooderId}`, "SIGIL_RATE_LIMIT_KEY_ACTIVITIES");
    // Many at once: every one refused.
    const flood = await Promise.all(Array.from({ length: 20 }, sign));
    expect(flood.map((answer) => answer.status)).toEqual(Array(20).fill(429));
  });

  it("the official clients see the refusal as an error with its code", async () => {
    const sdk = h.sdk(org, flooder);
    const request = { signWith, payload: "00", encoding: "PAYLOAD_ENCODING_HEXADECIMAL", hashFunction: "HASH_FUNCTION_KECCAK256" } as const;
    const rateLimited = {
      code: 8,
      details: expect.arrayContaining([expect.objectContaining({ turnkeyErrorCode: "REQUEST_RATE_LIMITED" })]),
    };
    await expect(sdk.signRawPayload(request)).rejects.toMatchObject(rateLimited);
    const http = h.http(flooder);
    const sent = http.signRawPayload({
      type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: request,
    });
    await expect(sent).rejects.toBeInstanceOf(TurnkeyRequestError);
    await expect(sent).rejects.toMatchObject(rateLimited);
  });

  it("leaves the organization's other keys, its queries and other organizations alone", async () => {
    // The root key spent 2 of its 4 setting things up.
    for (let i = 0; i < 2; i++) completed(await post(h.url, SIGN, signature(org.organizationId, signWith), org.key));
    // Queries are counted apart: the flooder still reads.
    expect(completed(await post(h.url, WHOAMI, { organizationId: org.organizationId }, flooder)).organizationId).toBe(org.organizationId);
    const other = await h.organization();
    const otherSdk = h.sdk(other, other.key);
    const otherSignWith = (await otherSdk.createWallet({ walletName: "w", accounts: [eth] })).addresses[0]!;
    for (let i = 0; i < 3; i++) completed(await post(h.url, SIGN, signature(other.organizationId, otherSignWith), other.key));
  });

  it("admits exactly its burst of requests sent at once (charged together on PostgreSQL), and refuses the rest", async () => {
    const other = await h.organization();
    const root = h.sdk(other, other.key);
    const otherSignWith = (await root.createWallet({ walletName: "w", accounts: [eth] })).addresses[0]!;
    const key = newKeyPair();
    await root.createApiKeys({
      userId: other.userId,
      apiKeys: [{ apiKeyName: "burst", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const before = (await h.server.store.db.selectFrom("activities").select("id").execute()).length;
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => post(h.url, SIGN, signature(other.organizationId, otherSignWith), key)),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([...Array(4).fill(200), ...Array(6).fill(429)]);
    expect((await h.server.store.db.selectFrom("activities").select("id").execute()).length).toBe(before + 4);
  });

  it("counts queries in a bucket of their own", async () => {
    const key = newKeyPair();
    const other = await h.organization();
    await h.sdk(other, other.key).createApiKeys({
      userId: other.userId,
      apiKeys: [{ apiKeyName: "reader", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const whoami = () => post(h.url, WHOAMI, { organizationId: other.organizationId }, key);
    for (let i = 0; i < 3; i++) completed(await whoami());
    await refusedChangingNothing(h, 2, whoami, "too many queries", "SIGIL_RATE_LIMIT_KEY_QUERIES");
    // Its activities are counted apart.
    completed(await post(h.url, TAG, userTag(other.organizationId), key));
  });
});

describe("the buckets of organizations and sub-organizations", () => {
  let h: Harness;
  let parent: TestOrganization;
  beforeAll(async () => {
    h = await startHarness({
      SIGIL_RATE_LIMIT_KEY_ACTIVITIES: UNREACHED,
      SIGIL_RATE_LIMIT_SUB_ORGANIZATION_ACTIVITIES: burstOf(2),
      SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES: burstOf(8),
      SIGIL_RATE_LIMIT_ROOT_RESERVE: "off",
    });
    parent = await h.organization();
  });
  afterAll(() => h.close());

  /** A sub-organization of the parent whose one root user (an end user) holds a fresh key. */
  async function subOrganization(name: string) {
    const key = newKeyPair();
    const { subOrganizationId } = await h.sdk(parent, parent.key).createSubOrganization({
      subOrganizationName: name,
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: `${name} owner`,
          apiKeys: [{ apiKeyName: "owner", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    return { subOrganizationId, key };
  }

  it("a sub-organization's flood is refused by its own bucket, leaving its sibling and parent the top-level bucket's remainder", async () => {
    // Another organization's key naming the parent is refused before it counts against anything.
    const outsider = await h.organization();
    for (let i = 0; i < 5; i++) {
      const answer = await post(h.url, TAG, userTag(parent.organizationId), outsider.key);
      expect(answer.status).toBe(403);
      expect(answer.json.details[0].turnkeyErrorCode).toBe("ORGANIZATION_MISMATCH");
    }
    const first = await subOrganization("first"); // the parent's 1st of 8
    const second = await subOrganization("second"); // 2nd
    const third = await subOrganization("third"); // 3rd
    const tagIn = (sub: { subOrganizationId: string; key: ApiKeyPair }) => () => post(h.url, TAG, userTag(sub.subOrganizationId), sub.key);
    for (let i = 0; i < 2; i++) completed(await tagIn(first)()); // 4th, 5th
    await refusedChangingNothing(
      h,
      10,
      tagIn(first),
      `sub-organization ${first.subOrganizationId}`,
      "SIGIL_RATE_LIMIT_SUB_ORGANIZATION_ACTIVITIES",
    );
    // The refused flood spent nothing of the top-level bucket: the sibling still has its 2.
    for (let i = 0; i < 2; i++) completed(await tagIn(second)()); // 6th, 7th
    await refusedChangingNothing(
      h,
      1,
      tagIn(second),
      `sub-organization ${second.subOrganizationId}`,
      "SIGIL_RATE_LIMIT_SUB_ORGANIZATION_ACTIVITIES",
    );
    // The parent has one left of the eight its sub-organizations share with it, then none.
    const parentTag = () => post(h.url, TAG, userTag(parent.organizationId), parent.key);
    completed(await parentTag()); // 8th
    const spent = `organization ${parent.organizationId} and its sub-organizations`;
    await refusedChangingNothing(h, 2, parentTag, spent, "SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES");
    // The third sub-organization's own bucket is full, but the top-level one is spent.
    await refusedChangingNothing(h, 1, tagIn(third), spent, "SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES");
    // The outsider's organization was never charged for the parent: it has all eight.
    for (let i = 0; i < 8; i++) completed(await post(h.url, TAG, userTag(outsider.organizationId), outsider.key));
  });
});

describe("the root quorum's way through", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness({
      SIGIL_RATE_LIMIT_KEY_ACTIVITIES: UNREACHED,
      SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES: burstOf(5),
      SIGIL_RATE_LIMIT_ROOT_RESERVE: burstOf(2),
    });
  });
  afterAll(() => h.close());

  it("a runaway key spends the organization's bucket; the root quorum deletes it through its reserve, and votes pass", async () => {
    const { org, root, members } = await organizationWith(h, ["runaway", "second root"]); // 1st of 5
    const runaway = members.runaway!;
    const secondRoot = members["second root"]!;
    await root.updateRootQuorum({ threshold: 2, userIds: [org.userId, secondRoot.userId] }); // 2nd
    const runawayTag = () => post(h.url, TAG, userTag(org.organizationId), runaway.key);
    // No policy allows the runaway user anything: its activities are recorded as refused, and they count.
    for (let i = 0; i < 3; i++) {
      const refused = await runawayTag(); // 3rd–5th
      expect(refused.status, JSON.stringify(refused.json)).toBe(403);
      expect(refused.json.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    }
    await refusedChangingNothing(h, 5, runawayTag, `organization ${org.organizationId}`, "SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES");
    // A root user's activity goes through the reserve, and waits for the second root user's vote:
    // votes are counted apart, so the spent activities do not hold it back.
    const runawayKeyId = (await root.getApiKeys({ userId: runaway.userId })).apiKeys[0]!.apiKeyId;
    const deletion = await h.sdk(org, org.key, fastPoller).deleteApiKeys({ userId: runaway.userId, apiKeyIds: [runawayKeyId] });
    expect(deletion.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const approved = await secondRoot.client.approveActivity({ fingerprint: deletion.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const gone = await runawayTag();
    expect(gone.status).toBe(401);
    expect(gone.json.details[0].turnkeyErrorCode).toBe("PUBLIC_KEY_NOT_FOUND");
    // The reserve is a budget too: two, then refused, naming the organization's bucket that is spent.
    const pending = await root.createUserTag({ userTagName: "second through the reserve", userIds: [] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    await expect(root.createUserTag({ userTagName: "third", userIds: [] })).rejects.toMatchObject({
      code: 8,
      details: expect.arrayContaining([expect.objectContaining({ turnkeyErrorCode: "REQUEST_RATE_LIMITED" })]),
    });
  });

  it("votes have buckets of their own, refused when spent", async () => {
    const { org, root, members } = await organizationWith(h, ["voter"]); // the new organization's 1st of 5
    const voter = members.voter!;
    const vote = () =>
      post(
        h.url,
        "/public/v1/submit/approve_activity",
        {
          type: "ACTIVITY_TYPE_APPROVE_ACTIVITY",
          timestampMs: String(Date.now()),
          organizationId: org.organizationId,
          parameters: { fingerprint: `no such activity ${n++}` },
        },
        voter.key,
      );
    // Votes on nothing are refused as such, and count.
    for (let i = 0; i < 5; i++) expect((await vote()).json.details[0].turnkeyErrorCode).toBe("ACTIVITY_NOT_FOUND");
    await refusedChangingNothing(h, 2, vote, "too many votes", "SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES");
    // The organization's activities were not spent by them.
    expect((await root.createUserTag({ userTagName: "after the votes", userIds: [] })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });
});

describe(`the buckets are shared by every server process (${backend === "postgres" ? "two processes on PostgreSQL" : "one process on SQLite"})`, () => {
  it("one key's burst is the same whichever process its requests reach", async () => {
    const deployment = await cliDeployment({ SIGIL_RATE_LIMIT_KEY_ACTIVITIES: burstOf(6) });
    try {
      const servers = [await deployment.start(), ...(backend === "postgres" ? [await deployment.start()] : [])];
      const at = (i: number) => servers[i % servers.length]!.url;
      const { organizationId, key } = deployment;
      const created = completed(
        await post(
          at(0),
          "/public/v1/submit/create_wallet",
          {
            type: "ACTIVITY_TYPE_CREATE_WALLET",
            timestampMs: String(Date.now()),
            organizationId,
            parameters: { walletName: "w", accounts: [eth] },
          },
          key,
        ),
      );
      const signWith = created.activity.result.createWalletResult.addresses[0] as string;
      // Five more, alternating between the processes (each one's first authenticates before its
      // transaction, later ones in it on PostgreSQL): six in all, whichever process counted them.
      for (let i = 1; i < 6; i++) completed(await post(at(i), SIGN, signature(organizationId, signWith), key));
      const activities = async () => {
        const store = await openStore({
          databaseUrl: deployment.database.databaseUrl,
          dataDir: deployment.database.dataDir,
          mode: "read-only",
        });
        try {
          return (await store.db.selectFrom("activities").select("id").execute()).length;
        } finally {
          await store.close();
        }
      };
      const recorded = await activities();
      for (let i = 0; i < 4; i++)
        expectRateLimited(
          await post(at(i), SIGN, signature(organizationId, signWith), key),
          "credential",
          "SIGIL_RATE_LIMIT_KEY_ACTIVITIES",
        );
      expect(await activities()).toBe(recorded);
    } finally {
      await deployment.stop();
    }
  }, 120_000); // server processes started through the CLI: slow on a loaded 2-core machine
});

describe("buckets full again", () => {
  it("are forgotten: a full bucket and a forgotten one are the same, one still refilling is kept", async () => {
    // The server's own limiter off: only the one made here counts, forgetting at every charge.
    const h = await startHarness({ SIGIL_RATE_LIMITS: "false" });
    try {
      const config = loadConfig({
        SIGIL_RATE_LIMIT_KEY_ACTIVITIES: "1000/1",
        SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES: burstOf(5),
        SIGIL_RATE_LIMIT_ROOT_RESERVE: "off",
      }).rateLimits!;
      const limiter = rateLimiter(config, h.server.store, pino({ level: "silent" }), { pruneIntervalMs: 0 })!;
      const org = await h.organization();
      const requester = (credentialId: string) => ({ credentialId, userId: org.userId, organizationId: org.organizationId });
      await limiter.charge("activities", requester("first"));
      // The first key's bucket is full again a millisecond later; the organization's only in 1,000 s.
      await new Promise((resolve) => setTimeout(resolve, 20));
      await limiter.charge("activities", requester("second"));
      const held = async () => {
        if (h.server.store.dialect === "sqlite") return (limiter as unknown as { size: number }).size;
        const { rows } = await sql<{ key: string }>`select key from ${sql.table(RATE_LIMIT_TABLE)}`.execute(h.server.store.db);
        return rows.map((row) => row.key).sort();
      };
      if (h.server.store.dialect === "sqlite") {
        // Forgotten before the second charge: the organization's bucket and the second key's remain.
        expect(await held()).toBe(2);
      } else {
        // Forgotten after the second charge's statement, on another connection: looked at until done.
        for (let i = 0; i < 100 && ((await held()) as string[]).includes("activities:key:first"); i++)
          await new Promise((resolve) => setTimeout(resolve, 50));
        const keys = (await held()) as string[];
        expect(keys).not.toContain("activities:key:first");
        expect(keys).toContain(`activities:org:${org.organizationId}`);
      }
      // Forgetting changed nothing the buckets decide: the organization still has 3 of its 5.
      for (let i = 0; i < 3; i++) await limiter.charge("activities", requester(`more ${i}`));
      await expect(limiter.charge("activities", requester("one too many"))).rejects.toMatchObject({
        turnkeyErrorCode: "REQUEST_RATE_LIMITED",
      });
    } finally {
      await h.close();
    }
  });
});

describe("tokens taken ahead (PostgreSQL)", () => {
  it("a busy bucket's next tokens are taken with its first request: counted without a statement, and two processes together never admit more than the bucket holds", async () => {
    // The server's own limiter off: the two made here stand for two server processes.
    const h = await startHarness({ SIGIL_RATE_LIMITS: "false" });
    try {
      const config = loadConfig({
        SIGIL_RATE_LIMIT_KEY_ACTIVITIES: burstOf(12),
        SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES: UNREACHED,
        SIGIL_RATE_LIMIT_ROOT_RESERVE: "off",
      }).rateLimits!;
      // Three tokens at a time (the server takes a tenth of a second's worth; this bucket's rate is too low to).
      const options = { leaseOf: () => 3 };
      const limiter = () => rateLimiter(config, h.server.store, pino({ level: "silent" }), options)!;
      // SQLite serves one process, whose buckets are its memory.
      const first = limiter();
      const second = h.server.store.dialect === "postgres" ? limiter() : first;
      const org = await h.organization();
      const requester = { credentialId: "busy key", userId: org.userId, organizationId: org.organizationId, organizationParentId: null };
      const tally = h.server.store.statements;
      tally.texts = [];
      try {
        for (let i = 0; i < 3; i++) await first.charge("activities", requester);
        const charges = tally.texts.filter((text) => text.includes("sigil_charge_rate_limits(")).length;
        // SQLite counts in memory, statement or not; PostgreSQL once for the three.
        expect(charges).toBe(h.server.store.dialect === "postgres" ? 1 : 0);
      } finally {
        tally.texts = null;
      }
      // Both processes charge until each is refused: together exactly the bucket's 12 (the second's
      // leases, and the first's, are the database's tokens), never more.
      let admitted = 3;
      const refused = new Set<number>();
      for (let turn = 0; refused.size < 2 && turn < 40; turn++) {
        const charging = turn % 2 === 0 ? second : first;
        try {
          await charging.charge("activities", requester);
          admitted++;
        } catch (error) {
          expect(error).toMatchObject({ turnkeyErrorCode: "REQUEST_RATE_LIMITED" });
          refused.add(turn % 2);
        }
      }
      expect(refused.size).toBe(2);
      expect(admitted).toBeLessThanOrEqual(12);
      // At most one lease is left unused in each process when it is refused: 12 − 2 × 2 at the least.
      expect(admitted).toBeGreaterThanOrEqual(8);
    } finally {
      await h.close();
    }
  });
});
