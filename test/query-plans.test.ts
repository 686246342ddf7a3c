// The plans SQLite picks for the statements of a signature. SQLite keeps no statistics unless ANALYZE
// runs (Sigil does not run it), so its choice depends on the indexes alone, not on how many rows there
// are: a plan read on a small database is the plan of a large one. A statement that scans a table,
// or sorts rows it found by another index, costs time in proportion to the organization's size —
// signing with the newest of 100,000 accounts took ~9 ms that way (docs/benchmarks.md#the-signer-lookups-index-and-plan).
import { CompiledQuery } from "kysely";
import { sqlitePlanOf, statementsOf } from "./helpers/query-plans.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./helpers/harness.js";
import { signingOrganization, type Member } from "./helpers/organizations.js";

let h: Harness;
let root: Member["client"];
let alice: Member;
let signWith: string;

beforeAll(async () => {
  h = await startHarness();
  ({ root, alice, signWith } = await signingOrganization(h, "plans"));
});
afterAll(() => h.close());

let n = 0;
/** The SELECT statements one signature by `client` sends (test/helpers/query-plans.ts, statementsOf). */
const selectsOfSignature = (client: Member["client"]) =>
  statementsOf(
    h,
    () =>
      client.signRawPayload({
        signWith,
        payload: Buffer.from(`plans ${n++}`).toString("hex"),
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_KECCAK256",
      }),
    3,
    /^select/,
  );

const planOf = (text: string) => sqlitePlanOf(h, text);

// How each table of a signature is reached: by these indexes only, each with the columns the
// statement knows (a statement that names an account's address and organization must not settle for
// an index on the organization alone and walk it). Sorting what such a search found is fine (a user's
// few tags); a table read whole is not.
const ACCESS_PATHS = [
  "SEARCH api_keys USING INDEX api_keys_by_public_key (public_key=?)",
  "SEARCH api_keys USING INDEX sqlite_autoindex_api_keys_1 (id=?)",
  "SEARCH users USING INDEX sqlite_autoindex_users_1 (id=?)",
  "SEARCH organizations USING INDEX sqlite_autoindex_organizations_1 (id=?)",
  "SEARCH organizations USING COVERING INDEX sqlite_autoindex_organizations_1 (id=?)",
  "SEARCH o USING INDEX sqlite_autoindex_organizations_1 (id=?)",
  "SEARCH organization_list USING INDEX sqlite_autoindex_ip_allowlists_1 (organization_id=? AND api_key_id=?) LEFT-JOIN",
  "SEARCH key_list USING INDEX sqlite_autoindex_ip_allowlists_1 (organization_id=? AND api_key_id=?) LEFT-JOIN",
  "SEARCH mfa_policies USING COVERING INDEX mfa_policies_by_user (user_id=?)",
  "SEARCH m USING COVERING INDEX sqlite_autoindex_root_quorum_members_1 (organization_id=?) LEFT-JOIN",
  "SEARCH policies USING INDEX policies_by_organization (organization_id=?)",
  "SEARCH user_tag_members USING INDEX user_tag_members_by_user (user_id=?)",
  "SEARCH wallet_accounts USING INDEX wallet_accounts_by_address_owner (address=? AND organization_id=?)",
  "SEARCH wallets USING INDEX sqlite_autoindex_wallets_1 (id=?)",
  "SEARCH e USING INDEX webhook_endpoints_by_organization (organization_id=?)",
  "SEARCH s USING INDEX sqlite_autoindex_webhook_subscriptions_1 (endpoint_id=? AND event_type=?)",
  "SEARCH f USING INDEX sqlite_autoindex_organization_features_1 (organization_id=? AND name=?)",
];

describe("the plans of a signature's statements (SQLite)", () => {
  it("reach every table by an index on all the columns they name; none is read whole", async () => {
    expect(h.server.store.dialect).toBe("sqlite");
    const texts = [...new Set([...(await selectsOfSignature(root)), ...(await selectsOfSignature(alice.client))])];
    // The policy path's statements are among them (the policies, the approver's tags, the account).
    expect(texts.filter((text) => /from "(policies|user_tag_members|wallet_accounts)"/.test(text))).toHaveLength(3);
    for (const text of texts) {
      const steps = (await planOf(text)).filter((step) => /^(SEARCH|SCAN) /.test(step));
      expect(steps.length, text).toBeGreaterThan(0);
      for (const step of steps) expect(ACCESS_PATHS, `${step}\n  in ${text}`).toContain(step);
    }
  });

  it("bind no LIMIT, OFFSET or LIKE pattern, which SQLite would prepare anew at every run", async () => {
    // SQLite marks a statement for re-preparing when a parameter its plan may depend on is bound
    // again: a LIMIT of `?` made the signer lookup cost ~45 µs instead of ~12 on this machine.
    const texts = [...new Set([...(await selectsOfSignature(root)), ...(await selectsOfSignature(alice.client))])];
    expect(texts.some((text) => text.includes('from "wallet_accounts"'))).toBe(true);
    for (const text of texts) expect(text, text).not.toMatch(/\b(limit|offset|like|glob) \?/);
  });

  it("would catch the signer lookup by organization alone (the plan before migration 0021)", async () => {
    // The same statement with the index it had before: SQLite then walks the organization's accounts.
    const db = h.server.store.db;
    const text = (await selectsOfSignature(root)).find((t) => t.includes('from "wallet_accounts"'))!;
    await db.executeQuery(CompiledQuery.raw("drop index wallet_accounts_by_address_owner"));
    try {
      await db.executeQuery(CompiledQuery.raw("create index wallet_accounts_by_address on wallet_accounts (organization_id, address)"));
      const steps = await planOf(text);
      expect(steps).toContain("SEARCH wallet_accounts USING INDEX wallet_accounts_by_organization (organization_id=?)");
      expect(ACCESS_PATHS).not.toContain(steps[0]);
    } finally {
      await db.executeQuery(CompiledQuery.raw("drop index wallet_accounts_by_address"));
      await db.executeQuery(
        CompiledQuery.raw("create index wallet_accounts_by_address_owner on wallet_accounts (address, organization_id, created_at)"),
      );
    }
  });
});
