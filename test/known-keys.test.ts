// A signature by an API key already accepted for its organization is authenticated inside its
// transaction on PostgreSQL: the key is read, under the organization's lock, in the statement read
// ahead (activities/known-keys.ts, pipeline.ts). Remembering a key decides only where it is read:
// every change made since its last signature — the key deleted, expired, an IP allowlist set — still
// refuses the next one, changing nothing, and a stamp by a key nobody registered, or by a key named
// for another organization, is refused before any transaction begins. Each case runs on both
// backends (SQLite authenticates every request before its transaction, and must answer the same).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newKeyPair, signedRequest, startHarness, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { signingOrganization, type Member } from "./helpers/organizations.js";
import { fromAddress } from "./helpers/source-address.js";
import { KnownKeys } from "../src/activities/known-keys.js";

let h: Harness;
let org: TestOrganization;
let root: Member["client"];
let signWith: string;

beforeAll(async () => {
  h = await startHarness();
  ({ org, root, signWith } = await signingOrganization(h, "known"));
});
afterAll(() => h.close());

let n = 0;
/** A signature request by `key` naming `organizationId`, as raw HTTP (the refusal's code is read from the body). */
function signature(key: ApiKeyPair, organizationId = org.organizationId) {
  const { body, headers } = signedRequest(
    {
      type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
      timestampMs: String(Date.now()),
      organizationId,
      parameters: {
        signWith,
        payload: Buffer.from(`known ${n++}`).toString("hex"),
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_KECCAK256",
      },
    },
    key,
  );
  return { send: () => h.post("/public/v1/submit/sign_raw_payload", body, headers), body, headers };
}

