// Properties of the activity pipeline itself: idempotency, serialization across server processes,
// the root quorum's lock-out protection, and the other API key signature schemes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import crypto from "node:crypto";
import pino from "pino";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { startServer, type RunningServer } from "../src/http/server.js";
import { startHarness, newKeyPair, signedRequest, type Harness, type TestOrganization } from "./helpers/harness.js";
import { backend } from "./helpers/backend.js";

let h: Harness;
let org: TestOrganization;
let second: RunningServer | undefined;
/** Where concurrent requests go, alternately. On PostgreSQL: two servers, each with its own pool. On
 * SQLite one server: a second better-sqlite3 connection in the same process would block the shared
 * event loop on the file lock (separate processes on one file are covered by cli.test.ts). */
let targets: string[];

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization();
  // A second server process's worth of state (own pool / connection, own port) on the same database.
  if (backend === "postgres") second = await startServer({ ...h.config, port: 0 }, pino({ level: "silent" }));
  targets = second ? [h.url, second.url] : [h.url];
});
afterAll(async () => {
  await second?.close();
  await h.close();
});

const tagBody = (name: string, organizationId = org.organizationId) => ({
  type: "ACTIVITY_TYPE_CREATE_USER_TAG",
  timestampMs: String(Date.now()),
  organizationId,
  parameters: { userTagName: name, userIds: [] },
});

