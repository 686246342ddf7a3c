// `sigil audit verify` of a log of several pages (services/log-audit.ts reads and checks a large log's
// leaves a page at a time, on worker threads): for an intact log and for each way of tampering with
// its rows — an activity changed, an entry removed at a page's start or end or the log's end, two
// entries swapped, a stored subtree changed, an activity's place in the log changed, an activity
// inserted claiming a place — the verdict on threads is the one on the verifying thread, naming the
// broken entry, and the log is whole again once the row is put back.
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newKeyPair } from "./helpers/harness.js";
import { createTestDatabase, type TestDatabase } from "./helpers/backend.js";
import { openStore, type Store } from "../src/store/database.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import { readHead, sequenceLog } from "../src/store/transparency-log.js";
import { verifyStoredLog } from "../src/services/log-audit.js";
import { PAGE_LEAVES } from "../src/services/log-audit-leaves.js";

// Two whole pages and part of a third.
const ENTRIES = 2 * PAGE_LEAVES + 552;

let database: TestDatabase;
let store: Store;
let organizationId: string;
const activityAt: string[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir });
  const created = await createOrganization(store.db, {
    organizationName: "paged",
    userName: "u",
    apiKeyName: "k",
    apiPublicKey: newKeyPair().publicKey,
  });
  organizationId = created.organizationId;
  const at = Date.now();
  const rows = Array.from({ length: ENTRIES }, (_, n) => ({
    id: `activity-${String(n).padStart(5, "0")}`,
    organization_id: organizationId,
    type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
    status: n % 7 === 3 ? "ACTIVITY_STATUS_FAILED" : "ACTIVITY_STATUS_COMPLETED",
    intent: JSON.stringify({ signWith: "0xabc", payload: n.toString(16), encoding: "PAYLOAD_ENCODING_HEXADECIMAL", é: [n, null, true] }),
    result: JSON.stringify({ r: "ab".repeat(32), s: "cd".repeat(32), v: "00" }),
    failure: n % 7 === 3 ? JSON.stringify({ code: 3, message: `no ${n}` }) : null,
    votes: JSON.stringify([
      {
        id: `vote-${n}`,
        userId: created.userId,
        selection: "VOTE_SELECTION_APPROVED",
        message: `{"n":${n}}`,
        publicKey: "02".padEnd(66, "1"),
        signature: "30".padEnd(140, "2"),
        scheme: "SIGNATURE_SCHEME_TK_API_P256",
        createdAt: at,
      },
    ]),
    fingerprint: crypto.createHash("sha256").update(String(n)).digest("hex"),
    timestamp_ms: String(at),
    user_id: created.userId,
    created_at: at + n,
    updated_at: at + n,
    prepared: null,
    request_id: null,
  }));
  for (let i = 0; i < rows.length; i += 500)
    await store.db
      .insertInto("activities")
      .values(rows.slice(i, i + 500))
      .execute();
  while ((await store.transact("exclusive", (trx) => sequenceLog(trx, store.dialect, organizationId, 1_000, Date.now()))) > 0);
  const leaves = await store.db
    .selectFrom("transparency_log_leaves")
    .select(["leaf_index", "activity_id"])
    .where("organization_id", "=", organizationId)
    .orderBy("leaf_index")
    .execute();
  for (const l of leaves) activityAt[Number(l.leaf_index)] = l.activity_id;
  expect(activityAt).toHaveLength(ENTRIES);
}, 120_000);

afterAll(async () => {
  await store?.close();
  await database?.drop();
});

/** The verdict with two threads, which must be the verdict on this thread. */
async function verdict() {
  const onThreads = await verifyStoredLog(store.reader, organizationId, null, Date.now(), { threads: 2 });
  const here = await verifyStoredLog(store.reader, organizationId, null, Date.now(), { threads: 0 });
  expect(onThreads).toEqual(here);
  return onThreads;
}

/** `tamper`, then the verdict, then `restore` and the log whole again. */
async function broken(tamper: () => Promise<unknown>, restore: () => Promise<unknown>) {
  await tamper();
  try {
    return await verdict();
  } finally {
    await restore();
    expect((await verifyStoredLog(store.reader, organizationId, null, Date.now(), { threads: 0 })).problem).toBeNull();
  }
}

const leaf = (index: number) =>
  store.db
    .selectFrom("transparency_log_leaves")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("leaf_index", "=", index)
    .executeTakeFirstOrThrow();
const removeLeaf = async (index: number) => {
  const row = await leaf(index);
  return {
    tamper: () =>
      store.db
        .deleteFrom("transparency_log_leaves")
        .where("organization_id", "=", organizationId)
        .where("leaf_index", "=", index)
        .execute(),
    restore: () => store.db.insertInto("transparency_log_leaves").values(row).execute(),
  };
};
const setActivityId = (index: number, activityId: string) =>
  store.db
    .updateTable("transparency_log_leaves")
    .set({ activity_id: activityId })
    .where("organization_id", "=", organizationId)
    .where("leaf_index", "=", index)
    .execute();

