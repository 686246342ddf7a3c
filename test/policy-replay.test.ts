// `sigil policy replay` (docs/policy-testing.md): an organization's recorded activities, made through
// @turnkey/sdk-server as a user's program makes them, judged again on a proposed set of policies by
// the built CLI against the server's own database (SQLite file or PostgreSQL, while it runs). The
// policy context comes from the stored intents (eth.tx parsed again, the wallet looked up), and what
// cannot be rebuilt (a wallet deleted since) is named with the activity. It only reads.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEther, serializeTransaction, type Hex } from "viem";
import { organizationWith } from "./helpers/organizations.js";
import { startHarness, type Harness } from "./helpers/harness.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const FRIEND = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-policy-replay-"));

let h: Harness;
let org: Awaited<ReturnType<typeof organizationWith>>;
const ids: Record<string, string> = {};

async function sigil(args: string[]) {
  const env = { ...process.env, ...(h.database.databaseUrl ? { SIGIL_DATABASE_URL: h.database.databaseUrl } : {}) };
  return run(process.execPath, [CLI, ...args, "--data-dir", h.database.dataDir], { env, timeout: 60_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
  );
}

function write(name: string, content: unknown): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, typeof content === "string" ? content : JSON.stringify(content, null, 2));
  return file;
}

const unsigned = (value: bigint) =>
  serializeTransaction({
    chainId: 1,
    to: FRIEND as Hex,
    value,
    nonce: 0,
    gas: 21_000n,
    maxFeePerGas: 1n,
    maxPriorityFeePerGas: 1n,
    type: "eip1559",
  }).slice(2);

/** The id of the activity a refused request left (the SDK's error carries it). */
async function refusedId(attempt: Promise<unknown>): Promise<string> {
  const error = (await attempt.then(
    () => undefined,
    (e: unknown) => e,
  )) as { activityId?: string; cause?: { activityId?: string } } | undefined;
  const rows = await h.server.store.db
    .selectFrom("activities")
    .select(["id", "status"])
    .where("organization_id", "=", org.org.organizationId)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(1)
    .execute();
  expect(error).toBeDefined();
  expect(rows[0]!.status).toBe("ACTIVITY_STATUS_FAILED");
  return rows[0]!.id;
}

