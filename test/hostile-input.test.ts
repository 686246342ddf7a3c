// Hostile input on both backends. First the rules every request body obeys (no U+0000, no unpaired
// surrogate, bounded nesting, UTF-8 bytes), each sent and checked; then a generated-input run that
// drives every operation of the catalog with bodies shaped by its swagger schema but filled with
// hostile values, stamped by a real root key so they reach the operation. Whatever is sent, no answer
// is a 5xx, and a refused request changes nothing but the FAILED activity the design records for it.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { sql } from "kysely";
import { serializeTransaction } from "viem";
import { activityOperations, queryOperations } from "../src/operations/catalog.js";
import { queryPath, swagger } from "../src/registry/registry.js";
import { MAX_BODY_DEPTH } from "../src/registry/validation.js";
import { apiKeyStamp, newKeyPair, signedRequest, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { ETHER_MAIL, fastPoller, noCredentials } from "./helpers/organizations.js";
import { backend } from "./helpers/backend.js";
import type { Db, Tx } from "../src/store/handles.js";
import { ChangeJournal, ChangeModel, JOURNAL_TABLE, journalDiff, snapshotDiff, type TableChanges } from "./helpers/change-journal.js";
import { RATE_LIMIT_TABLE } from "../src/services/rate-limits.js";

// Generated strings never name a host (see `harmless` below); should one slip through, a webhook URL's
// host is still never looked up: this test sends no traffic beyond loopback.
vi.mock("node:dns/promises", async (importOriginal) => {
  const real = await importOriginal<typeof import("node:dns/promises")>();
  const lookup = async (host: string) => {
    throw Object.assign(new Error(`hostile-input test: no DNS lookups (${host})`), { code: "ENOTFOUND" });
  };
  return { ...real, lookup, default: { ...real, lookup } };
});

let h: Harness;
let tables: string[];
let journal: ChangeJournal;
beforeAll(async () => {
  // Thousands of requests a minute by one key: counted as every request is, against buckets they never empty.
  const unreached = "1000000/1000000";
  h = await startHarness({
    SIGIL_RATE_LIMIT_KEY_ACTIVITIES: unreached,
    SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES: unreached,
    SIGIL_RATE_LIMIT_KEY_QUERIES: unreached,
    SIGIL_RATE_LIMIT_ORGANIZATION_QUERIES: unreached,
  });
  // The rate limiter's buckets (PostgreSQL) change with every request, refused or not: its own state.
  tables = (await h.server.store.db.introspection.getTables())
    .map((t) => t.name)
    .filter((name) => !name.startsWith("kysely_") && name !== JOURNAL_TABLE && name !== RATE_LIMIT_TABLE)
    .sort();
  journal = await ChangeJournal.install(h.server.store, tables);
});
afterAll(() => h?.close());

const SUBMIT = (name: string) => `/public/v1/submit/${name}`;
const QUERY = (name: string) => `/public/v1/query/${name}`;

/** Every row of every table, as harness.snapshot reads them, but in one round trip on PostgreSQL. */
async function snapshotAll(db: Db | Tx = h.server.store.db): Promise<Record<string, string[]>> {
  // What is committed is appended to the transparency log first (the sequencer would, any moment):
  // two snapshots differ only by what happened between them.
  if (db === h.server.store.db) await h.server.logSequencer.flush();
  const out: Record<string, string[]> = Object.fromEntries(tables.map((table) => [table, []]));
  if (h.server.store.dialect === "postgres") {
    const union = tables.map((table) => `SELECT '${table}' AS t, row_to_json(x)::text AS r FROM "${table}" x`).join(" UNION ALL ");
    const { rows } = await sql<{ t: string; r: string }>`${sql.raw(union)}`.execute(db);
    for (const { t, r } of rows) out[t]!.push(r);
  } else {
    for (const table of tables)
      out[table] = (
        await db
          .selectFrom(table as "users")
          .selectAll()
          .execute()
      ).map((row) => JSON.stringify(row));
  }
  for (const table of tables) out[table]!.sort();
  return out;
}

/**
 * Every row of every table, and the journal's changes up to that same moment (the journal emptied of
 * them), read in one transaction: whatever the server commits meanwhile is in neither, and is in the
 * journal's next take.
 */
async function snapshotWithChanges() {
  const store = h.server.store;
  const read = async (trx: Tx) => ({ snapshot: await snapshotAll(trx), changes: await journal.take(trx) });
  return store.dialect === "postgres"
    ? store.db.transaction().setIsolationLevel("repeatable read").execute(read)
    : store.db.transaction().execute(read);
}

/**
 * What a refused request may leave behind: nothing, or (refused by policy or by the operation) its
 * FAILED activity and that activity's policy evaluations. Returns what else changed, or undefined.
 */
/**
 * The changes without the transparency log's sequencer's: it appends final activities after their
 * commit, in the background (services/log-sequencer.ts), so its writes to the log's tables land in
 * whichever request's changes are taken next. They are the log's, not the request's (an activity's own
 * pending row, written with it, is left out with them).
 */
function withoutSequencing(changes: TableChanges): TableChanges {
  return Object.fromEntries(Object.entries(changes).filter(([table]) => !table.startsWith("transparency_log_")));
}

function unexpectedChanges(all: TableChanges): string | undefined {
  const changes = withoutSequencing(all);
  const diff = (table: string) => changes[table] ?? { added: [], removed: [] };
  const activities = diff("activities");
  const failed = new Set<string>();
  for (const row of activities.added) {
    const activity = JSON.parse(row) as { id: string; status: string };
    if (activity.status !== "ACTIVITY_STATUS_FAILED") return `a refused request added a ${activity.status} activity: ${row.slice(0, 300)}`;
    failed.add(activity.id);
  }
  if (activities.removed.length) return `a refused request changed activities: ${activities.removed[0]!.slice(0, 300)}`;
  const evaluations = diff("policy_evaluations");
  if (evaluations.removed.length || evaluations.added.some((r) => !failed.has((JSON.parse(r) as { activity_id: string }).activity_id))) {
    return "a refused request changed policy evaluations other than its own";
  }
  for (const table of Object.keys(changes)) {
    if (table === "activities" || table === "policy_evaluations") continue;
    const { added, removed } = diff(table);
    if (added.length || removed.length)
      return `a refused request changed ${table}: +${(added[0] ?? "").slice(0, 300)} -${(removed[0] ?? "").slice(0, 300)}`;
  }
  return undefined;
}

async function sendStamped(path: string, text: string, org: TestOrganization) {
  const { headers } = signedRequest(text, org.key);
  return h.post(path, text, headers);
}

// ---------------------------------------------------------------------------------------------
// The rules, request by request
// ---------------------------------------------------------------------------------------------

function errorBody(turnkeyErrorCode: string, message: string) {
  return {
    code: 3,
    message,
    details: [{ "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode }],
    requestId: expect.any(String),
  };
}

/** Sends a stamped body that must be refused with `code` (400), and checks that nothing changed. */
async function expectRefused(org: TestOrganization, path: string, text: string, code: string, message: RegExp) {
  const before = await snapshotAll();
  const response = await sendStamped(path, text, org);
  expect(response.status, JSON.stringify(response.json)).toBe(400);
  expect(response.json).toEqual(errorBody(code, expect.stringMatching(message) as unknown as string));
  expect(await snapshotAll()).toEqual(before);
  return response.json.message as string;
}

describe("text every request body may carry", () => {
  let org: TestOrganization;
  let walletAddress: string;
  beforeAll(async () => {
    org = await h.organization("Text Rules");
    const wallet = await h.sdk(org, org.key, fastPoller).createWallet({
      walletName: "text rules",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    walletAddress = wallet.addresses[0]!;
  });
  const envelope = (type: string, parameters: unknown, organizationId = org.organizationId) => ({
    type,
    timestampMs: String(Date.now()),
    organizationId,
    parameters,
  });

  it("refuses U+0000 in a name with 400 TEXT_CONTAINS_NUL naming the field, on either backend, changing nothing", async () => {
    const text = JSON.stringify(envelope("ACTIVITY_TYPE_CREATE_USER_TAG", { userTagName: "ops\u0000team", userIds: [] }));
    const expected = /^field "parameters\.userTagName" contains the character U\+0000 \(NUL\)/;
    const message = await expectRefused(org, SUBMIT("create_user_tag"), text, "TEXT_CONTAINS_NUL", expected);
    expect(message).toContain("PAYLOAD_ENCODING_HEXADECIMAL");
  });

  it("refuses U+0000 deep in an array of objects, naming the path", async () => {
    const user = { userName: "eve", userEmail: "eve@example.com\u0000", apiKeys: [], ...noCredentials };
    const text = JSON.stringify(
      envelope("ACTIVITY_TYPE_CREATE_USERS_V3", { users: [{ userName: "ok", apiKeys: [], ...noCredentials }, user] }),
    );
    await expectRefused(org, SUBMIT("create_users"), text, "TEXT_CONTAINS_NUL", /^field "parameters\.users\[1\]\.userEmail" contains/);
  });

  it("refuses U+0000 in the organizationId before authentication reads it", async () => {
    const text = JSON.stringify(
      envelope("ACTIVITY_TYPE_CREATE_USER_TAG", { userTagName: "t", userIds: [] }, `${org.organizationId}\u0000`),
    );
    await expectRefused(org, SUBMIT("create_user_tag"), text, "TEXT_CONTAINS_NUL", /^field "organizationId" contains/);
  });

  it("refuses U+0000 in a query's id and in a pagination cursor", async () => {
    const getUser = JSON.stringify({ organizationId: org.organizationId, userId: `${org.userId}\u0000` });
    await expectRefused(org, QUERY("get_user"), getUser, "TEXT_CONTAINS_NUL", /^field "userId" contains/);
    const page = JSON.stringify({ organizationId: org.organizationId, paginationOptions: { limit: "5", after: "\u0000" } });
    await expectRefused(org, QUERY("list_activities"), page, "TEXT_CONTAINS_NUL", /^field "paginationOptions\.after" contains/);
  });

  it("refuses U+0000 in a field name, even one the schema would refuse anyway", async () => {
    const text = JSON.stringify(envelope("ACTIVITY_TYPE_CREATE_USER_TAG", { userTagName: "t", userIds: [], "x\u0000": 1 }));
    await expectRefused(org, SUBMIT("create_user_tag"), text, "TEXT_CONTAINS_NUL", /^a field name in field "parameters" contains/);
  });

  it("refuses U+0000 in a UTF-8 text payload, and signs the same bytes sent hex-encoded", async () => {
    const params = (payload: string, encoding: string) => ({
      signWith: walletAddress,
      payload,
      encoding,
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    const text = JSON.stringify(envelope("ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", params("a\u0000b", "PAYLOAD_ENCODING_TEXT_UTF8")));
    await expectRefused(org, SUBMIT("sign_raw_payload"), text, "TEXT_CONTAINS_NUL", /^field "parameters\.payload" contains .*hex-encoded/);
    const hex = JSON.stringify(
      envelope("ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", params(Buffer.from("a\u0000b").toString("hex"), "PAYLOAD_ENCODING_HEXADECIMAL")),
    );
    const signed = await sendStamped(SUBMIT("sign_raw_payload"), hex, org);
    expect(signed.status, JSON.stringify(signed.json)).toBe(200);
    expect(signed.json.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("refuses an unpaired surrogate with 400 TEXT_NOT_UNICODE (a database would store U+FFFD instead)", async () => {
    const text = JSON.stringify(envelope("ACTIVITY_TYPE_CREATE_USER_TAG", { userTagName: "half \ud83d", userIds: [] }));
    expect(text).toContain("\\ud83d");
    await expectRefused(
      org,
      SUBMIT("create_user_tag"),
      text,
      "TEXT_NOT_UNICODE",
      /^field "parameters\.userTagName" contains an unpaired UTF-16 surrogate/,
    );
  });

  it("refuses a body nested deeper than the limit with 400 REQUEST_TOO_DEEP", async () => {
    const deep = "[".repeat(100_000) + "]".repeat(100_000);
    const text = JSON.stringify(envelope("ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION", { x: "<deep>" })).replace('"<deep>"', deep);
    await expectRefused(
      org,
      SUBMIT("create_read_only_session"),
      text,
      "REQUEST_TOO_DEEP",
      new RegExp(`more than ${MAX_BODY_DEPTH} levels deep`),
    );
  });

  it("refuses bytes that are not UTF-8 with 400 REQUEST_BODY_INVALID", async () => {
    const text = JSON.stringify(envelope("ACTIVITY_TYPE_CREATE_USER_TAG", { userTagName: "latin-1 ÿ", userIds: [] }));
    const bytes = Buffer.from(text, "latin1");
    const before = await snapshotAll();
    const response = await h.post(SUBMIT("create_user_tag"), bytes, { "X-Stamp": apiKeyStamp(bytes, org.key) });
    expect(response.json).toEqual(errorBody("REQUEST_BODY_INVALID", "request body is not valid UTF-8: send JSON encoded as UTF-8"));
    expect(response.status).toBe(400);
    expect(await snapshotAll()).toEqual(before);
  });

  it("lists every schema error of a small body, and only the first of a body with thousands of them", async () => {
    // Listing all of them took time quadratic in their number (12 s for 70 000 wrong items).
    const few = JSON.stringify(envelope("ACTIVITY_TYPE_DELETE_USERS", { userIds: [1, 2, 3] }));
    const all = [0, 1, 2].map((i) => `field "parameters\\.userIds\\[${i}\\]" must be string`).join("; ");
    await expectRefused(org, SUBMIT("delete_users"), few, "REQUEST_INVALID", new RegExp(`^invalid request: ${all}$`));
    const many = JSON.stringify(envelope("ACTIVITY_TYPE_DELETE_USERS", { userIds: Array(70_000).fill(0) }));
    await expectRefused(
      org,
      SUBMIT("delete_users"),
      many,
      "REQUEST_INVALID",
      /^invalid request: field "parameters\.userIds\[0\]" must be string$/,
    );
  });

  it("stores other control characters as sent, and reads them back the same on either backend", async () => {
    const name = "tab\there\u0001\u001f\u007f\u2028end";
    const text = JSON.stringify(envelope("ACTIVITY_TYPE_CREATE_USER_TAG", { userTagName: name, userIds: [] }));
    const created = await sendStamped(SUBMIT("create_user_tag"), text, org);
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const tags = await sendStamped(QUERY("list_user_tags"), JSON.stringify({ organizationId: org.organizationId }), org);
    expect(tags.json.userTags.map((t: { tagName: string }) => t.tagName)).toContain(name);
  });
});

describe("an empty string is an id like any other", () => {
  let org: TestOrganization;
  let tagIds: { user: string; privateKey: string };
  let secondKeyId: string;
  beforeAll(async () => {
    org = await h.organization("Empty Ids");
    const sdk = h.sdk(org, org.key, fastPoller);
    tagIds = {
      user: (await sdk.createUserTag({ userTagName: "u", userIds: [] })).userTagId,
      privateKey: (await sdk.createPrivateKeyTag({ privateKeyTagName: "k", privateKeyIds: [] })).privateKeyTagId,
    };
    const apiKeys = [{ apiKeyName: "second", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" as const }];
    secondKeyId = (await sdk.createApiKeys({ userId: org.userId, apiKeys })).apiKeyIds[0]!;
  });

  /** Sends a request the operation must refuse: one FAILED activity with that error, nothing else changed. */
  async function expectFailed(path: string, type: string, parameters: unknown, status: number, code: string) {
    const before = await snapshotAll();
    const text = JSON.stringify({ type, timestampMs: String(Date.now()), organizationId: org.organizationId, parameters });
    const response = await sendStamped(path, text, org);
    expect(response.status, JSON.stringify(response.json)).toBe(status);
    expect(response.json.details[0].turnkeyErrorCode).toBe(code);
    const after = await snapshotAll();
    expect(unexpectedChanges(snapshotDiff(before, after))).toBeUndefined();
    expect(after.activities!.length).toBe(before.activities!.length + 1);
  }

  it('update_user_tag / update_private_key_tag adding member "" is 404, not a foreign-key 500', async () => {
    const users = { userTagId: tagIds.user, addUserIds: [""], removeUserIds: [] };
    await expectFailed(SUBMIT("update_user_tag"), "ACTIVITY_TYPE_UPDATE_USER_TAG", users, 404, "USER_NOT_FOUND");
    const keys = { privateKeyTagId: tagIds.privateKey, addPrivateKeyIds: [""], removePrivateKeyIds: [] };
    await expectFailed(SUBMIT("update_private_key_tag"), "ACTIVITY_TYPE_UPDATE_PRIVATE_KEY_TAG", keys, 404, "PRIVATE_KEY_NOT_FOUND");
  });

  it('tagging a new user or private key with tag "" is 404', async () => {
    const user = { userName: "tagged", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [""] };
    await expectFailed(SUBMIT("create_users"), "ACTIVITY_TYPE_CREATE_USERS_V3", { users: [user] }, 404, "USER_TAG_NOT_FOUND");
    const key = { privateKeyName: "tagged", curve: "CURVE_SECP256K1", privateKeyTags: [""], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] };
    await expectFailed(
      SUBMIT("create_private_keys"),
      "ACTIVITY_TYPE_CREATE_PRIVATE_KEYS_V2",
      { privateKeys: [key] },
      404,
      "PRIVATE_KEY_TAG_NOT_FOUND",
    );
  });

  it('deleting API key "" or wallet account "" is 404, not a success that deleted nothing', async () => {
    const apiKeys = { userId: org.userId, apiKeyIds: [secondKeyId, ""] };
    await expectFailed(SUBMIT("delete_api_keys"), "ACTIVITY_TYPE_DELETE_API_KEYS", apiKeys, 404, "API_KEY_NOT_FOUND");
    const accounts = { walletAccountIds: [""], deleteWithoutExport: true };
    await expectFailed(SUBMIT("delete_wallet_accounts"), "ACTIVITY_TYPE_DELETE_WALLET_ACCOUNTS", accounts, 404, "WALLET_ACCOUNT_NOT_FOUND");
  });
});

describe("the change journal the generated requests are checked with", () => {
  const sorted = (changes: TableChanges) =>
    Object.fromEntries(
      Object.entries(changes).map(([table, { added, removed }]) => [table, { added: [...added].sort(), removed: [...removed].sort() }]),
    );

  it("records inserts, updates and deletes in any table as a full read sees them, and a model missing one differs from the tables", async () => {
    const org = await h.organization("Journal");
    await journal.take();
    const before = await snapshotAll();
    const db = h.server.store.db;
    // Written behind the server's back: an insert (a whole organization), an update, a delete.
    await h.organization("Journal (other)");
    await sql`UPDATE organizations SET name = ${"renamed"}, updated_at = updated_at + 1 WHERE id = ${org.organizationId}`.execute(db);
    await sql`DELETE FROM root_quorum_members WHERE organization_id = ${org.organizationId}`.execute(db);
    const changes = await journal.take();
    const after = await snapshotAll();
    const diff = journalDiff(changes);
    expect(Object.keys(diff)).toEqual(expect.arrayContaining(["organizations", "users", "api_keys", "root_quorum_members"]));
    expect(sorted(diff)).toEqual(sorted(snapshotDiff(before, after)));
    expect(unexpectedChanges(diff)).toMatch(/^a refused request changed /);
    expect(queryChanges(diff)).toMatch(/^a query changed /);
    expect(await journal.take()).toEqual([]);

    const model = new ChangeModel(before);
    model.apply(changes);
    expect(model.differenceFrom(after)).toBeUndefined();
    // Had the journal missed the update (or any one change), the full read would not match it.
    const missing = new ChangeModel(before);
    missing.apply(changes.filter((c) => !(c.table === "organizations" && c.old !== null)));
    expect(missing.differenceFrom(after)).toMatch(/^organizations (holds|lost) a row the journal did not record/);
  });
});

// ---------------------------------------------------------------------------------------------
// Generated hostile input against every operation
// ---------------------------------------------------------------------------------------------

/** Fixed seeds: the same bodies on every run and both backends (fast-check prints the seed on failure).
 * Each operation gets its own, derived from its name, so they are not all sent the same sequence. */
const SEED = 20_261_125;
const seedFor = (name: string) => [...name].reduce((hash, c) => (Math.imul(hash, 31) + c.charCodeAt(0)) | 0, SEED);
const RUNS_PER_TYPE = 6;

/** JSON text written as is, for what JSON.stringify cannot produce (1e400, 100 000 nested arrays). */
class Raw {
  constructor(readonly json: string) {}
  // How fast-check shows it in a failure report: not the whole megabyte.
  [fc.toStringMethod]() {
    return this.json.length > 80 ? `Raw(${this.json.slice(0, 40)}… ${this.json.length} chars)` : `Raw(${this.json})`;
  }
}
const NOW = "<timestampMs: now>";

function toJson(value: unknown): string {
  if (value instanceof Raw) return value.json;
  if (value === NOW) return JSON.stringify(String(Date.now()));
  if (Array.isArray(value)) return `[${value.map(toJson).join(",")}]`;
  if (value !== null && typeof value === "object")
    return `{${Object.entries(value)
      .map(([k, v]) => `${JSON.stringify(k)}:${toJson(v)}`)
      .join(",")}}`;
  return JSON.stringify(value) ?? "null";
}

/** No generated value is an http(s) URL: a webhook endpoint must never point anywhere but loopback. */
function harmless(text: string): string {
  try {
    const url = new URL(text);
    if (url.protocol === "http:" || url.protocol === "https:") return "http://127.0.0.1:9/hook";
  } catch {
    // not a URL
  }
  return text;
}

const char = (from: number, to: number) => fc.integer({ min: from, max: to }).map((c) => String.fromCharCode(c));
const NASTY_TEXT = [
  "",
  " ",
  "\t\r\n",
  "\u0001\u0002\u001f",
  "\u007f\u0085\u2028\u2029",
  "\u202egnp.exe",
  "\ufeff",
  "\ufffe\uffff",
  "e\u0301",
  "𝕏😀",
  "0x",
  "0xzz",
  "0xABCDEFG",
  "zz",
  "00",
  "0",
  "-1",
  "-0",
  "0.5",
  "1e309",
  "-1e309",
  "NaN",
  "Infinity",
  "9".repeat(400),
  "18446744073709551616",
  "' OR '1'='1",
  '"); DROP TABLE users; --',
  "%00",
  "%s%n",
  "../../../etc/passwd",
  "null",
  "true",
  "[]",
  "{}",
  '{"__proto__":{"x":1}}',
  "__proto__",
  "constructor",
  "toString",
  "m/44'/60'/0'/0/2147483648",
  "m/-1",
  "m/44'/60'/0'/0/99999999999999999999",
  "m//",
  "m/44'/60'/0'/0/0/0/0/0/0/0/0",
  "ACTIVITY_TYPE_CREATE_USERS_V4",
  "API_KEY_CURVE_ED25519",
  "user@",
  "@example.com",
  "a@b",
  "+",
  "+1",
  "+999999999999999999999",
  '{"types":{"EIP712Domain":[]},"primaryType":"EIP712Domain","domain":{"chainId":"0xzz"},"message":{}}',
  '{"types":{"EIP712Domain":[{"name":"chainId","type":"uint256"}]},"primaryType":"EIP712Domain","domain":{"chainId":-1},"message":{}}',
  '{"chainId":"zz","address":"0x","nonce":"-1"}',
  '{"chainId":"1e400","address":"0x0000000000000000000000000000000000000000","nonce":"1.5"}',
];
const NUL_TEXT = ["\u0000", "a\u0000", "\u0000b", "\ud800", "x\udfff", "\ud83d", "\udc00\ud800", "ok\u0000\ud800"];
// Past every length rule (256 for names) and past what a PostgreSQL index entry holds (2 704 bytes).
const lengths = [300, 3_000, 30_000];

/** Hostile strings that are still well-formed text without U+0000 (they pass the text rules). */
const hostileText: fc.Arbitrary<string> = fc
  .oneof(
    { weight: 4, arbitrary: fc.constantFrom(...NASTY_TEXT) },
    { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 24 }).filter((s) => !/\u0000|[\uD800-\uDFFF]/.test(s)) },
    { weight: 1, arbitrary: fc.string({ unit: char(1, 0x1f), maxLength: 8 }) },
    { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom(..."0123456789abcdefABCDEFxXgz"), maxLength: 90 }) },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom(...lengths), fc.constantFrom("a", "ab", "é", "😀", "0")).map(([n, unit]) => unit.repeat(n)),
    },
  )
  .map(harmless);

/** Strings the text rules refuse: U+0000 and unpaired surrogates, alone or inside other text. */
const forbiddenText: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(...NUL_TEXT),
  fc.tuple(fc.string({ maxLength: 6 }), fc.constantFrom(...NUL_TEXT), fc.string({ maxLength: 6 })).map((parts) => parts.join("")),
  fc.string({ unit: char(0xd800, 0xdfff), minLength: 1, maxLength: 3 }),
);

const hostileNumber: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(0, -1, 1, 3, 2 ** 31, 2 ** 32, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 1e21, 1e308, -1e308, 0.5, -0.5, 5e-324, -0),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom("1e400", "-1e400", `1${"0".repeat(400)}`, "123456789012345678901234567890", "1.0", "-0.0", "1E2").map((t) => new Raw(t)),
);

/** Integers JSON.parse reads as integers, from 0 to far past 2^53 (written as a digit string the parser rounds). */
const hostileInteger: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(0, -1, 1, 2, 3, 2 ** 31, -(2 ** 31), 2 ** 32, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 1e21, 1e300, -1e300, -0),
  fc.integer(),
  fc.constantFrom("123456789012345678901234567890", `1${"0".repeat(300)}`, "-99999999999999999999").map((t) => new Raw(t)),
);

const nestedArrays = (n: number) => new Raw("[".repeat(n) + "]".repeat(n));
const nestedObjects = (n: number) => new Raw(`${'{"a":'.repeat(n)}1${"}".repeat(n)}`);
const deepValue = fc.constantFrom(
  nestedArrays(MAX_BODY_DEPTH + 1),
  nestedArrays(2_000),
  nestedArrays(100_000),
  nestedObjects(MAX_BODY_DEPTH + 1),
  nestedObjects(50_000),
);
// More items than SQLite binds in one statement (32 766), or than a spread passes as arguments,
// within the 1 MiB body limit.
const hugeArrays = [
  [40_000, '"x"'],
  [200_000, '""'],
  [70_000, "0"],
  [450_000, "0"],
  [20_000, "{}"],
] as const;
const hugeArray = fc.constantFrom(...hugeArrays.map(([n, item]) => new Raw(`[${Array(n).fill(item).join(",")}]`)));

/** Any value of the wrong kind for the field it is put in. */
const wrongKind: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, [], {}, [null], { "": "" }),
  hostileNumber,
  hostileText,
  deepValue,
  hugeArray,
);

