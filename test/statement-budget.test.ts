// How many statements one signature sends to the database: each is a round trip on PostgreSQL (and
// work on either database), so the count is a deterministic measure of the signing path's cost,
// where a timing would be noise on a shared machine. docs/benchmarks.md#statements-per-signature
// says where each statement comes from.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./helpers/harness.js";
import { signingOrganization, type Member } from "./helpers/organizations.js";
import { newKeyPair, type TestOrganization } from "./helpers/harness.js";
import { PLANNED_EACH_RUN, StatementNames } from "../src/store/postgres-pool.js";
import { backend } from "./helpers/backend.js";
import { signUpParameters } from "../bench/sub-organizations.js";

let h: Harness;
let org: TestOrganization;
let root: Member["client"];
let alice: Member;
let signWith: string;

beforeAll(async () => {
  h = await startHarness();
  ({ org, root, alice, signWith } = await signingOrganization(h, "budget"));
});
afterAll(() => h.close());

/**
 * The statements one request sent, by text: of three runs of `request` (given the attempt), the one with
 * the fewest, since the server's background services (webhook dispatcher, courier, broadcaster) poll
 * the database now and then. The transparency log's sequencer is let run between them: it appends each
 * activity after its commit, outside it.
 */
async function fewestStatementsOf(request: (attempt: number) => Promise<unknown>): Promise<string[]> {
  const tally = h.server.store.statements;
  let fewest: string[] | undefined;
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      tally.texts = [];
      await request(attempt);
      const texts = tally.texts;
      if (!fewest || texts.length < fewest.length) fewest = texts;
      // The log's sequencer appends the activity after its commit (services/log-sequencer.ts): it
      // runs here, between requests, uncounted.
      tally.texts = null;
      await h.server.logSequencer.flush();
    }
  } finally {
    tally.texts = null;
  }
  return fewest!;
}

/** The statements one signature by `client` (or by each of three clients in turn) sent. */
const statementsOfSignature = (client: Member["client"] | Member["client"][]) =>
  fewestStatementsOf((attempt) => sign(Array.isArray(client) ? client[attempt]! : client));

let n = 0;
const sign = (client: Member["client"]) =>
  client.signRawPayload({
    signWith,
    payload: Buffer.from(`budget ${n++}`).toString("hex"),
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_KECCAK256",
  });

/** The table each statement reads or writes first (subqueries and a WITH's statements left out), in
 * order; or BEGIN / COMMIT. */
function kinds(texts: string[]): string[] {
  return texts.map((text) => {
    if (/^(begin|commit|savepoint|release)/.test(text)) return text.split(" ")[0]!;
    if (text.startsWith("select (select coalesce(json_agg(agg)")) return "read ahead";
    if (text.includes("sigil_charge_rate_limits(")) return "rate limits";
    let outer = text;
    while (/\([^()]*\)/.test(outer)) outer = outer.replace(/\([^()]*\)/g, "");
    return (
      /^(?:with "\w+" as\s*(?:,\s*"\w+" as\s*)*)?(?:insert into|update|delete from) "(\w+)"|\bfrom "(\w+)"/
        .exec(outer)
        ?.slice(1)
        .find(Boolean) ?? text
    );
  });
}

