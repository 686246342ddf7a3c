// An activity's intent stored once (docs/storage.md#an-activitys-intent): "" in the row when its
// requester's vote holds the signed body whose parameters give the very same text back, the text
// itself otherwise. Every reader — the API's get_activity and list_activities, the transparency log's
// entries and `sigil audit verify` — reads the same intent either way, and a row written with its
// intent whole (by an earlier version, or by hand) reads as it did. (What draftActivity stores: pipeline-steps.test.ts.)
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serializeTransaction } from "viem";
import { startHarness, newKeyPair, signedRequest, type Harness } from "./helpers/harness.js";
import { ethereumAccountOrganization, fastPoller } from "./helpers/organizations.js";
import { backend } from "./helpers/backend.js";
import { INTENT_IN_VOTE, intentText, storedIntent } from "../src/store/activity-intent.js";
import { activityLeafHash, entryBytes, leafOfActivity, logEntry } from "../src/store/transparency-log.js";
import { leafHash } from "../src/store/merkle.js";
import { verifyStoredLog } from "../src/services/log-audit.js";
import { parseVerifierKey } from "../src/services/log-checkpoints.js";
import type { ActivitiesTable } from "../src/store/schema.js";
import { signUpParameters } from "../bench/sub-organizations.js";

/** A signed body as a client sends it, and the vote a row would keep of it. */
const bodyWith = (parameters: unknown) =>
  JSON.stringify({ type: "ACTIVITY_TYPE_CREATE_USERS_V4", timestampMs: "1", organizationId: "o", parameters });
const votesOf = (message: string) => JSON.stringify([{ id: "v", message }]);

describe("storedIntent and intentText", () => {
  it('store the intent as "" only when the signed body\'s parameters give its very text back, and read it back whole', () => {
    const parameters = { users: [{ userName: "ann", apiKeys: [] }] };
    const message = bodyWith(parameters);
    const intent = JSON.stringify(parameters);
    expect(storedIntent(intent, message)).toBe(INTENT_IN_VOTE);
    expect(intentText({ intent: INTENT_IN_VOTE, votes: votesOf(message) })).toBe(intent);
    // The votes already parsed serve as well.
    expect(intentText({ intent: INTENT_IN_VOTE }, [{ message }])).toBe(intent);
    // A whole intent is read as it is, whatever the vote holds.
    expect(intentText({ intent, votes: votesOf("") })).toBe(intent);
    expect(intentText({ intent: '{"other":1}', votes: votesOf(message) })).toBe('{"other":1}');
  });

  it("compares text, not values: a body's escapes and spacing are what its parse gives back, another text is kept whole", () => {
    // Sent with an escape and spaces: the parse's text has "é" and no spaces, as the pipeline's intent does.
    const escaped = '{"type":"t", "parameters": { "userName" : "Jos\\u00e9" }}';
    expect(storedIntent('{"userName":"José"}', escaped)).toBe(INTENT_IN_VOTE);
    expect(intentText({ intent: INTENT_IN_VOTE, votes: votesOf(escaped) })).toBe('{"userName":"José"}');
    // The same value in another text (the escape kept, a space, another key order) is not what the read gives: kept whole.
    for (const other of ['{"userName":"Jos\\u00e9"}', '{ "userName":"José"}', '{"b":1,"a":2}']) {
      const message = other.includes("userName") ? escaped : '{"parameters":{"a":2,"b":1}}';
      expect(storedIntent(other, message), other).toBe(other);
    }
  });

  it("keeps the intent whole when the vote holds no signed parameters", () => {
    const intent = '{"a":1}';
    for (const message of ["", "not json", "[1]", "null", '{"type":"t"}', '{"parameters":{"a":2}}'])
      expect(storedIntent(intent, message), message).toBe(intent);
    // An intent is JSON text: an empty one would read back as the vote's.
    expect(() => storedIntent("", bodyWith({}))).toThrow("never empty");
  });

  it("refuses to read a row whose vote cannot give its intent back (a row changed by hand)", () => {
    for (const votes of [votesOf(""), votesOf("not json"), "[]", "{}", votesOf('{"type":"t"}')])
      expect(() => intentText({ intent: INTENT_IN_VOTE, votes }), votes).toThrow("holds no signed parameters");
  });
});

let h: Harness;
let verifierKey: string;