/** How hostile one generated body is: hostile values of the right type, forbidden text, or wrong shapes. */
type Mode = "values" | "text" | "shape";

type Schema = { $ref?: string; type?: string; enum?: unknown[]; properties?: Record<string, Schema>; required?: string[]; items?: Schema };
const resolve = (schema: Schema): Schema => (schema.$ref ? resolve(swagger.definitions[schema.$ref.split("/").pop()!] as Schema) : schema);

/** Values that name things that exist, by field name, so hostile bodies also reach the code behind the lookups. */
type Known = Record<string, unknown[]>;

function arbitraryFor(schema: Schema, field: string, mode: Mode, known: Known): fc.Arbitrary<unknown> {
  const s = resolve(schema);
  const sometimesWrong = (typed: fc.Arbitrary<unknown>, weight: number) =>
    fc.oneof({ weight, arbitrary: typed }, { weight: 1, arbitrary: wrongKind });
  const withShape = (typed: fc.Arbitrary<unknown>) => (mode === "shape" ? sometimesWrong(typed, 3) : typed);
  // Outside "shape" bodies, enums and integers keep their type, so the schema lets the body through
  // and the hostile values elsewhere in it reach the operation.
  if (s.enum) return mode === "shape" ? sometimesWrong(fc.constantFrom(...s.enum), 4) : fc.constantFrom(...s.enum);
  switch (s.type) {
    case "string": {
      if (field === "organizationId") return withShape(organizationIdArbitrary(mode, known));
      const good = known[field] ?? [];
      const bad = mode === "text" ? fc.oneof(hostileText, forbiddenText) : hostileText;
      return withShape(good.length ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...good) }, { weight: 2, arbitrary: bad }) : bad);
    }
    case "integer":
      return withShape(hostileInteger);
    case "number":
      return withShape(hostileNumber);
    case "boolean":
      return withShape(fc.boolean());
    case "array": {
      // Items of a list of ids are named by the list (userIds -> what userId names).
      const itemField = known[field] ? field : field.replace(/s$/, "");
      const items = fc.array(arbitraryFor(s.items ?? {}, itemField, mode, known), { maxLength: 3 });
      return mode === "values" ? items : withShape(fc.oneof({ weight: 4, arbitrary: items }, { weight: 1, arbitrary: hugeArray }));
    }
    case "object":
    default: {
      if (!s.properties) {
        // A free-form object: anything, including keys that are themselves hostile.
        const keys = mode === "text" ? fc.oneof(hostileText, forbiddenText) : hostileText;
        return fc.oneof(fc.dictionary(keys, fc.oneof(hostileText, hostileNumber), { maxKeys: 4 }), deepValue);
      }
      const properties = Object.fromEntries(
        Object.entries(s.properties).map(([name, sub]) => [name, arbitraryFor(sub, name, mode, known)]),
      );
      const record = fc.record(properties, { requiredKeys: (s.required ?? []).filter((k) => k in properties) });
      if (mode === "values") return record;
      const extraKey = fc.tuple(record, mode === "text" ? forbiddenText : hostileText, hostileText).map(([r, k, v]) => ({ ...r, [k]: v }));
      return withShape(fc.oneof({ weight: 4, arbitrary: record }, { weight: 1, arbitrary: extraKey }));
    }
  }
}