async function post(baseUrl: string, path: string, body: string, headers: Record<string, string>) {
  const res = await fetch(baseUrl + path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
  return { status: res.status, json: (await res.json()) as any };
}

describe("idempotency", () => {
  it("runs an operation once for identical bodies sent concurrently", async () => {
    const { body, headers } = signedRequest(tagBody("once"), org.key);
    const responses = await Promise.all(
      Array.from({ length: 6 }, (_, i) => post(targets[i % targets.length], "/public/v1/submit/create_user_tag", body, headers)),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(6).fill(200));
    const ids = new Set(responses.map((r) => r.json.activity.id));
    expect(ids.size).toBe(1);
    const tags = await h.server.store.db.selectFrom("tags").select("id").where("name", "=", "once").execute();
    expect(tags).toHaveLength(1);
  });

  it("answers a repeated failed request with the same error, without a second record", async () => {
    const { body, headers } = signedRequest({ ...tagBody("x"), parameters: { userTagName: "x", userIds: ["no-such-user"] } }, org.key);
    const first = await h.post("/public/v1/submit/create_user_tag", body, headers);
    const count = async () =>
      (await h.server.store.db.selectFrom("activities").select("id").where("status", "=", "ACTIVITY_STATUS_FAILED").execute()).length;
    const failedBefore = await count();
    const again = await h.post("/public/v1/submit/create_user_tag", body, headers);
    expect(first.status).toBe(404);
    // The same error, under the retry's own request id.
    const withoutId = ({ status, json: { requestId, ...json } }: typeof first) => ({ status, json });
    expect(withoutId(again)).toEqual(withoutId(first));
    expect(again.json.requestId).not.toBe(first.json.requestId);
    expect(await count()).toBe(failedBefore);
  });
});

describe("serialization across server processes", () => {
  it("applies concurrent activities of one organization one at a time, none lost", async () => {
    const requests = Array.from({ length: 20 }, (_, i) => signedRequest(tagBody(`tag-${i}`), org.key));
    const responses = await Promise.all(
      requests.map((r, i) => post(targets[i % targets.length], "/public/v1/submit/create_user_tag", r.body, r.headers)),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(20).fill(200));
    const tags = await h.server.store.db.selectFrom("tags").select("name").where("name", "like", "tag-%").execute();
    expect(tags).toHaveLength(20);
  });

  it("lets exactly one of several racing requests claim the same API public key", async () => {
    const key = newKeyPair();
    const requests = Array.from({ length: 6 }, (_, i) =>
      signedRequest(
        {
          type: "ACTIVITY_TYPE_CREATE_API_KEYS_V2",
          timestampMs: String(Date.now() + i),
          organizationId: org.organizationId,
          parameters: {
            userId: org.userId,
            apiKeys: [{ apiKeyName: `race ${i}`, publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          },
        },
        org.key,
      ),
    );
    const responses = await Promise.all(
      requests.map((r, i) => post(targets[i % targets.length], "/public/v1/submit/create_api_keys", r.body, r.headers)),
    );
    expect(responses.filter((r) => r.status === 200)).toHaveLength(1);
    expect(responses.filter((r) => r.status === 409).every((r) => r.json.details[0].turnkeyErrorCode === "API_KEY_ALREADY_EXISTS")).toBe(
      true,
    );
    expect(responses.filter((r) => r.status === 409)).toHaveLength(5);
  });
});

describe("root quorum lock-out protection", () => {
  it("refuses to delete the last usable credential of the only root user", async () => {
    const other = await h.organization("Lockout");
    const client = h.sdk(other, other.key);
    await expect(client.deleteApiKeys({ userId: other.userId, apiKeyIds: [other.apiKeyId] })).rejects.toMatchObject({
      code: 9,
      details: [expect.objectContaining({ turnkeyErrorCode: "ROOT_QUORUM_UNREACHABLE" })],
    });
    expect((await client.getApiKeys({ userId: other.userId })).apiKeys).toHaveLength(1);
  });

  it("refuses to delete the only root user", async () => {
    const other = await h.organization("Lockout 2");
    const client = h.sdk(other, other.key);
    await expect(client.deleteUsers({ userIds: [other.userId] })).rejects.toMatchObject({ code: 9 });
    expect((await client.getUser({ userId: other.userId })).user.userId).toBe(other.userId);
  });

  it("allows replacing a root user's key when another credential remains", async () => {
    const other = await h.organization("Rotation");
    const client = h.sdk(other, other.key);
    const next = newKeyPair();
    await client.createApiKeys({
      userId: other.userId,
      apiKeys: [{ apiKeyName: "next", publicKey: next.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const deleted = await client.deleteApiKeys({ userId: other.userId, apiKeyIds: [other.apiKeyId] });
    expect(deleted.apiKeyIds).toEqual([other.apiKeyId]);
    const rotated = h.sdk(other, next);
    expect((await rotated.getWhoami({})).userId).toBe(other.userId);
  });

  it("does not count an expiring key: it would lock the organization out when it expires", async () => {
    const other = await h.organization("Expiring");
    const client = h.sdk(other, other.key);
    const temp = newKeyPair();
    await client.createApiKeys({
      userId: other.userId,
      apiKeys: [{ apiKeyName: "temp", publicKey: temp.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "600" }],
    });
    await expect(client.deleteApiKeys({ userId: other.userId, apiKeyIds: [other.apiKeyId] })).rejects.toMatchObject({
      code: 9,
      details: [expect.objectContaining({ turnkeyErrorCode: "ROOT_QUORUM_UNREACHABLE" })],
    });
    expect((await client.getApiKeys({ userId: other.userId })).apiKeys).toHaveLength(2);
  });
});

describe("API key signature schemes", () => {
  const stampWith = (scheme: string, publicKey: string, signature: string) =>
    Buffer.from(JSON.stringify({ publicKey, scheme, signature })).toString("base64url");

  it("accepts secp256k1 API keys (ECDSA over SHA-256, DER)", async () => {
    const priv = secp256k1.utils.randomSecretKey();
    const pub = Buffer.from(secp256k1.getPublicKey(priv, true)).toString("hex");
    await h
      .sdk(org, org.key)
      .createApiKeys({ userId: org.userId, apiKeys: [{ apiKeyName: "k1", publicKey: pub, curveType: "API_KEY_CURVE_SECP256K1" }] });
    const body = JSON.stringify({ organizationId: org.organizationId });
    const sig = Buffer.from(secp256k1.sign(Buffer.from(body), priv, { format: "der" })).toString("hex");
    const ok = await h.post("/public/v1/query/whoami", body, { "X-Stamp": stampWith("SIGNATURE_SCHEME_TK_API_SECP256K1", pub, sig) });
    expect(ok.status).toBe(200);
    expect(ok.json.userId).toBe(org.userId);

    // The EIP-191 scheme of Ethereum wallets (@turnkey/wallet-stamper) signs the personal-message hash.
    const prefixed = Buffer.concat([Buffer.from(`\x19Ethereum Signed Message:\n${Buffer.byteLength(body)}`), Buffer.from(body)]);
    const eipSig = Buffer.from(secp256k1.sign(keccak_256(prefixed), priv, { format: "der", prehash: false })).toString("hex");
    const eip = await h.post("/public/v1/query/whoami", body, {
      "X-Stamp": stampWith("SIGNATURE_SCHEME_TK_API_SECP256K1_EIP191", pub, eipSig),
    });
    expect(eip.status).toBe(200);

    // A P-256 scheme claimed for a secp256k1 key is refused.
    const wrong = await h.post("/public/v1/query/whoami", body, { "X-Stamp": stampWith("SIGNATURE_SCHEME_TK_API_P256", pub, sig) });
    expect(wrong.status).toBe(401);
  });

  it("accepts ed25519 API keys", async () => {
    const { publicKey, privateKey } = crypto.generateKeyPairSync("ed25519");
    const pub = Buffer.from(publicKey.export({ format: "jwk" }).x!, "base64url").toString("hex");
    await h
      .sdk(org, org.key)
      .createApiKeys({ userId: org.userId, apiKeys: [{ apiKeyName: "ed", publicKey: pub, curveType: "API_KEY_CURVE_ED25519" }] });
    const body = JSON.stringify({ organizationId: org.organizationId });
    const sig = crypto.sign(null, Buffer.from(body), privateKey).toString("hex");
    const ok = await h.post("/public/v1/query/whoami", body, { "X-Stamp": stampWith("SIGNATURE_SCHEME_TK_API_ED25519", pub, sig) });
    expect(ok.status).toBe(200);
    const tampered = await h.post("/public/v1/query/whoami", body.replace("}", " }"), {
      "X-Stamp": stampWith("SIGNATURE_SCHEME_TK_API_ED25519", pub, sig),
    });
    expect(tampered.status).toBe(401);
  });
});

describe("idempotency across users", () => {
  it("refuses another user's exact body instead of answering with that user's activity", async () => {
    const key = newKeyPair();
    await h.sdk(org, org.key).createUsers({
      users: [
        {
          userName: "replayer",
          apiKeys: [{ apiKeyName: "r", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    const body = JSON.stringify(tagBody("root only"));
    const first = await h.post("/public/v1/submit/create_user_tag", body, signedRequest(body, org.key).headers);
    expect(first.status).toBe(200);
    const before = await h.snapshot();
    const replay = await h.post("/public/v1/submit/create_user_tag", body, signedRequest(body, key).headers);
    expect(replay.status).toBe(409);
    expect(replay.json.details[0].turnkeyErrorCode).toBe("DUPLICATE_REQUEST");
    expect(replay.json.message).toContain(first.json.activity.id);
    expect(await h.snapshot()).toBe(before);
  });
});

describe("credential re-check under the organization lock", () => {
  it("refuses a principal whose key was deleted after it authenticated", async () => {
    const { confirmCredential } = await import("../src/auth/authenticate.js");
    const key = newKeyPair();
    const client = h.sdk(org, org.key);
    const { apiKeyIds } = await client.createApiKeys({
      userId: org.userId,
      apiKeys: [{ apiKeyName: "soon gone", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const principal = {
      organizationId: org.organizationId,
      userId: org.userId,
      credentialType: "CREDENTIAL_TYPE_API_KEY_P256" as const,
      credentialId: apiKeyIds[0],
      publicKey: key.publicKey,
      scheme: "SIGNATURE_SCHEME_TK_API_P256",
      signature: "",
      userName: "root",
      userEmail: null,
    };
    const db = h.server.store.db;
    await expect(db.transaction().execute((trx) => confirmCredential(trx, principal, Date.now()))).resolves.toEqual({ mfaPolicies: false });
    await client.deleteApiKeys({ userId: org.userId, apiKeyIds });
    await expect(db.transaction().execute((trx) => confirmCredential(trx, principal, Date.now()))).rejects.toMatchObject({
      turnkeyErrorCode: "PUBLIC_KEY_NOT_FOUND",
    });
  });
});

describe("retries after rotating the stamping key", () => {
  it("answers a retry of a request that deleted its own stamping key with the original activity", async () => {
    const other = await h.organization("Rotating");
    const client = h.sdk(other, other.key);
    const next = newKeyPair();
    await client.createApiKeys({
      userId: other.userId,
      apiKeys: [{ apiKeyName: "next", publicKey: next.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const request = signedRequest(
      {
        type: "ACTIVITY_TYPE_DELETE_API_KEYS",
        timestampMs: String(Date.now()),
        organizationId: other.organizationId,
        parameters: { userId: other.userId, apiKeyIds: [other.apiKeyId] },
      },
      other.key,
    );
    const first = await h.post("/public/v1/submit/delete_api_keys", request.body, request.headers);
    expect(first.status).toBe(200);
    const retry = await h.post("/public/v1/submit/delete_api_keys", request.body, request.headers);
    expect(retry).toEqual(first);
    // The deleted key cannot do anything new.
    const fresh = signedRequest(tagBody("after rotation", other.organizationId), other.key);
    expect((await h.post("/public/v1/submit/create_user_tag", fresh.body, fresh.headers)).status).toBe(401);
  });
});