describe("a signature's statements", () => {
  // The API key with its IP allowlists, and whether its user has MFA policies (one statement); the
  // organization's lock (PostgreSQL; on SQLite the transaction's BEGIN IMMEDIATE is the lock); the
  // credential still live; the root quorum; the signing account; the activity; its policy
  // evaluation; the webhook subscriptions.
  // On PostgreSQL a key already accepted for the organization is read in the transaction, after the
  // lock, with the root quorum, the signing account and the webhook subscriptions, as one statement
  // read ahead (store/prepared.ts) that also confirms the credential; the activity and its evaluation
  // are one statement (a data-modifying WITH, named by the table it inserts into last). SQLite has no
  // round trips to save: it reads the key before the transaction and again in it, and reads and
  // writes each alone.
  // Before the transaction, the request is counted against its rate limits: on SQLite in memory; on
  // PostgreSQL by one statement (services/rate-limits.ts; concurrent requests share it) for a bucket's
  // first request, which also takes the bucket's next tokens ahead, so that the signatures following
  // it within a tenth of a second are counted without one (as here: the figures are the fewest of three).
  const byRoot =
    backend === "postgres"
      ? ["begin", "organizations", "read ahead", "policy_evaluations", "commit"]
      : [
          "api_keys",
          "begin",
          "api_keys",
          "organizations",
          "wallet_accounts",
          "activities",
          "policy_evaluations",
          "webhook_endpoints",
          "commit",
        ];

  it(`by a root user: ${backend === "postgres" ? "five" : "nine"}, BEGIN and COMMIT included`, async () => {
    await sign(root);
    const texts = await statementsOfSignature(root);
    expect(kinds(texts), texts.join("\n")).toEqual(byRoot);
  });

  it("by a user a policy allows: the policies and the approver with their tags too (and on SQLite the account for the policy)", async () => {
    await sign(alice.client);
    const texts = await statementsOfSignature(alice.client);
    // What the policies judge is read first (the approvers with their tags; on SQLite the account too),
    // then the policies.
    const consensus = ["users", "user_tag_members", "policies"];
    // PostgreSQL: BEGIN, the lock, the reads ahead; SQLite: the key, BEGIN, the key again, the lock.
    const lockAndReads = backend === "postgres" ? 3 : 4;
    const byPolicy =
      backend === "postgres"
        ? [...byRoot.slice(0, lockAndReads), ...consensus, ...byRoot.slice(lockAndReads)]
        : [...byRoot.slice(0, lockAndReads), "users", "user_tag_members", "wallet_accounts", "policies", ...byRoot.slice(lockAndReads)];
    expect(kinds(texts), texts.join("\n")).toEqual(byPolicy);
  });

  it("by a key's first signature: its key read before the transaction, then confirmed in it (on PostgreSQL read ahead), and counted by a statement", async () => {
    const keys = [newKeyPair(), newKeyPair(), newKeyPair()];
    await root.createApiKeys({
      userId: org.userId,
      apiKeys: keys.map((key, i) => ({ apiKeyName: `first ${i}`, publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" as const })),
    });
    const texts = await statementsOfSignature(keys.map((key) => h.sdk(org, key)));
    const first = backend === "postgres" ? ["api_keys", "rate limits", ...byRoot] : byRoot;
    expect(kinds(texts), texts.join("\n")).toEqual(first);
  });
});

describe("a sign-up's statements", () => {
  // An app's sign-up (a root user with an email and an API key, a wallet with one Ethereum account).
  // PostgreSQL: the parent's key before the transaction; BEGIN, the parent's lock, the reads ahead
  // (the key confirmed, the parent's root quorum and its own parent, the webhook subscriptions), the
  // savepoint; the new organization's six rows as one statement (store/deferred-inserts.ts, named by
  // the table it inserts into last), the new root quorum's check, the savepoint released; the
  // activity with its evaluation (named by the evaluation), COMMIT. SQLite has no round trips to save: each read and each
  // insert alone.
  const bySignUp =
    backend === "postgres"
      ? [
          "api_keys",
          "begin",
          "organizations",
          "read ahead",
          "savepoint",
          "wallet_accounts",
          "organizations",
          "release",
          "policy_evaluations",
          "commit",
        ]
      : [
          "api_keys",
          "begin",
          // The group commit's savepoint around each transaction it runs (group-commit.ts).
          "savepoint",
          "api_keys",
          "organizations",
          "savepoint",
          "organizations",
          "organizations",
          "users",
          "api_keys",
          "root_quorum_members",
          "wallets",
          "wallet_accounts",
          "organizations",
          "release",
          "activities",
          "policy_evaluations",
          "webhook_endpoints",
          "release",
          "commit",
        ];

  it(`${backend === "postgres" ? "ten" : "twenty"}, BEGIN and COMMIT included`, async () => {
    const fewest = await fewestStatementsOf((attempt) =>
      root.createSubOrganization(signUpParameters(`budget sign-up ${attempt}`, `budget.${attempt}@example.com`, newKeyPair().publicKey)),
    );
    expect(kinds(fewest), fewest.join("\n")).toEqual(bySignUp);
  });
});

describe("prepared statement names (PostgreSQL)", () => {
  it("never names a text that starts PLANNED_EACH_RUN, however often it runs", () => {
    const names = new StatementNames(2, 3);
    const text = `${PLANNED_EACH_RUN}select * from "transparency_log_pending" where "organization_id" = $1`;
    for (let i = 0; i < 10; i++) expect(names.nameOf(text)).toBeUndefined();
    // The same text without the mark is named as any other.
    names.nameOf(text.slice(PLANNED_EACH_RUN.length));
    expect(names.nameOf(text.slice(PLANNED_EACH_RUN.length))).toMatch(/^sigil_/);
  });

  it("names a text from its second run on, by its hash, and no more than the bound", () => {
    const names = new StatementNames(2, 3);
    expect(names.nameOf("select 1")).toBeUndefined();
    const name = names.nameOf("select 1");
    expect(name).toMatch(/^sigil_[\w-]{22}$/);
    expect(names.nameOf("select 1")).toBe(name);
    // Another instance (another server process) gives the text the same name.
    const elsewhere = new StatementNames(1, 3);
    expect(elsewhere.nameOf("select 1")).toBe(name);
    for (const text of ["select 2", "select 3"]) {
      names.nameOf(text);
      expect(names.nameOf(text)).toBeDefined();
    }
    // Three named: a fourth text runs unnamed however often, while the named ones keep their names.
    for (let i = 0; i < 5; i++) expect(names.nameOf("select 4")).toBeUndefined();
    expect(names.nameOf("select 1")).toBe(name);
  });
});