/** The target organization's id, mostly: another organization's, or none, stops at authentication. */
function organizationIdArbitrary(mode: Mode, known: Known): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: 20, arbitrary: fc.constant(known.organizationId![0]) },
    { weight: 1, arbitrary: fc.constantFrom(...known.organizationId!) },
    { weight: 1, arbitrary: mode === "text" ? forbiddenText : hostileText },
  );
}

/** A request envelope for `type` (or a query body), hostile in the way `mode` says. */
function bodyArbitrary(request: Schema, mode: Mode, known: Known, type?: string): fc.Arbitrary<unknown> {
  if (!type) return arbitraryFor(request, "", mode, known);
  const parameters = arbitraryFor({ $ref: `#/definitions/${swagger.activityTypes[type]!.parameters}` }, "parameters", mode, known);
  // The envelope stays mostly valid (a fresh timestampMs, the organization's own id): the point is
  // to reach the operation with hostile parameters.
  const timestampMs = fc.oneof({ weight: 20, arbitrary: fc.constant(NOW) }, { weight: 1, arbitrary: hostileText });
  return fc.record({ type: fc.constant(type), timestampMs, organizationId: organizationIdArbitrary(mode, known), parameters });
}

const modes: fc.Arbitrary<Mode> = fc.constantFrom<Mode>("values", "values", "values", "values", "text", "shape");