beforeAll(async () => {
  h = await startHarness();
  verifierKey = ((await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as { transparencyLogVerifierKey: string })
    .transparencyLogVerifierKey;
});
afterAll(() => h.close());

const activityRow = (id: string) => h.server.store.db.selectFrom("activities").selectAll().where("id", "=", id).executeTakeFirstOrThrow();

/** The newest activity of `type` in the organization. */
const newest = (organizationId: string, type: string) =>
  h.server.store.db
    .selectFrom("activities")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("type", "=", type)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .executeTakeFirstOrThrow();

/** The leaf of the activity once sequenced, its stored hash checked against the entry with the intent whole. */
async function checkLeaf(row: ActivitiesTable, parameters: unknown) {
  await h.server.logSequencer.flush();
  const leaf = await leafOfActivity(h.server.store.db, row.organization_id, row.id);
  expect(leaf, `leaf of ${row.type}`).toBeDefined();
  const whole = { ...row, intent: JSON.stringify(parameters) };
  expect(logEntry(row, leaf!.leafIndex)).toEqual(logEntry(whole, leaf!.leafIndex));
  expect(leafHash(entryBytes(logEntry(whole, leaf!.leafIndex))).equals(leaf!.leafHash)).toBe(true);
  expect(activityLeafHash(row, leaf!.leafIndex).equals(leaf!.leafHash)).toBe(true);
  expect(await verifyStoredLog(h.server.store.db, row.organization_id, parseVerifierKey(verifierKey))).toMatchObject({ problem: null });
}

describe(`an activity's intent as the API and the log read it (${backend})`, () => {
  it("stores a sign-up's and a signature's intent once and serves it as sent, as it did a row written with its intent whole", async () => {
    const { org, root, address } = await ethereumAccountOrganization(h, "intent once");
    const signUp = signUpParameters("end user", "owner@example.com", newKeyPair().publicKey);
    await root.createSubOrganization(signUp);
    const signature = {
      signWith: address,
      payload: "ab".repeat(32),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL" as const,
      hashFunction: "HASH_FUNCTION_NO_OP" as const,
    };
    await root.signRawPayload(signature);
    const made = [
      {
        row: await newest(org.organizationId, "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V8"),
        key: "createSubOrganizationIntentV8",
        sent: signUp,
      },
      { row: await newest(org.organizationId, "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2"), key: "signRawPayloadIntentV2", sent: signature },
    ];
    const listed = async () => new Map((await root.getActivities({})).activities.map((a) => [a.id, a]));
    const before = await listed();
    for (const { row, key, sent } of made) {
      expect(row.intent, row.type).toBe("");
      expect(JSON.parse(JSON.parse(row.votes)[0].message).parameters).toEqual(sent);
      const { activity } = await root.getActivity({ activityId: row.id });
      expect((activity.intent as Record<string, unknown>)[key]).toEqual(sent);
      expect((activity.result as { activity: { intent: Record<string, unknown> } }).activity.intent[key]).toEqual(sent);
      expect(before.get(row.id)).toEqual(activity);
      await checkLeaf(row, sent);

      // The row as it was written before: the intent whole. Every reader answers the same.
      await h.server.store.db
        .updateTable("activities")
        .set({ intent: intentText(row) })
        .where("id", "=", row.id)
        .execute();
      const whole = await activityRow(row.id);
      expect(whole.intent).toBe(JSON.stringify(sent));
      expect((await root.getActivity({ activityId: row.id })).activity).toEqual(activity);
      expect((await listed()).get(row.id)).toEqual(activity);
      await checkLeaf(whole, sent);
    }
  });

  it("keeps the intent whole when it is not the signed parameters (sign_transaction V2 names the key twice)", async () => {
    const { org, root, address } = await ethereumAccountOrganization(h, "intent whole");
    const sent = {
      signWith: address,
      type: "TRANSACTION_TYPE_ETHEREUM" as const,
      unsignedTransaction: serializeTransaction({
        to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        chainId: 1,
        nonce: 9,
        gas: 21000n,
        maxFeePerGas: 1n,
        maxPriorityFeePerGas: 1n,
        type: "eip1559",
      }).slice(2),
    };
    await root.signTransaction(sent);
    const row = await newest(org.organizationId, "ACTIVITY_TYPE_SIGN_TRANSACTION_V2");
    expect(JSON.parse(row.votes)[0].message).toBe("");
    expect(JSON.parse(row.intent)).toEqual({ ...sent, privateKeyId: address });
    const { activity } = await root.getActivity({ activityId: row.id });
    for (const key of ["signTransactionIntent", "signTransactionIntentV2"])
      expect((activity.intent as Record<string, unknown>)[key], key).toEqual({ ...sent, privateKeyId: address });
    await checkLeaf(row, { ...sent, privateKeyId: address });

    // Its vote holds no signed body: a row changed to read its intent from it is not readable, and the audit says which.
    await h.server.store.db.updateTable("activities").set({ intent: "" }).where("id", "=", row.id).execute();
    const audit = await verifyStoredLog(h.server.store.db, org.organizationId, parseVerifierKey(verifierKey));
    expect(audit.problem).toMatchObject({ activityId: row.id, problem: expect.stringContaining("is not readable as recorded") });
    await h.server.store.db.updateTable("activities").set({ intent: row.intent }).where("id", "=", row.id).execute();
    expect(await verifyStoredLog(h.server.store.db, org.organizationId, parseVerifierKey(verifierKey))).toMatchObject({ problem: null });
  });

  it("reads the text the body's escapes stand for, in the API and the log's entry", async () => {
    const { org } = await ethereumAccountOrganization(h, "escapes");
    const text =
      `{"type":"ACTIVITY_TYPE_CREATE_USERS_V4","timestampMs":"${Date.now()}","organizationId":"${org.organizationId}",` +
      '"parameters": {"users":[{"userName":"Jos\\u00e9 \\ud83d\\ude00","apiKeys":[],"authenticators":[],"oauthProviders":[],"userTags":[]}]}}';
    const { body, headers } = signedRequest(text, org.key);
    const response = await h.post("/public/v1/submit/create_users", body, headers);
    expect(response.status, JSON.stringify(response.json)).toBe(200);
    const row = await activityRow(response.json.activity.id);
    expect(row.intent).toBe("");
    expect(JSON.parse(row.votes)[0].message).toBe(text);
    const parameters = { users: [{ userName: "José 😀", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] };
    expect(intentText(row)).toBe(JSON.stringify(parameters));
    expect(response.json.activity.intent.createUsersIntentV4).toEqual(parameters);
    const sdk = h.sdk(org, org.key, fastPoller);
    expect((await sdk.getActivity({ activityId: row.id })).activity.intent.createUsersIntentV4).toEqual(parameters);
    await checkLeaf(row, parameters);
  });
});
