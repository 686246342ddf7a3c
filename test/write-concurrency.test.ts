// Activities under load: signatures run side by side (a shared lock on PostgreSQL, shared write
// transactions on SQLite) while everything else runs alone, and no answer is given before what it
// reports is durably stored — checked by killing a server process in mid-load.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { recoverAddress, keccak256, toHex, type Hex } from "viem";
import { startHarness, newKeyPair, signedRequest, type Harness, type TestOrganization, type ApiKeyPair } from "./helpers/harness.js";
import { cliDeployment } from "./helpers/processes.js";
import { loadConfig } from "../src/config.js";
import { openStore } from "../src/store/database.js";

let h: Harness;
let org: TestOrganization;
let walletId: string;
let address: string;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Load");
  const wallet = await h.sdk(org, org.key).createWallet({
    walletName: "load",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  walletId = wallet.walletId;
  address = wallet.addresses[0]!;
});
afterAll(() => h.close());

const signBody = (organizationId: string, signWith: string, message: string, timestampMs = String(Date.now())) => ({
  type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
  timestampMs,
  organizationId,
  parameters: {
    signWith,
    payload: toHex(message).slice(2),
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_KECCAK256",
  },
});

async function post(baseUrl: string, operation: string, body: unknown, key: ApiKeyPair) {
  const request = signedRequest(body, key);
  const res = await fetch(`${baseUrl}/public/v1/submit/${operation}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...request.headers },
    body: request.body,
  });
  return { status: res.status, json: (await res.json()) as any };
}

/** The address a raw-payload signature recovers to. */
function signer(message: string, result: { r: string; s: string; v: string }) {
  return recoverAddress({
    hash: keccak256(toHex(message)),
    signature: `0x${result.r}${result.s}${result.v === "00" ? "1b" : "1c"}` as Hex,
  });
}

describe("signatures beside other activities", () => {
  it("answers every concurrent signature and every concurrent exclusive activity, each recorded once", async () => {
    const signatures = Array.from({ length: 40 }, (_, i) =>
      post(h.url, "sign_raw_payload", signBody(org.organizationId, address, `message ${i}`), org.key),
    );
    const tags = Array.from({ length: 5 }, (_, i) =>
      post(
        h.url,
        "create_user_tag",
        {
          type: "ACTIVITY_TYPE_CREATE_USER_TAG",
          timestampMs: String(Date.now()),
          organizationId: org.organizationId,
          parameters: { userTagName: `load-${i}`, userIds: [] },
        },
        org.key,
      ),
    );
    const signed = await Promise.all(signatures);
    const tagged = await Promise.all(tags);
    expect(signed.map((r) => r.status)).toEqual(Array(40).fill(200));
    expect(tagged.map((r) => r.status)).toEqual(Array(5).fill(200));
    for (const [i, response] of signed.entries()) {
      expect(await signer(`message ${i}`, response.json.activity.result.signRawPayloadResult)).toBe(address);
    }
    const ids = [...signed, ...tagged].map((r) => r.json.activity.id as string);
    const stored = await h.server.store.db.selectFrom("activities").select("id").where("id", "in", ids).execute();
    expect(stored).toHaveLength(45);
    expect(await h.server.store.db.selectFrom("policy_evaluations").select("id").where("activity_id", "in", ids).execute()).toHaveLength(
      45,
    );
  });

  it("answers the same signing request sent five times at once with one activity", async () => {
    const body = signBody(org.organizationId, address, "sent five times");
    const responses = await Promise.all(Array.from({ length: 5 }, () => post(h.url, "sign_raw_payload", body, org.key)));
    expect(responses.map((r) => r.status)).toEqual(Array(5).fill(200));
    const ids = new Set(responses.map((r) => r.json.activity.id));
    expect(ids.size).toBe(1);
    const fingerprint = responses[0]!.json.activity.fingerprint as string;
    expect(await h.server.store.db.selectFrom("activities").select("id").where("fingerprint", "=", fingerprint).execute()).toHaveLength(1);
  });

  it("never completes a signature after the wallet's deletion: each one ran before it, or failed", async () => {
    const sdk = h.sdk(org, org.key);
    const doomed = await sdk.createWallet({
      walletName: "doomed",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    const doomedAddress = doomed.addresses[0]!;
    const before = Array.from({ length: 15 }, (_, i) =>
      post(h.url, "sign_raw_payload", signBody(org.organizationId, doomedAddress, `before ${i}`), org.key),
    );
    const deletion = post(
      h.url,
      "delete_wallets",
      {
        type: "ACTIVITY_TYPE_DELETE_WALLETS",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { walletIds: [doomed.walletId], deleteWithoutExport: true },
      },
      org.key,
    );
    const after = Array.from({ length: 15 }, (_, i) =>
      post(h.url, "sign_raw_payload", signBody(org.organizationId, doomedAddress, `after ${i}`), org.key),
    );
    const deleted = await deletion;
    expect(deleted.status).toBe(200);
    const deletedAt =
      Number(deleted.json.activity.createdAt.seconds) * 1000 + Math.floor(Number(deleted.json.activity.createdAt.nanos) / 1e6);
    const outcomes = await Promise.all([...before, ...after]);
    let completed = 0;
    for (const outcome of outcomes) {
      if (outcome.status === 200) {
        completed++;
        const activity = outcome.json.activity;
        expect(Number(activity.createdAt.seconds) * 1000 + Math.floor(Number(activity.createdAt.nanos) / 1e6)).toBeLessThanOrEqual(
          deletedAt,
        );
      } else {
        expect(outcome.status).toBe(404);
        expect(outcome.json.details[0].turnkeyErrorCode).toBe("SIGNER_NOT_FOUND");
      }
    }
    // Requests sent after the deletion was answered find no key.
    const late = await post(h.url, "sign_raw_payload", signBody(org.organizationId, doomedAddress, "late"), org.key);
    expect(late.status).toBe(404);
    expect(completed).toBeLessThan(31);
  });
});

describe("a server process killed under load", () => {
  it("has stored every activity it answered", async () => {
    const deployment = await cliDeployment();
    const { database, env, key, organizationId } = deployment;
    const server = await deployment.start();
    const { url } = server;
    try {
      const created = await post(
        url,
        "create_wallet",
        {
          type: "ACTIVITY_TYPE_CREATE_WALLET",
          timestampMs: String(Date.now()),
          organizationId,
          parameters: {
            walletName: "w",
            accounts: [
              {
                curve: "CURVE_SECP256K1",
                pathFormat: "PATH_FORMAT_BIP32",
                path: "m/44'/60'/0'/0/0",
                addressFormat: "ADDRESS_FORMAT_ETHEREUM",
              },
            ],
          },
        },
        key,
      );
      const signWith = created.json.activity.result.createWalletResult.addresses[0];

      // Keep 16 requests in flight; kill the server once 60 have been answered.
      const answered: string[] = [];
      let sent = 0;
      const worker = async () => {
        while (answered.length < 60) {
          const response = await post(url, "sign_raw_payload", signBody(organizationId, signWith, `crash ${sent++}`), key).catch(
            () => undefined,
          );
          if (!response) return;
          if (response.status === 200) answered.push(response.json.activity.id);
          if (answered.length >= 60) server.child.kill("SIGKILL");
        }
      };
      await Promise.all(Array.from({ length: 16 }, worker));
      server.child.kill("SIGKILL");
      await server.exited;
      expect(answered.length).toBeGreaterThanOrEqual(60);

      const store = await openStore(loadConfig(env, { dataDir: database.dataDir }));
      try {
        const stored = await store.db.selectFrom("activities").select("id").where("id", "in", answered).execute();
        expect(stored.map((r) => r.id).sort()).toEqual([...answered].sort());
      } finally {
        await store.close();
      }
    } finally {
      await deployment.stop();
    }
  });
});
