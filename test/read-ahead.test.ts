// Reading ahead (src/store/prepared.ts, readAhead): the reads a signature makes after taking the
// organization's lock, sent as one statement on PostgreSQL. Each statement read ahead must give the
// rows it gives alone (its values travel as JSON), a run with other values or in another transaction
// must not be answered from them, and the reads must follow the lock: a credential deleted while a
// signature waited for it refuses the signature, whether it was read before the lock too (a key's
// first signature) or, on PostgreSQL, only after it (a key already accepted: activities/known-keys.ts). On SQLite nothing is read ahead, and each statement
// runs alone as before.
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { apiKeyReadAhead, credentialReadAhead, type Principal } from "../src/auth/authenticate.js";
import { rootQuorumReadAhead } from "../src/activities/authorization.js";
import { signerReadsAhead } from "../src/operations/wallets/signers.js";
import { activityDestinationsReadAhead } from "../src/operations/webhooks/webhooks.js";
import { lockOrganization } from "../src/store/database.js";
import { readAhead, type Read } from "../src/store/prepared.js";
import type { Tx } from "../src/store/handles.js";
import { backend } from "./helpers/backend.js";
import { newKeyPair, startHarness, type Harness } from "./helpers/harness.js";
import { organizationWith, signingOrganization, type Member } from "./helpers/organizations.js";

let h: Harness;
let organizationId: string;
let alice: Member;
let root: Member["client"];
let signWith: string;
let principals: Principal[];

/** Who a request was stamped by, as far as the credential statement cares. */
const apiKeyPrincipal = (organization: string, userId: string, credentialId: string) =>
  ({ organizationId: organization, userId, credentialId, credentialType: "CREDENTIAL_TYPE_API_KEY_P256" }) as Principal;

beforeAll(async () => {
  // The tests count the statements a read sends: the outboxes' pollers, which would send theirs
  // meanwhile on a slow machine, look only once in ten minutes.
  h = await startHarness({ SIGIL_MESSAGE_POLL_MS: "600000", SIGIL_WEBHOOK_POLL_MS: "600000", SIGIL_CHAIN_POLL_MS: "600000" });
  const made = await signingOrganization(h, "ahead");
  ({ alice, root, signWith } = made);
  const db = h.server.store.db;
  const aliceKey = await db
    .selectFrom("api_keys")
    .select(["id", "organization_id"])
    .where("user_id", "=", alice.userId)
    .executeTakeFirstOrThrow();
  organizationId = aliceKey.organization_id;
  const rootKey = await db
    .selectFrom("api_keys")
    .innerJoin("root_quorum_members", "root_quorum_members.user_id", "api_keys.user_id")
    .select(["api_keys.id", "api_keys.user_id"])
    .where("api_keys.organization_id", "=", organizationId)
    .executeTakeFirstOrThrow();
  // Every kind of value the statements give: a key that expires (a bigint) and one that does not
  // (null), a user with an MFA policy (true) and one without (false), a quorum of two members, a
  // nameless account, an endpoint and the webhook feature (a null endpoint id), IP allowlists.
  const now = Date.now();
  await db
    .updateTable("api_keys")
    .set({ expires_at: now + 86_400_000 })
    .where("id", "=", aliceKey.id)
    .execute();
  await db
    .insertInto("mfa_policies")
    .values({
      id: `mfa-${now}`,
      organization_id: organizationId,
      user_id: alice.userId,
      name: "never enforced here",
      condition: "false",
      required_methods: "[]",
      evaluation_order: 0,
      notes: "",
      created_at: now,
      updated_at: now,
    })
    .execute();
  await db.insertInto("root_quorum_members").values({ organization_id: organizationId, user_id: alice.userId }).execute();
  // The key's lists: the organization's (staged, not enforced: a number) and the key's own (null enabled).
  await db
    .insertInto("ip_allowlists")
    .values([
      {
        organization_id: organizationId,
        api_key_id: "",
        enabled: 0,
        on_evaluation_error: "DENY",
        rules: "[]",
        created_at: now,
        updated_at: now,
      },
      {
        organization_id: organizationId,
        api_key_id: aliceKey.id,
        enabled: null,
        on_evaluation_error: "ALLOW",
        rules: JSON.stringify([{ cidr: "127.0.0.0/24", label: "", createdAt: String(now) }]),
        created_at: now,
        updated_at: now,
      },
    ])
    .execute();
  await db
    .insertInto("webhook_endpoints")
    .values({
      id: `endpoint-${now}`,
      organization_id: organizationId,
      name: "ahead",
      url: "https://hooks.example/a",
      is_active: 1,
      created_at: now,
      updated_at: now,
    })
    .execute();
  await db
    .insertInto("webhook_subscriptions")
    .values({ endpoint_id: `endpoint-${now}`, event_type: "ACTIVITY_UPDATES", filters_json: "{}", is_active: 1 })
    .execute();
  await db
    .insertInto("organization_features")
    .values({
      organization_id: organizationId,
      name: "FEATURE_NAME_WEBHOOK",
      value: "https://hooks.example/f",
      created_at: now,
      updated_at: now,
    })
    .execute();
  principals = [apiKeyPrincipal(organizationId, alice.userId, aliceKey.id), apiKeyPrincipal(organizationId, rootKey.user_id, rootKey.id)];
});
afterAll(() => h.close());

