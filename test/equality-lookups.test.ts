// Migration 0035 (store/migrations.ts): on PostgreSQL the indexes only ever searched by equality on a
// long value are hash indexes, the fingerprint and a leaf's activity stay unique under exclusion
// constraints of the same names, an API key's public key in its organization under one of its own, and organizations_by_parent leaves out the root organizations.
// SQLite keeps its b-trees. On both, a second row with a recorded fingerprint or a second leaf for an
// activity is refused and nothing changes, and each lookup still finds its row.
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { backend } from "./helpers/backend.js";
import { isDuplicateFingerprint } from "../src/store/database.js";
import { newId } from "../src/store/ids.js";

let h: Harness;
let org: TestOrganization;
let signWith: string;
let signed: { activityId: string; fingerprint: string };

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Hashed lookups");
  const sdk = h.sdk(org, org.key);
  const wallet = await sdk.createWallet({
    walletName: "w",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  signWith = wallet.addresses[0]!;
  const result = await sdk.signRawPayload({
    signWith,
    payload: "0x01",
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_KECCAK256",
  });
  const row = await h.server.store.db
    .selectFrom("activities")
    .select(["id", "fingerprint"])
    .where("id", "=", result.activity.id)
    .executeTakeFirstOrThrow();
  signed = { activityId: row.id, fingerprint: row.fingerprint };
  await h.server.logSequencer.flush();
});

afterAll(async () => {
  await h?.close();
});

/** Runs an insert the database must refuse as a second equal row (PostgreSQL: an exclusion
 * constraint's 23P01; SQLite: a unique index), checks that nothing changed, and returns the error. */
async function refusedAsDuplicate(insert: () => Promise<unknown>): Promise<unknown> {
  const before = await h.snapshot();
  let error: { code?: string } | undefined;
  try {
    await insert();
  } catch (caught) {
    error = caught as { code?: string };
  }
  expect(error).toBeDefined();
  expect(error!.code).toBe(backend === "postgres" ? "23P01" : "SQLITE_CONSTRAINT_UNIQUE");
  expect(await h.snapshot()).toBe(before);
  return error;
}

describe(`hashed equality lookups (${backend})`, () => {
  it("refuses a second activity row with a recorded fingerprint, as a duplicate fingerprint, and changes nothing", async () => {
    const db = h.server.store.db;
    const original = await db.selectFrom("activities").selectAll().where("id", "=", signed.activityId).executeTakeFirstOrThrow();
    const error = await refusedAsDuplicate(() =>
      db
        .insertInto("activities")
        .values({ ...original, id: newId(), status: "ACTIVITY_STATUS_PENDING" })
        .execute(),
    );
    expect(isDuplicateFingerprint(error)).toBe(true);
  });

  it("refuses a second leaf for an activity already in its organization's log, and changes nothing", async () => {
    const db = h.server.store.db;
    const leaf = await db
      .selectFrom("transparency_log_leaves")
      .selectAll()
      .where("activity_id", "=", signed.activityId)
      .executeTakeFirstOrThrow();
    await refusedAsDuplicate(() =>
      db
        .insertInto("transparency_log_leaves")
        .values({ ...leaf, leaf_index: Number(leaf.leaf_index) + 1_000_000 })
        .execute(),
    );
  });

  it("refuses a second API key with a public key already in its organization, and changes nothing; takes it in another", async () => {
    const db = h.server.store.db;
    const key = await db.selectFrom("api_keys").selectAll().where("id", "=", org.apiKeyId).executeTakeFirstOrThrow();
    await refusedAsDuplicate(() =>
      db
        .insertInto("api_keys")
        .values({ ...key, id: newId() })
        .execute(),
    );
    // The same key in another organization is another row (an organization's prefix ends at its first "/").
    const other = await h.organization("Another");
    const { id: otherUser } = await db
      .selectFrom("users")
      .select("id")
      .where("organization_id", "=", other.organizationId)
      .executeTakeFirstOrThrow();
    const copy = { ...key, id: newId(), organization_id: other.organizationId, user_id: otherUser };
    await db.insertInto("api_keys").values(copy).execute();
    expect(await db.selectFrom("api_keys").select("id").where("public_key", "=", key.public_key).orderBy("id").execute()).toEqual(
      [{ id: key.id }, { id: copy.id }].sort((a, b) => (a.id < b.id ? -1 : 1)),
    );
  });

  it("still finds each row by the value it is searched by", async () => {
    const db = h.server.store.db;
    const account = await db
      .selectFrom("wallet_accounts")
      .select(["id", "public_key"])
      .where("address", "=", signWith)
      .where("organization_id", "=", org.organizationId)
      .executeTakeFirstOrThrow();
    expect(await db.selectFrom("wallet_accounts").select("id").where("public_key", "=", account.public_key).execute()).toEqual([
      { id: account.id },
    ]);
    expect(await db.selectFrom("activities").select("id").where("fingerprint", "=", signed.fingerprint).execute()).toEqual([
      { id: signed.activityId },
    ]);
  });
});

if (backend === "postgres")
  describe("the indexes migration 0035 builds (postgres)", () => {
    it("makes the equality lookups hash indexes, the two unique ones exclusion constraints, and the index by parent partial", async () => {
      const db = h.server.store.db;
      const { rows } = await sql<{ indexname: string; indexdef: string }>`
        select indexname, indexdef from pg_indexes where schemaname = current_schema() and indexname in (
          'wallet_accounts_by_public_key', 'wallet_accounts_by_address_owner', 'users_by_email',
          'transparency_log_leaves_by_activity', 'activities_fingerprint_key', 'organizations_by_parent',
          'api_keys_by_public_key', 'api_keys_unique_in_organization')
        order by indexname`.execute(db);
      const definitions = Object.fromEntries(rows.map((r) => [r.indexname, r.indexdef.replace(/ ON [\w.]+ /, " ON ")]));
      expect(definitions).toEqual({
        activities_fingerprint_key: "CREATE INDEX activities_fingerprint_key ON USING hash (fingerprint)",
        api_keys_by_public_key: "CREATE INDEX api_keys_by_public_key ON USING hash (public_key)",
        api_keys_unique_in_organization:
          "CREATE INDEX api_keys_unique_in_organization ON USING hash ((((organization_id || '/'::text) || public_key)))",
        organizations_by_parent:
          "CREATE INDEX organizations_by_parent ON USING btree (parent_organization_id, created_at, id) WHERE (parent_organization_id IS NOT NULL)",
        transparency_log_leaves_by_activity: "CREATE INDEX transparency_log_leaves_by_activity ON USING hash (activity_id)",
        users_by_email: "CREATE INDEX users_by_email ON USING hash (lower(email))",
        wallet_accounts_by_address_owner: "CREATE INDEX wallet_accounts_by_address_owner ON USING hash (address)",
        wallet_accounts_by_public_key: "CREATE INDEX wallet_accounts_by_public_key ON USING hash (public_key)",
      });
      const { rows: constraints } = await sql<{ conname: string; contype: string }>`
        select conname, contype from pg_constraint
        where conname in ('activities_fingerprint_key', 'transparency_log_leaves_by_activity', 'api_keys_unique_in_organization')
        order by conname`.execute(db);
      expect(constraints).toEqual([
        { conname: "activities_fingerprint_key", contype: "x" },
        { conname: "api_keys_unique_in_organization", contype: "x" },
        { conname: "transparency_log_leaves_by_activity", contype: "x" },
      ]);
    });
  });
