// One organization's long activities must not hold up another's signatures. An organization's lock
// may delay only that organization's activities (docs/storage.md, "One organization's lock delays only that organization"):
//  - on PostgreSQL, signatures of all organizations share batch transactions (store/group-commit.ts);
//    a batch never waits for an organization's row lock another transaction holds exclusively — that
//    organization's signatures leave the batch and wait on their own (store/database.ts);
//  - on SQLite the organization's lock is the database's one write lock, so an activity creating
//    wallet accounts derives them before it takes the lock (operations/wallets/wallets.ts,
//    deriveAhead) and holds it only for its inserts.
// The same shape of load, measured as a ratio, is the bench's noisy_neighbour scenario
// (bench/neighbours.ts, docs/benchmarks.md#noisy-neighbour).
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { backend } from "./helpers/backend.js";

let h: Harness;
let attacker: TestOrganization;
let victim: TestOrganization;
let attackerWallet: { walletId: string; address: string };
let victimAddress: string;

const ETHEREUM = { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", addressFormat: "ADDRESS_FORMAT_ETHEREUM" } as const;

async function walletOf(org: TestOrganization, name: string) {
  const { walletId, addresses } = await h
    .sdk(org, org.key)
    .createWallet({ walletName: name, accounts: [{ ...ETHEREUM, path: "m/44'/60'/0'/0/0" }] });
  return { walletId, address: addresses[0]! };
}

beforeAll(async () => {
  h = await startHarness();
  attacker = await h.organization("attacker");
  victim = await h.organization("victim");
  attackerWallet = await walletOf(attacker, "attacker");
  victimAddress = (await walletOf(victim, "victim")).address;
});
afterAll(() => h.close());

let n = 0;
const sign = (org: TestOrganization, signWith: string) =>
  h.sdk(org, org.key).signRawPayload({
    signWith,
    payload: Buffer.from(`neighbour ${n++}`).toString("hex"),
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_KECCAK256",
  });

/** Resolves with the order in which the named promises settled. */
function settlingOrder(named: Record<string, Promise<unknown>>): Promise<string[]> {
  const order: string[] = [];
  return Promise.all(Object.entries(named).map(([name, p]) => p.finally(() => order.push(name)))).then(() => order);
}

describe(`an organization's long activity beside another organization's signatures (${backend})`, () => {
  it("create_wallet_accounts with 100 accounts derives them before it takes the lock: a signature of another organization sent meanwhile completes first", async () => {
    let first = 1_000;
    const accounts = Array.from({ length: 100 }, () => ({ ...ETHEREUM, path: `m/44'/60'/0'/0/${first++}` }));
    const creating = h.sdk(attacker, attacker.key).createWalletAccounts({ walletId: attackerWallet.walletId, accounts });
    // Deriving 100 accounts takes hundreds of milliseconds; the signature is sent while it runs.
    await new Promise((resolve) => setTimeout(resolve, 30));
    const order = await settlingOrder({ creating, signature: sign(victim, victimAddress) });
    expect(order).toEqual(["signature", "creating"]);
    const { addresses } = await creating;
    expect(addresses).toHaveLength(100);
    // What was derived ahead is what a derivation under the lock gives: the same accounts again
    // (persist: false derives them in the activity, none derived ahead being stored for them).
    const again = await h
      .sdk(attacker, attacker.key)
      .createWalletAccounts({ walletId: attackerWallet.walletId, accounts: accounts.slice(0, 3), persist: false });
    expect(again.addresses).toEqual(addresses.slice(0, 3));
  });

  it("on PostgreSQL, while another transaction holds an organization's row, that organization's signatures wait on their own and another organization's complete", async () => {
    // SQLite has one write lock for every organization; nothing else can hold it meanwhile.
    if (backend !== "postgres") return;
    const holder = new pg.Client({ connectionString: h.database.databaseUrl! });
    await holder.connect();
    try {
      await holder.query("begin");
      await holder.query("select id from organizations where id = $1 for update", [attacker.organizationId]);
      // Two signatures of the held organization (the second by a key already accepted: the road that
      // authenticates inside the transaction), then the victim's.
      const held = [sign(attacker, attackerWallet.address), sign(attacker, attackerWallet.address)];
      const victims = Promise.all([sign(victim, victimAddress), sign(victim, victimAddress)]);
      const outcome = await Promise.race([
        victims.then(() => "the victim signed while the other organization was held"),
        new Promise((resolve) => setTimeout(resolve, 10_000, "the victim waited for the other organization's lock")),
      ]);
      await holder.query("rollback");
      expect(outcome).toBe("the victim signed while the other organization was held");
      const signed = await Promise.all(held);
      expect(signed.map((s) => s.activity.status)).toEqual(["ACTIVITY_STATUS_COMPLETED", "ACTIVITY_STATUS_COMPLETED"]);
    } finally {
      await holder.end();
    }
  });
});