/** A new API key of the root user, accepted once (one signature) so that its next is authenticated in its transaction. */
async function acceptedKey(): Promise<{ key: ApiKeyPair; apiKeyId: string }> {
  const key = newKeyPair();
  const { apiKeyIds } = await root.createApiKeys({
    userId: org.userId,
    apiKeys: [{ apiKeyName: `known ${n++}`, publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
  });
  const first = await signature(key).send();
  expect(first.status).toBe(200);
  expect(first.json.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  return { key, apiKeyId: apiKeyIds[0]! };
}

/** The statements `work` sent, by text. */
async function sentBy<T>(work: () => Promise<T>): Promise<{ result: T; texts: string[] }> {
  const tally = h.server.store.statements;
  tally.texts = [];
  try {
    const result = await work();
    return { result, texts: tally.texts };
  } finally {
    tally.texts = null;
  }
}

/** A refusal with `code` that changed no row of any table; the statements the request sent. */
async function refusedChangingNothing(attempt: () => Promise<{ status: number; json: any }>, status: number, code: string) {
  const before = await h.snapshot();
  const { result: answer, texts } = await sentBy(attempt);
  expect(answer.status, JSON.stringify(answer.json)).toBe(status);
  expect(answer.json.details[0].turnkeyErrorCode).toBe(code);
  expect(await h.snapshot()).toEqual(before);
  return { texts };
}

/** Whether an organization's row lock was asked for (PostgreSQL; SQLite's is its one writer). The
 * server's background services send statements of their own meanwhile, but take no such lock. */
const locked = (texts: string[]) =>
  texts.some((text) => /^select .* from "organizations" where .* for (share|update)( skip locked)?$/.test(text));

describe("a signature by a key already accepted", () => {
  it("is signed, and on PostgreSQL its key is read only in its transaction", async () => {
    const { key } = await acceptedKey();
    const { result, texts } = await sentBy(() => signature(key).send());
    expect(result.status).toBe(200);
    expect(result.json.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    // The key's statement before the transaction (api_keys joined with users) only where it is not read
    // in it. A background service's transaction may begin first on a busy machine: on SQLite the
    // statement is looked for anywhere (it is never part of the transaction there), on PostgreSQL it
    // must not come before the first BEGIN, whosever that is.
    const keyRead = (text: string) => /^select .* from "api_keys" inner join "users"/.test(text);
    if (h.server.store.dialect === "postgres") {
      const beforeBegin = texts.slice(
        0,
        texts.findIndex((text) => /^begin/.test(text)),
      );
      expect(beforeBegin.some(keyRead)).toBe(false);
    } else {
      expect(texts.some(keyRead)).toBe(true);
    }
  });

  it("is refused PUBLIC_KEY_NOT_FOUND once the key is deleted, changing nothing; its next stamp is refused before any transaction", async () => {
    const { key, apiKeyId } = await acceptedKey();
    await root.deleteApiKeys({ userId: org.userId, apiKeyIds: [apiKeyId] });
    const { texts } = await refusedChangingNothing(signature(key).send, 401, "PUBLIC_KEY_NOT_FOUND");
    // On PostgreSQL this refusal came from inside the transaction; the key is forgotten with it.
    expect(locked(texts)).toBe(h.server.store.dialect === "postgres");
    const again = await refusedChangingNothing(signature(key).send, 401, "PUBLIC_KEY_NOT_FOUND");
    expect(locked(again.texts)).toBe(false);
  });

  it("is refused API_KEY_EXPIRED once the key has expired, changing nothing", async () => {
    const { key, apiKeyId } = await acceptedKey();
    // The clock cannot be moved in the server; its expiry can (as if it had been created to expire now).
    await h.server.store.db
      .updateTable("api_keys")
      .set({ expires_at: Date.now() - 1 })
      .where("id", "=", apiKeyId)
      .execute();
    await refusedChangingNothing(signature(key).send, 401, "API_KEY_EXPIRED");
  });

  it("is refused IP_NOT_ALLOWED from an address an allowlist set since leaves out, changing nothing", async () => {
    const { key } = await acceptedKey();
    const only = (cidr: string) => ({ enabled: true, rules: [{ cidr, label: "only here" }] });
    await fromAddress("127.0.0.1", () => root.setIpAllowlist(only("127.0.0.1/32")));
    try {
      const refused = await fromAddress("127.0.0.2", () => refusedChangingNothing(signature(key).send, 403, "IP_NOT_ALLOWED"));
      // On PostgreSQL refused in its transaction (the key was known); then forgotten: refused before any lock.
      expect(locked(refused.texts)).toBe(h.server.store.dialect === "postgres");
      const again = await fromAddress("127.0.0.2", () => refusedChangingNothing(signature(key).send, 403, "IP_NOT_ALLOWED"));
      expect(locked(again.texts)).toBe(false);
      // From the allowed address the same key still signs; a key's own list, set since, takes over.
      expect((await fromAddress("127.0.0.1", () => signature(key).send())).status).toBe(200);
      await fromAddress("127.0.0.1", () => root.setIpAllowlist({ publicKey: key.publicKey, ...only("127.0.0.2/32") }));
      await fromAddress("127.0.0.1", () => refusedChangingNothing(signature(key).send, 403, "IP_NOT_ALLOWED"));
      expect((await fromAddress("127.0.0.2", () => signature(key).send())).status).toBe(200);
    } finally {
      await fromAddress("127.0.0.1", () => root.removeIpAllowlist({}));
    }
  });

  it("whose stamp does not hold over the body sent is refused SIGNATURE_INVALID before any lock, changing nothing", async () => {
    const { key } = await acceptedKey();
    const request = signature(key);
    // The stamp of one body sent with another: the payload's first byte changed ("k" → "l").
    const tampered = request.body.replace('"payload":"6b', '"payload":"6c');
    expect(tampered).not.toBe(request.body);
    const { texts } = await refusedChangingNothing(
      () => h.post("/public/v1/submit/sign_raw_payload", tampered, request.headers),
      401,
      "SIGNATURE_INVALID",
    );
    expect(locked(texts)).toBe(false);
    // Its next, honest request is signed.
    expect((await signature(key).send()).status).toBe(200);
  });

  it("resent after its key was deleted, is answered from the audit log with the activity it made", async () => {
    const { key, apiKeyId } = await acceptedKey();
    const request = signature(key);
    const made = await request.send();
    expect(made.status).toBe(200);
    await root.deleteApiKeys({ userId: org.userId, apiKeyIds: [apiKeyId] });
    const before = await h.snapshot();
    const resent = await request.send();
    expect(resent.status).toBe(200);
    expect(resent.json.activity.id).toBe(made.json.activity.id);
    expect(await h.snapshot()).toEqual(before);
  });
});

describe("a stamp no accepted key vouches for", () => {
  it("by a key nobody registered is refused PUBLIC_KEY_NOT_FOUND before any transaction, however often it comes", async () => {
    const stranger = newKeyPair();
    for (let i = 0; i < 3; i++) {
      const { texts } = await refusedChangingNothing(signature(stranger).send, 401, "PUBLIC_KEY_NOT_FOUND");
      expect(locked(texts)).toBe(false);
    }
  });

  it("by a key accepted in one organization, naming another, is refused before any transaction", async () => {
    const { key } = await acceptedKey();
    const other = await h.organization();
    for (let i = 0; i < 2; i++) {
      const { texts } = await refusedChangingNothing(signature(key, other.organizationId).send, 403, "ORGANIZATION_MISMATCH");
      expect(locked(texts), texts.join("\n")).toBe(false);
    }
  });
});

describe("the memory of accepted keys", () => {
  const p256 = (publicKey: string) => ({ publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256" });
  it("is per organization and per scheme, forgets a refused key, and beyond its limit the least recently used", () => {
    const known = new KnownKeys(2);
    const key = (credentialId: string) => ({ credentialId, userId: "u1", organizationParentId: null });
    known.accepted(p256("k1"), "o1", key("c1"));
    expect(known.has(p256("k1"), "o1")).toBe(true);
    expect(known.get(p256("k1"), "o1")).toEqual(key("c1"));
    expect(known.has(p256("k1"), "o2")).toBe(false);
    expect(known.has({ publicKey: "k1", scheme: "SIGNATURE_SCHEME_TK_API_SECP256K1" }, "o1")).toBe(false);
    known.accepted(p256("k2"), "o1", key("c2"));
    known.accepted(p256("k1"), "o1", key("c1b")); // used again: now the most recent, as last accepted
    known.accepted(p256("k3"), "o1", key("c3"));
    expect([known.has(p256("k1"), "o1"), known.has(p256("k2"), "o1"), known.has(p256("k3"), "o1"), known.size]).toEqual([
      true,
      false,
      true,
      2,
    ]);
    expect(known.get(p256("k1"), "o1")?.credentialId).toBe("c1b");
    known.refused(p256("k1"), "o1");
    expect([known.has(p256("k1"), "o1"), known.size]).toEqual([false, 1]);
  });
});