/** An organization with one of everything (a user with a key, a wallet, a private key, tags, a policy) to aim at. */
async function target(name: string): Promise<{ org: TestOrganization; known: Known }> {
  const org = await h.organization(name);
  const other = await h.organization(`${name} (other)`);
  const sdk = h.sdk(org, org.key, fastPoller);
  const memberKey = newKeyPair();
  const memberApiKeys = [{ apiKeyName: "member key", publicKey: memberKey.publicKey, curveType: "API_KEY_CURVE_P256" as const }];
  const { userIds } = await sdk.createUsers({
    users: [{ userName: "member", userEmail: "member@example.com", apiKeys: memberApiKeys, ...noCredentials }],
  });
  const member = await sdk.getUser({ userId: userIds[0]! });
  const account = {
    curve: "CURVE_SECP256K1",
    pathFormat: "PATH_FORMAT_BIP32",
    path: "m/44'/60'/0'/0/0",
    addressFormat: "ADDRESS_FORMAT_ETHEREUM",
  } as const;
  const wallet = await sdk.createWallet({ walletName: "main", accounts: [account] });
  const keyParams = {
    privateKeyName: "key",
    curve: "CURVE_SECP256K1" as const,
    privateKeyTags: [],
    addressFormats: ["ADDRESS_FORMAT_ETHEREUM" as const],
  };
  const [privateKey] = (await sdk.createPrivateKeys({ privateKeys: [keyParams] })).privateKeys;
  const { userTagId } = await sdk.createUserTag({ userTagName: "tag", userIds: [] });
  const { privateKeyTagId } = await sdk.createPrivateKeyTag({ privateKeyTagName: "pk tag", privateKeyIds: [] });
  const { policyId } = await sdk.createPolicy({
    policyName: "policy",
    effect: "EFFECT_ALLOW",
    condition: "activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2'",
    consensus: `approvers.any(user, user.id == '${org.userId}')`,
    notes: "",
  });
  const { activities } = await sdk.getActivities({});
  const address = wallet.addresses[0]!;
  const fees = { gas: 21_000n, maxFeePerGas: 1n, maxPriorityFeePerGas: 1n };
  const tx = serializeTransaction({ type: "eip1559", chainId: 1, nonce: 0, to: address as `0x${string}`, value: 1n, ...fees });
  const ids = (...values: unknown[]) => values.filter((v) => v !== undefined);
  const known: Known = {
    organizationId: [org.organizationId, other.organizationId],
    userId: ids(org.userId, member.user.userId),
    apiKeyId: ids(...member.user.apiKeys.map((k) => k.apiKeyId), org.apiKeyId),
    walletId: [wallet.walletId],
    privateKeyId: [privateKey!.privateKeyId],
    signWith: [address, privateKey!.privateKeyId, privateKey!.addresses![0]!.address!],
    address: [address],
    userTagId: [userTagId],
    privateKeyTagId: [privateKeyTagId],
    policyId: [policyId],
    activityId: activities.map((a) => a.id),
    fingerprint: activities.map((a) => a.fingerprint),
    publicKey: [newKeyPair().publicKey, memberKey.publicKey],
    targetPublicKey: [`04${"11".repeat(64)}`, newKeyPair().publicKey],
    path: ["m/44'/60'/0'/0/1", "m/44'/501'/0'/0'"],
    payload: ["0xdeadbeef", "hello", JSON.stringify(ETHER_MAIL), "00".repeat(32)],
    unsignedTransaction: [tx, tx.slice(0, -2)],
    userEmail: ["someone@example.com"],
    contact: ["someone@example.com", "+15555550100"],
    condition: ["true", "activity.resource == 'USER'"],
    consensus: ["approvers.count() >= 1"],
    url: ["http://127.0.0.1:9/hook"],
  };
  known.rootUserId = known.userId!;
  known.addUserId = known.removeUserId = known.userId!;
  known.addPrivateKeyId = known.removePrivateKeyId = known.privateKeyId!;
  known.walletAccountId = known.address!;
  return { org, known };
}