/** A signature's reads, for the members above and an account by its address in lower case and one not there. */
const signatureReads = (): Read[] => [
  ...principals.flatMap(credentialReadAhead),
  rootQuorumReadAhead(organizationId),
  ...signerReadsAhead(organizationId, signWith.toLowerCase()),
  ...signerReadsAhead(organizationId, "0x000000000000000000000000000000000000dEaD"),
  activityDestinationsReadAhead(organizationId),
  // A key already accepted is read ahead itself, with its IP allowlists and its user's MFA EXISTS.
  apiKeyReadAhead(alice.key.publicKey),
];

/** The statements `work` sends. */
async function sentBy(work: () => Promise<unknown>): Promise<string[]> {
  const tally = h.server.store.statements;
  tally.texts = [];
  try {
    await work();
    return tally.texts;
  } finally {
    tally.texts = null;
  }
}

const runAll = (trx: Tx, reads: Read[]) => Promise.all(reads.map((read) => read.statement.all(trx, read.args)));

describe("reading ahead", () => {
  it("answers each statement with the rows it gives alone, without a statement of its own", async () => {
    const reads = signatureReads();
    await h.server.store.transact("shared", async (trx) => {
      await lockOrganization(trx, h.server.store.dialect, organizationId, "shared");
      const alone = await runAll(trx, reads);
      // The data above is all there: each statement found what it should.
      expect(alone.map((rows) => rows.length)).toEqual([1, 1, 2, 1, 0, 2, 1]);
      expect(alone[0]).toEqual([{ id: principals[0]!.credentialId, expires_at: expect.any(Number), mfa_policies: expect.anything() }]);
      const ahead = await sentBy(() => readAhead(trx, reads));
      expect(ahead).toHaveLength(backend === "postgres" ? 1 : 0);
      let again: unknown[][] = [];
      const after = await sentBy(async () => (again = await runAll(trx, reads)));
      // SQLite reads nothing ahead: every statement runs, as it did alone.
      expect(after).toHaveLength(backend === "postgres" ? 0 : reads.length);
      // Same values, same types: booleans and numbers as the statement alone gives them.
      expect(again).toEqual(alone);
      // Each run gets rows of its own: what one caller does with them, the next does not see.
      (again[3]![0] as Record<string, unknown>).address = "changed";
      expect(await reads[3]!.statement.all(trx, reads[3]!.args)).toEqual(alone[3]);
      expect(again.map((rows) => rows.map((row) => Object.entries(row as object).map(([k, v]) => [k, typeof v])))).toEqual(
        alone.map((rows) => rows.map((row) => Object.entries(row as object).map(([k, v]) => [k, typeof v]))),
      );
    });
  });

  it("does not answer a run with other values, or in another transaction", async () => {
    const reads = signatureReads();
    const quorum = rootQuorumReadAhead(organizationId);
    const other = await organizationWith(h, []);
    await h.server.store.transact("shared", async (trx) => {
      await readAhead(trx, reads);
      const elsewhere = await sentBy(() => quorum.statement.all(trx, { organizationId: other.org.organizationId }));
      expect(elsewhere).toHaveLength(1);
    });
    await h.server.store.transact("shared", async (trx) => {
      const later = await sentBy(() => quorum.statement.all(trx, quorum.args));
      expect(later).toHaveLength(1);
    });
  });

  it("reads after the lock: a signature waiting for it while its key is deleted is refused, and records nothing", async () => {
    await refusedAfterWaiting(alice.client, principals[0]!.credentialId, true);
  });

  it("reads a key already accepted only after the lock: deleted while its signature waited, it is refused, and records nothing", async () => {
    const key = newKeyPair();
    const { apiKeyIds } = await root.createApiKeys({
      userId: alice.userId,
      apiKeys: [{ apiKeyName: "accepted", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const client = h.sdk({ organizationId }, key);
    await sign(client); // accepted: on PostgreSQL its next signature reads it in its transaction
    await refusedAfterWaiting(client, apiKeyIds[0]!, backend !== "postgres");
  });
});

const sign = (client: Member["client"]) =>
  client.signRawPayload({
    signWith,
    payload: "00".repeat(32),
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_NO_OP",
  });

/**
 * A signature by `client` sent while a transaction holding the organization's lock deletes its key
 * `keyId`: it is refused, and no activity is recorded. `keyReadFirst`: whether the signature reads
 * its key before waiting for the lock (as committed: still there).
 */
async function refusedAfterWaiting(client: Member["client"], keyId: string, keyReadFirst: boolean): Promise<void> {
  const store = h.server.store;
  const activities = async () =>
    Number(
      (
        await store.db
          .selectFrom("activities")
          .select(({ fn }) => fn.countAll<number>().as("n"))
          .executeTakeFirstOrThrow()
      ).n,
    );
  const before = await activities();
  let signature: Promise<unknown> | undefined;
  const tally = store.statements;
  tally.texts = [];
  try {
    await store.transact("exclusive", async (trx) => {
      await lockOrganization(trx, store.dialect, organizationId, "exclusive");
      await trx.deleteFrom("api_keys").where("id", "=", keyId).execute();
      // The signature waits for the lock (having read its key as committed, when it reads it first).
      signature = sign(client).catch((error: unknown) => error);
      await waitForWaiter(tally.texts!, keyReadFirst);
      // A key read only in the transaction was not read while the signature waited.
      expect(tally.texts!.some((text) => KEY_READ.test(text))).toBe(keyReadFirst);
    });
  } finally {
    tally.texts = null;
  }
  expect(String(await signature)).toMatch(/no longer exists|no API key with public key/);
  expect(await activities()).toBe(before);
}

/** The statement that reads a stamp's API key on its own (not read ahead). */
const KEY_READ = /^select .*from "api_keys" inner join "users"/;

/**
 * Until the signature has been authenticated, when it reads its key first (as committed: the key is
 * still there), and, on PostgreSQL, waits for the organization's row lock. On SQLite (one writer, in this
 * process) nothing shows it queued behind the open transaction; it either is, or reaches it once the
 * deletion has committed: both ways its transaction finds the key gone.
 */
async function waitForWaiter(texts: string[], keyReadFirst: boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  const authenticated = () => !keyReadFirst || texts.some((text) => KEY_READ.test(text));
  const waitingForLock = async () => {
    if (backend !== "postgres") return true;
    const { rows } = await sql<{ n: string }>`select count(*) as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`.execute(h.server.store.reader);
    return Number(rows[0]!.n) > 0;
  };
  while (Date.now() < deadline) {
    if (authenticated() && (await waitingForLock())) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error("the signature never waited for the organization's lock");
}