beforeAll(async () => {
  h = await startHarness();
  org = await organizationWith(h, ["alice"]);
  const { root } = org;
  const alice = org.members.alice!;
  const only = `approvers.any(u, u.id == '${alice.userId}')`;
  const { walletId, addresses } = await root.createWallet({
    walletName: "hot",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  const gone = await root.createWallet({
    walletName: "gone",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  for (const [policyName, condition] of [
    ["alice tags", "activity.type == 'ACTIVITY_TYPE_CREATE_USER_TAG'"],
    ["alice pays friends", `activity.type == 'ACTIVITY_TYPE_SIGN_TRANSACTION_V2' && eth.tx.to == '${FRIEND}'`],
    ["alice signs with gone", "activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2' && wallet.label == 'gone'"],
  ] as const)
    await root.createPolicy({ policyName, effect: "EFFECT_ALLOW", condition, consensus: only, notes: "" });

  ids.tag = (await alice.client.createUserTag({ userTagName: "ops", userIds: [] })).activity.id;
  const sent = await alice.client.signTransaction({
    signWith: addresses[0]!,
    unsignedTransaction: unsigned(parseEther("2")),
    type: "TRANSACTION_TYPE_ETHEREUM",
  });
  ids.sign = sent.activity.id;
  ids.wallet = await refusedId(alice.client.createWallet({ walletName: "mine", accounts: [] }));
  ids.payload = (
    await alice.client.signRawPayload({
      signWith: gone.addresses[0]!,
      payload: "00",
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    })
  ).activity.id;
  await root.deleteWallets({ walletIds: [gone.walletId], deleteWithoutExport: true });
  ids.hot = walletId;
  ids.goneAddress = gone.addresses[0]!;
});
afterAll(async () => {
  await h.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe("sigil policy replay", () => {
  it("reports every activity whose answer would change, with the proposed policy that decided it, and the summary", async () => {
    const alice = org.members.alice!;
    const only = `approvers.any(u, u.id == '${alice.userId}')`;
    const proposed = write("proposed.json", {
      policies: [
        { policyName: "alice pays friends", effect: "EFFECT_ALLOW", condition: `eth.tx.to == '${FRIEND}'`, consensus: only },
        { policyName: "nothing over one ether", effect: "EFFECT_DENY", condition: "eth.tx.value > 1000000000000000000" },
        {
          policyName: "alice makes wallets",
          effect: "EFFECT_ALLOW",
          condition: "activity.type == 'ACTIVITY_TYPE_CREATE_WALLET'",
          consensus: only,
        },
        {
          policyName: "signing takes two",
          effect: "EFFECT_ALLOW",
          condition: "activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2'",
          consensus: "approvers.count() >= 2",
        },
      ],
    });
    const before = await h.snapshot();
    const [json, table] = await Promise.all([
      sigil(["policy", "replay", "--organization", org.org.organizationId, "--policies", proposed, "--json"]),
      sigil(["policy", "replay", "--organization", org.org.organizationId, "--policies", proposed, "--last", "3"]),
    ]);
    expect(json.stderr).toBe("");
    expect(json.code).toBe(0);
    const report = JSON.parse(json.stdout);
    const byId = new Map<string, any>(report.changed.map((a: any) => [a.activityId, a]));
    // The tag (allowed today by "alice tags", which the proposal drops): denied.
    expect(byId.get(ids.tag)).toMatchObject({
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      recordedOutcome: "OUTCOME_ALLOW",
      current: "ALLOW",
      proposed: "DENY",
      change: "ALLOWED_TO_DENIED",
      decidedBy: "NO_POLICY",
    });
    // Two ether to a friend: eth.tx parsed again from the stored intent, denied by the new deny policy.
    expect(byId.get(ids.sign)).toMatchObject({
      change: "ALLOWED_TO_DENIED",
      decidedBy: "nothing over one ether (effect)",
      recordedOutcome: "OUTCOME_ALLOW",
    });
    expect(byId.get(ids.sign).unavailable).toBeUndefined();
    expect(byId.get(ids.wallet)).toMatchObject({
      change: "DENIED_TO_ALLOWED",
      recordedOutcome: "OUTCOME_DENY_IMPLICIT",
      decidedBy: "alice makes wallets (effect)",
    });
    // The wallet it signed with is gone: the replay says so rather than guess what it was.
    expect(byId.get(ids.payload)).toMatchObject({
      current: "DENY",
      proposed: "NEEDS_CONSENSUS",
      change: "NOW_NEEDS_CONSENSUS",
      decidedBy: "signing takes two (consensus)",
      unavailable: [`the key ${ids.goneAddress} signed with no longer exists`],
    });
    expect(report.changed).toHaveLength(4);
    expect(report.summary).toMatchObject({
      ALLOWED_TO_DENIED: 2,
      DENIED_TO_ALLOWED: 1,
      NOW_NEEDS_CONSENSUS: 1,
      NOW_NEEDS_ROOT_QUORUM: 0,
      NO_LONGER_WAITS: 0,
      withUnavailableContext: 1,
      // The payload was allowed when signed; today its wallet is gone.
      decidedOtherwiseToday: 1,
    });
    expect(report.replayed).toBe(report.activities);
    expect(report.summary.unchanged).toBe(report.replayed - 4);

    // --last 3: the three newest (the wallets deleted, the payload, the refused wallet).
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^ACTIVITY +RECORDED +TYPE +NOW +PROPOSED +DECIDED BY\n/);
    expect(table.stdout).toContain(`${ids.payload}  `);
    expect(table.stdout).toContain(`\n  not rebuilt: the key ${ids.goneAddress} signed with no longer exists\n`);
    expect(table.stdout).not.toContain(ids.tag);
    expect(table.stdout).toMatch(
      new RegExp(
        `\\n3 activities of organization ${org.org.organizationId} read, 3 replayed: 2 would change \\(0 allowed → denied, 1 denied → allowed, 1 now need consensus`,
      ),
    );
    expect(await h.snapshot()).toBe(before);
  });

  it("refuses --last that is not a positive whole number, an unknown organization, and a policy that does not compile", async () => {
    const good = write("good.json", [{ policyName: "p", effect: "EFFECT_ALLOW", condition: "true" }]);
    const bad = write("bad.json", '[\n  { "policyName": "p", "effect": "EFFECT_ALLOW", "condition": "activity.typ == \'x\'" }\n]');
    const replay = (...args: string[]) => sigil(["policy", "replay", ...args]);
    const before = await h.snapshot();
    const [zero, word, unknown, uncompiled] = await Promise.all([
      replay("--organization", org.org.organizationId, "--policies", good, "--last", "0"),
      replay("--organization", org.org.organizationId, "--policies", good, "--last", "ten"),
      replay("--organization", "no-such-organization", "--policies", good),
      replay("--organization", org.org.organizationId, "--policies", bad),
    ]);
    for (const [outcome, value] of [
      [zero, "0"],
      [word, "ten"],
    ] as const) {
      expect(outcome.code).toBe(2);
      expect(outcome.stdout).toBe("");
      expect(outcome.stderr).toMatch(new RegExp(`^sigil policy replay: --last must be a whole number from 1 to 1000000, got "${value}"\n`));
    }
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toBe("");
    expect(unknown.stderr).toMatch(/^no organization no-such-organization in /);
    expect(uncompiled.code).toBe(1);
    expect(uncompiled.stdout).toBe("");
    expect(uncompiled.stderr).toBe(
      `${bad}:2:73: policy "p", condition: Activity has no field "typ" (fields: type, kind, resource, action, params, organization_id)\n`,
    );
    expect(await h.snapshot()).toBe(before);
  });
});