/**
 * What the generated requests are checked against. After each request the change journal says what
 * it wrote, row by row, in every table (test/helpers/change-journal.ts): reading that costs what the
 * request changed, where reading every row of every table after each request cost the whole
 * database, and most of this file's time. `model` is the database as the journal says it is; at the
 * end of each operation's run every row of every table is read and compared with it, which proves
 * the journal missed nothing (a change it had not recorded would be in the table but not the model).
 * Undefined until the first run, and after a failed one: the next run starts from a full read.
 */
let model: ChangeModel | undefined;

/** Sends each generated body; checks the status and, for a refusal, that nothing else changed. */
async function drive(path: string, name: string, org: TestOrganization, arbitrary: fc.Arbitrary<unknown>, isQuery: boolean) {
  // What was written since the last run (this operation's fixtures) is taken into the model unchecked.
  if (model) model.apply(await journal.take());
  else model = new ChangeModel((await snapshotWithChanges()).snapshot);
  try {
    await fc.assert(
      fc.asyncProperty(arbitrary, async (body) => {
        const text = toJson(body);
        const response = await sendStamped(path, text, org);
        // Every change this request made to any table, in the order it was made.
        const changes = await journal.take();
        model!.apply(changes);
        const sent = text.length > 600 ? `${text.slice(0, 600)}… (${text.length} chars)` : text;
        const shown = `${path} answered ${response.status} ${JSON.stringify(response.json).slice(0, 400)} to ${sent}`;
        if (response.status >= 500) throw new Error(shown);
        if (response.status >= 400 || isQuery) {
          const diff = journalDiff(changes);
          const changed = isQuery ? queryChanges(diff) : unexpectedChanges(diff);
          if (changed) throw new Error(`${changed}; ${shown}`);
        }
      }),
      { seed: seedFor(name), numRuns: RUNS_PER_TYPE, endOnFailure: true },
    );
    // Anything committed after the last request's take (nothing, unless the server writes after it
    // answers) is applied as the fixtures are: the comparison is about what the journal records.
    const { snapshot: actual, changes: late } = await snapshotWithChanges();
    model.apply(late);
    const missed = model.differenceFrom(actual);
    model = new ChangeModel(actual);
    if (missed) throw new Error(`every row of every table, read after ${name}, is not what the change journal recorded: ${missed}`);
  } catch (error) {
    model = undefined;
    throw error;
  }
}