describe("sigil audit verify of a log of several pages, on threads and on the verifying thread", () => {
  it("finds the intact log intact, with the head's root", async () => {
    const head = await readHead(store.db, organizationId);
    expect(await verdict()).toMatchObject({ size: ENTRIES, rootHash: head.root.toString("base64"), problem: null, pending: 0 });
  });

  it("names a changed activity's entry, in the second page", async () => {
    const id = activityAt[1500]!;
    const status = (await store.db.selectFrom("activities").select("status").where("id", "=", id).executeTakeFirstOrThrow()).status;
    const result = await broken(
      () => store.db.updateTable("activities").set({ status: "ACTIVITY_STATUS_REJECTED" }).where("id", "=", id).execute(),
      () => store.db.updateTable("activities").set({ status }).where("id", "=", id).execute(),
    );
    expect(result).toMatchObject({
      size: 1500,
      problem: { leafIndex: 1500, activityId: id, problem: expect.stringContaining("does not hash to the leaf hash of entry 1500") },
    });
  });

  it("names an activity whose JSON no longer reads", async () => {
    const id = activityAt[5]!;
    const votes = (await store.db.selectFrom("activities").select("votes").where("id", "=", id).executeTakeFirstOrThrow()).votes;
    const result = await broken(
      () => store.db.updateTable("activities").set({ votes: "[{" }).where("id", "=", id).execute(),
      () => store.db.updateTable("activities").set({ votes }).where("id", "=", id).execute(),
    );
    expect(result.problem).toEqual({
      leafIndex: 5,
      activityId: id,
      problem: "the activity of entry 5 is not readable as recorded (its JSON columns were changed)",
    });
  });

  for (const [where, index] of [
    ["a page's first", PAGE_LEAVES],
    ["a page's last", 2 * PAGE_LEAVES - 1],
  ] as const)
    it(`names an entry removed as ${where}`, async () => {
      const { tamper, restore } = await removeLeaf(index);
      expect(await broken(tamper, restore)).toMatchObject({
        size: index,
        problem: {
          leafIndex: index,
          activityId: null,
          problem: `entry ${index} is missing from the log (the next stored entry is ${index + 1}): it was removed`,
        },
      });
    });

  it("names the log's last entry removed", async () => {
    const { tamper, restore } = await removeLeaf(ENTRIES - 1);
    expect(await broken(tamper, restore)).toMatchObject({
      size: ENTRIES - 1,
      problem: { leafIndex: ENTRIES - 1, problem: expect.stringContaining(`but entries from ${ENTRIES - 1} on are missing`) },
    });
  });

  it("names the first of two entries swapped across pages", async () => {
    const result = await broken(
      // Through a placeholder: a leaf names its activity once (the leaves' unique index by activity).
      async () => {
        await setActivityId(3, "placeholder");
        await setActivityId(2000, activityAt[3]!);
        await setActivityId(3, activityAt[2000]!);
      },
      async () => {
        await setActivityId(3, "placeholder");
        await setActivityId(2000, activityAt[2000]!);
        await setActivityId(3, activityAt[3]!);
      },
    );
    expect(result).toMatchObject({
      size: 3,
      problem: {
        leafIndex: 3,
        activityId: activityAt[2000],
        problem: expect.stringContaining("does not hash to the leaf hash of entry 3"),
      },
    });
  });

  it("names a stored subtree that does not match the entries, and one stored beyond them", async () => {
    const node = (level: number, index: number) =>
      store.db
        .selectFrom("transparency_log_nodes")
        .selectAll()
        .where("organization_id", "=", organizationId)
        .where("level", "=", level)
        .where("node_index", "=", index)
        .executeTakeFirstOrThrow();
    const changed = await node(3, 200);
    const result = await broken(
      () =>
        store.db
          .updateTable("transparency_log_nodes")
          .set({ hash: "00".repeat(32) })
          .where("organization_id", "=", organizationId)
          .where("level", "=", 3)
          .where("node_index", "=", 200)
          .execute(),
      () =>
        store.db
          .updateTable("transparency_log_nodes")
          .set({ hash: changed.hash })
          .where("organization_id", "=", organizationId)
          .where("level", "=", 3)
          .where("node_index", "=", 200)
          .execute(),
    );
    expect(result.problem).toEqual({
      leafIndex: 1600,
      activityId: null,
      problem: "the stored subtree of entries 1600 to 1607 does not match them: proofs read from it would not verify",
    });
    const beyond = { ...changed, level: 4, node_index: ENTRIES };
    expect(
      await broken(
        () => store.db.insertInto("transparency_log_nodes").values(beyond).execute(),
        () =>
          store.db
            .deleteFrom("transparency_log_nodes")
            .where("organization_id", "=", organizationId)
            .where("level", "=", 4)
            .where("node_index", "=", ENTRIES)
            .execute(),
      ),
    ).toMatchObject({ problem: { leafIndex: ENTRIES * 16, problem: expect.stringContaining("does not match them") } });
  });

  it("names an activity inserted as final with no entry and not waiting for one", async () => {
    const copy = await store.db.selectFrom("activities").selectAll().where("id", "=", activityAt[2100]!).executeTakeFirstOrThrow();
    const result = await broken(
      async () => {
        await store.db
          .insertInto("activities")
          .values({ ...copy, id: "forged", fingerprint: "forged" } as never)
          .execute();
        // The database's own trigger marks it as waiting for the log; the forger removes that too.
        await store.db.deleteFrom("transparency_log_pending").where("activity_id", "=", "forged").execute();
      },
      () => store.db.deleteFrom("activities").where("id", "=", "forged").execute(),
    );
    expect(result).toMatchObject({
      size: ENTRIES,
      problem: {
        leafIndex: null,
        activityId: "forged",
        problem: expect.stringContaining("is final but neither an entry of the log nor waiting for one"),
      },
    });
  });
});