/** A query changes nothing: the first table it changed, or undefined. */
function queryChanges(diff: TableChanges): string | undefined {
  const first = Object.entries(withoutSequencing(diff))[0];
  if (!first) return undefined;
  const [table, { added, removed }] = first;
  return `a query changed ${table}: +${(added[0] ?? "").slice(0, 300)} -${(removed[0] ?? "").slice(0, 300)}`;
}

describe(`generated hostile input (${backend})`, () => {
  // One target per operation, shared by its versions; one for all queries (they change nothing).
  const targets = new Map<string, Promise<{ org: TestOrganization; known: Known }>>();
  const targetFor = (name: string) => targets.get(name) ?? targets.set(name, target(name)).get(name)!;
  const types = activityOperations.flatMap((op) => op.types.map((type) => ({ op, type })));
  it.each(types)("submit/$op.name $type answers no 5xx and a refusal changes nothing", async ({ op, type }) => {
    const { org, known } = await targetFor(op.name);
    const arbitrary = modes.chain((mode) => bodyArbitrary({}, mode, known, type));
    await drive(SUBMIT(op.name), type, org, arbitrary, false);
  });

  // The numbers inside EIP-712 typed data and EIP-7702 authorizations are JSON within a string: the
  // schema cannot see them, so they get a property of their own.
  const malformedNumber = fc.constantFrom<unknown>(
    "0xzz",
    "zz",
    "",
    "0x",
    "1.5",
    "-1",
    "1e400",
    "1e3",
    " 1",
    "0x-1",
    1.5,
    -1,
    1e21,
    2 ** 53 + 2,
    null,
    true,
    {},
    [],
    [1],
  );
  const eip712 = fc.record({ chainId: malformedNumber, amount: malformedNumber }).map(({ chainId, amount }) =>
    JSON.stringify({
      ...ETHER_MAIL,
      domain: { ...ETHER_MAIL.domain, chainId },
      types: { ...ETHER_MAIL.types, Mail: [...ETHER_MAIL.types.Mail, { name: "amount", type: "uint256" }] },
      message: { ...ETHER_MAIL.message, amount },
    }),
  );
  const eip7702 = fc
    .record({ chainId: malformedNumber, nonce: malformedNumber })
    .map(({ chainId, nonce }) => JSON.stringify({ address: "0xCcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC", chainId, nonce }));
  it.each([
    { encoding: "PAYLOAD_ENCODING_EIP712", payload: eip712 },
    { encoding: "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION", payload: eip7702 },
  ])("submit/sign_raw_payload with $encoding holding malformed numbers answers no 5xx", async ({ encoding, payload }) => {
    const { org, known } = await targetFor("sign_raw_payload");
    const parameters = fc.record({
      signWith: fc.constantFrom(...known.signWith!),
      payload,
      encoding: fc.constant(encoding),
      hashFunction: fc.constant("HASH_FUNCTION_NO_OP"),
    });
    const body = fc.record({
      type: fc.constant("ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2"),
      timestampMs: fc.constant(NOW),
      organizationId: fc.constant(known.organizationId![0]),
      parameters,
    });
    await drive(SUBMIT("sign_raw_payload"), encoding, org, body, false);
  });

  it.each(queryOperations)("query/$name answers no 5xx and changes nothing", async (op) => {
    const { org, known } = await targetFor("queries");
    // A query of Sigil's own declares its body's schema; the API's are in the API description.
    const request = op.own ? (op.own.schema as Schema) : { $ref: `#/definitions/${swagger.queries[op.name]!.request}` };
    const arbitrary = modes.chain((mode) => bodyArbitrary(request, mode, known));
    await drive(queryPath(op), op.name, org, arbitrary, true);
  });
});
