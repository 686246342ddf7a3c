// sol_send_transaction and get_send_transaction_status against a Solana runtime (LiteSVM behind a
// JSON-RPC endpoint on loopback, test/helpers/solana-node.ts), through @turnkey/sdk-server: SOL sent
// and landed with the right balances, a failing transaction reported with the node's preflight details,
// two signers, the blockhash taken from the request or the node, policies judging each signing key, and
// bad input refused with nothing signed, nothing broadcast and nothing else recorded.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { address, getBase58Encoder, lamports } from "@solana/kit";
import { DEFAULT_ETHEREUM_ACCOUNTS, DEFAULT_SOLANA_ACCOUNTS } from "@turnkey/sdk-server";
import { startHarness, refusedLeavingOnlyItsActivity, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";
import { durableNonceTransfers, LAMPORTS_PER_SIGNATURE, startSolanaNode, transfers, type SolanaNode } from "./helpers/solana-node.js";
import { evaluatePolicies, newBudget } from "../src/policy/engine.js";
import { STEP_BUDGET } from "../src/policy/compile.js";
import { MAX_BROADCASTS } from "../src/services/chain-broadcaster.js";

type Sdk = ReturnType<Harness["sdk"]>;
type Caip2 = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

let node: SolanaNode;
let h: Harness;
let org: TestOrganization;
let sdk: Sdk;
let sender: string;
let second: string;
const RECIPIENT = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
const SOL = 1_000_000_000n;
/** An SPL mint SIGIL_CHAIN_ASSETS lists, and a token account of it (both made up: LiteSVM holds them as written). */
const MINT = "3jgJVv3VebwH3CYMx2SWLmRTjkQhUtpGK2Uin6aCEkbQ";
const TOKEN_ACCOUNT = "EQZsRLUYmL7JrcKMMLxqhdbeW6rDZPKKmay7vjSTQj6E";
const TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
let assetsDir: string;

/** An initialized SPL token account (the token program's 165-byte layout) holding `amount` of MINT for `owner`. */
function tokenAccount(owner: string, amount: bigint) {
  const data = Buffer.alloc(165);
  data.set(getBase58Encoder().encode(MINT), 0);
  data.set(getBase58Encoder().encode(owner), 32);
  data.writeBigUInt64LE(amount, 64);
  data[108] = 1; // initialized
  node.svm.setAccount({
    address: address(TOKEN_ACCOUNT),
    data: new Uint8Array(data),
    executable: false,
    lamports: lamports(2_039_280n),
    programAddress: address(TOKEN_PROGRAM),
    space: 165n,
  });
}

async function solanaAccount(client: Sdk, name: string, funded: bigint): Promise<string> {
  const { addresses } = await client.createWallet({ walletName: name, accounts: DEFAULT_SOLANA_ACCOUNTS });
  if (funded > 0n) node.airdrop(addresses[0]!, funded);
  return addresses[0]!;
}

async function finalStatus(client: Sdk, sendTransactionStatusId: string, organizationId = org.organizationId) {
  for (;;) {
    const status = await client.getSendTransactionStatus({ organizationId, sendTransactionStatusId });
    if (status.txStatus === "INCLUDED" || status.txStatus === "FAILED") return status;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const send = (client: Sdk, unsignedTransaction: string, signWiths: string[], extra: Record<string, unknown> = {}) =>
  client.solSendTransaction({ unsignedTransaction, signWiths, caip2: node.caip2 as Caip2, ...extra });

beforeAll(async () => {
  node = await startSolanaNode();
  assetsDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-assets-"));
  const assets = path.join(assetsDir, "assets.json");
  fs.writeFileSync(
    assets,
    JSON.stringify({ "solana:devnet": [{ caip19: `${node.caip2}/token:${MINT}`, symbol: "TST", name: "Test SPL token", decimals: 6 }] }),
  );
  h = await startHarness({
    SIGIL_CHAIN_RPC_URLS: `${node.caip2}=${node.url}`,
    SIGIL_CHAIN_POLL_MS: "20",
    SIGIL_CHAIN_TIMEOUT_MS: "5000",
    SIGIL_CHAIN_ASSETS: assets,
  });
  org = await h.organization();
  sdk = h.sdk(org, org.key);
  sender = await solanaAccount(sdk, "sender", 10n * SOL);
  second = await solanaAccount(sdk, "second", 2n * SOL);
});
afterAll(async () => {
  await h?.close();
  await node?.stop();
  if (assetsDir) fs.rmSync(assetsDir, { recursive: true, force: true });
});

describe("sol_send_transaction through @turnkey/sdk-server", () => {
  it("sends SOL from a wallet account: the blockhash attached, signed, landed, INCLUDED with its signature", async () => {
    const before = { sender: node.balance(sender), recipient: node.balance(RECIPIENT) };
    const amount = SOL / 10n;
    const { sendTransactionStatusId, activity } = await send(sdk, transfers(sender, [{ from: sender, to: RECIPIENT, lamports: amount }]), [
      sender,
    ]);
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const status = await sdk.pollTransactionStatus({ sendTransactionStatusId, pollingIntervalMs: 20, timeoutMs: 20_000 });
    expect(status.txStatus).toBe("INCLUDED");
    const signature = status.solana!.signature!;
    expect(status.eth).toBeUndefined();
    const landed = node.landed(signature)!;
    expect(landed.err).toBeNull();
    expect(node.balance(RECIPIENT)).toBe(before.recipient + amount);
    expect(node.balance(sender)).toBe(before.sender - amount - LAMPORTS_PER_SIGNATURE);
    const recorded = await sdk.getActivity({ activityId: activity.id });
    expect(recorded.activity.type).toBe("ACTIVITY_TYPE_SOL_SEND_TRANSACTION_V2");
    expect(recorded.activity.intent.solSendTransactionIntentV2).toMatchObject({ signWiths: [sender], caip2: node.caip2 });
    expect(recorded.activity.result.solSendTransactionResultV2).toEqual({ sendTransactionStatusId });
  });

  it("takes the caip2 alias solana:devnet and the request's recentBlockhash as they are", async () => {
    const blockhash = node.svm.latestBlockhash();
    const { sendTransactionStatusId } = await sdk.solSendTransaction({
      unsignedTransaction: transfers(sender, [{ from: sender, to: RECIPIENT, lamports: SOL / 100n }]),
      signWiths: [sender],
      caip2: "solana:devnet",
      recentBlockhash: blockhash,
    });
    const status = await finalStatus(sdk, sendTransactionStatusId);
    expect(status.txStatus).toBe("INCLUDED");
    expect(node.landed(status.solana!.signature!)!.blockhash).toBe(blockhash);
  });

  it("signs with two keys of the organization: both transfers land, the fee payer pays two signatures", async () => {
    const before = { sender: node.balance(sender), second: node.balance(second), recipient: node.balance(RECIPIENT) };
    const unsigned = transfers(sender, [
      { from: sender, to: RECIPIENT, lamports: 3_000_000n },
      { from: second, to: RECIPIENT, lamports: 5_000_000n },
    ]);
    const { sendTransactionStatusId } = await send(sdk, unsigned, [second, sender]);
    const status = await finalStatus(sdk, sendTransactionStatusId);
    expect(status.txStatus).toBe("INCLUDED");
    expect(node.balance(RECIPIENT)).toBe(before.recipient + 8_000_000n);
    expect(node.balance(second)).toBe(before.second - 5_000_000n);
    expect(node.balance(sender)).toBe(before.sender - 3_000_000n - 2n * LAMPORTS_PER_SIGNATURE);
  });

  it("a transaction whose preflight fails is FAILED with the node's code, message, transaction error, logs and units", async () => {
    const poor = await solanaAccount(sdk, "poor", SOL / 10n);
    const before = node.balance(poor);
    const { sendTransactionStatusId } = await send(sdk, transfers(poor, [{ from: poor, to: RECIPIENT, lamports: 5n * SOL }]), [poor]);
    const status = await finalStatus(sdk, sendTransactionStatusId);
    expect(status.txStatus).toBe("FAILED");
    expect(status.solana).toBeUndefined();
    expect(status.txError).toMatch(/^the node's preflight simulation failed: Transaction simulation failed/);
    expect(status.error).toMatchObject({
      message: status.txError,
      solana: {
        source: "preflight",
        rpcCode: -32002,
        rpcMessage: expect.stringContaining("Transaction simulation failed"),
        transactionErrorJson: JSON.stringify({ InstructionError: [0, { Custom: 1 }] }),
        logs: expect.arrayContaining([expect.stringMatching(/^Transfer: insufficient lamports/)]),
        unitsConsumed: expect.stringMatching(/^[1-9][0-9]*$/),
      },
    });
    expect(node.balance(poor)).toBe(before);
    await expect(sdk.pollTransactionStatus({ sendTransactionStatusId, pollingIntervalMs: 20 })).rejects.toMatchObject({
      message: status.txError,
    });
  });
});

describe("the activity's first version, and a node that does not answer", () => {
  it("takes ACTIVITY_TYPE_SOL_SEND_TRANSACTION (base64, one signWith) through @turnkey/http", async () => {
    const unsigned = Buffer.from(transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 2_000_000n }]), "hex").toString("base64");
    const before = node.balance(RECIPIENT);
    const response = await h.http(org.key).solSendTransaction({
      type: "ACTIVITY_TYPE_SOL_SEND_TRANSACTION",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { unsignedTransaction: unsigned, signWith: sender, caip2: node.caip2 },
    } as never);
    const { sendTransactionStatusId } = (response.activity.result as { solSendTransactionResult: { sendTransactionStatusId: string } })
      .solSendTransactionResult;
    expect((await finalStatus(sdk, sendTransactionStatusId)).txStatus).toBe("INCLUDED");
    expect(node.balance(RECIPIENT)).toBe(before + 2_000_000n);
  });

  it("a transaction signed while the node is down stays INITIALIZED and lands once it answers again", async () => {
    const blockhash = node.svm.latestBlockhash();
    const before = node.balance(RECIPIENT);
    node.pause();
    let id: string;
    try {
      // With the blockhash named, the activity itself asks the node nothing.
      ({ sendTransactionStatusId: id } = await send(
        sdk,
        transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 4_000_000n }]),
        [sender],
        {
          recentBlockhash: blockhash,
        },
      ));
      // The broadcaster tries, finds no node, and keeps the transaction to try again.
      const refused = node.refused();
      while (node.refused() < refused + 2) await new Promise((resolve) => setTimeout(resolve, 20));
      expect((await sdk.getSendTransactionStatus({ sendTransactionStatusId: id })).txStatus).toBe("INITIALIZED");
      expect(node.balance(RECIPIENT)).toBe(before);
    } finally {
      node.resume();
    }
    expect((await finalStatus(sdk, id)).txStatus).toBe("INCLUDED");
    expect(node.balance(RECIPIENT)).toBe(before + 4_000_000n);
  });
});

describe("the node is read before the organization's lock is taken", () => {
  it("while a send waits for a slow node's blockhash, another activity of the organization commits", async () => {
    const payer = await solanaAccount(sdk, "slow node", SOL);
    node.stall();
    let sending: ReturnType<typeof send>;
    try {
      sending = send(sdk, transfers(payer, [{ from: payer, to: RECIPIENT, lamports: 1_000_000n }]), [payer]);
      while (!node.stalled().includes("getLatestBlockhash")) await new Promise((resolve) => setTimeout(resolve, 20));
      // Under the lock the send would hold the organization's (on SQLite, the database's) writes until
      // the node answers, and this would wait for it.
      const { walletId } = await sdk.createWallet({ walletName: "made meanwhile", accounts: DEFAULT_SOLANA_ACCOUNTS });
      expect(walletId).toBeTruthy();
      expect(node.stalled()).toContain("getLatestBlockhash");
    } finally {
      node.answer();
    }
    const { sendTransactionStatusId } = await sending;
    expect((await finalStatus(sdk, sendTransactionStatusId)).txStatus).toBe("INCLUDED");
  });
});

describe("a transaction the node accepted but has not landed yet", () => {
  const sendCount = () => node.calls.filter((method) => method === "sendTransaction").length;
  /** Waits until the broadcaster has looked at its sends `n` more times (each look asks whether the blockhash is valid). */
  async function looks(n: number) {
    const asked = () => node.calls.filter((method) => method === "isBlockhashValid").length;
    const before = asked();
    while (asked() < before + n) await new Promise((resolve) => setTimeout(resolve, 20));
  }
  async function statusReaches(id: string, wanted: string) {
    for (;;) {
      const status = await sdk.getSendTransactionStatus({ sendTransactionStatusId: id });
      if (status.txStatus === wanted) return status;
      if (status.txStatus === "FAILED" || status.txStatus === "INCLUDED") throw new Error(`reached ${status.txStatus}, not ${wanted}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it("passes its preflight, then fails on chain (the balance spent meanwhile): INCLUDED with the execution error and logs", async () => {
    const payer = await solanaAccount(sdk, "spent meanwhile", SOL);
    node.hold();
    let first: string;
    let second: string;
    try {
      // Each is simulated on the balance as it is: both pass; together they spend more than it holds.
      ({ sendTransactionStatusId: first } = await send(
        sdk,
        transfers(payer, [{ from: payer, to: RECIPIENT, lamports: (SOL * 6n) / 10n }]),
        [payer],
      ));
      ({ sendTransactionStatusId: second } = await send(
        sdk,
        transfers(payer, [{ from: payer, to: RECIPIENT, lamports: (SOL * 7n) / 10n }]),
        [payer],
      ));
      await statusReaches(first, "BROADCASTING");
      await statusReaches(second, "BROADCASTING");
    } finally {
      node.landHeld();
    }
    expect((await finalStatus(sdk, first)).error).toBeUndefined();
    const failed = await finalStatus(sdk, second);
    expect(failed).toMatchObject({
      txStatus: "INCLUDED",
      txError: expect.stringMatching(/^the transaction failed in execution on chain/),
      error: {
        solana: {
          source: "execution",
          transactionErrorJson: JSON.stringify({ InstructionError: [0, { Custom: 1 }] }),
          logs: expect.arrayContaining([expect.stringMatching(/^Transfer: insufficient lamports/)]),
        },
      },
    });
    expect(node.landed(failed.solana!.signature!)?.err).not.toBeNull();
    // The first moved its lamports; the second paid only its fee.
    expect(node.balance(payer)).toBe(SOL - (SOL * 6n) / 10n - 2n * LAMPORTS_PER_SIGNATURE);
  });

  it("past the rebroadcast limit it is followed while its blockhash is valid, and INCLUDED when it lands", async () => {
    const payer = await solanaAccount(sdk, "past the limit", SOL);
    node.hold();
    let id: string;
    try {
      const sent = sendCount();
      ({ sendTransactionStatusId: id } = await send(sdk, transfers(payer, [{ from: payer, to: RECIPIENT, lamports: 3_000_000n }]), [
        payer,
      ]));
      await statusReaches(id, "BROADCASTING");
      while (sendCount() < sent + MAX_BROADCASTS) await new Promise((resolve) => setTimeout(resolve, 20));
      await looks(3);
      expect((await sdk.getSendTransactionStatus({ sendTransactionStatusId: id })).txStatus).toBe("BROADCASTING");
      expect(sendCount()).toBe(sent + MAX_BROADCASTS);
    } finally {
      node.landHeld();
    }
    expect((await finalStatus(sdk, id)).txStatus).toBe("INCLUDED");
  });

  it("a rebroadcast the node refuses is not a verdict: still BROADCASTING, INCLUDED when it lands", async () => {
    const payer = await solanaAccount(sdk, "refused rebroadcast", SOL);
    node.hold();
    let id: string;
    try {
      ({ sendTransactionStatusId: id } = await send(sdk, transfers(payer, [{ from: payer, to: RECIPIENT, lamports: 3_100_000n }]), [
        payer,
      ]));
      await statusReaches(id, "BROADCASTING");
      node.refuseSends(true);
      await looks(3);
      expect((await sdk.getSendTransactionStatus({ sendTransactionStatusId: id })).txStatus).toBe("BROADCASTING");
    } finally {
      node.refuseSends(false);
      node.landHeld();
    }
    expect((await finalStatus(sdk, id)).txStatus).toBe("INCLUDED");
  });

  it("its blockhash expiring while it waits, with no status for its signature: FAILED, it can never land", async () => {
    const before = node.balance(RECIPIENT);
    const payer = await solanaAccount(sdk, "blockhash expired", SOL);
    node.hold();
    let id: string;
    try {
      ({ sendTransactionStatusId: id } = await send(sdk, transfers(payer, [{ from: payer, to: RECIPIENT, lamports: 3_200_000n }]), [
        payer,
      ]));
      await statusReaches(id, "BROADCASTING");
      await looks(2);
      expect((await sdk.getSendTransactionStatus({ sendTransactionStatusId: id })).txStatus).toBe("BROADCASTING");
      node.dropHeld();
      node.expireBlockhash();
      const status = await finalStatus(sdk, id);
      expect(status.txStatus).toBe("FAILED");
      expect(status.txError).toMatch(/^the blockhash \w+ expired before the transaction landed; it can never land now/);
    } finally {
      node.landHeld();
    }
    expect(node.balance(RECIPIENT)).toBe(before);
  });

  describe("on a durable nonce (its nonce account read instead of a blockhash)", () => {
    const NONCE = "6Q5NAwQRueyRUPFRsZ8NR4Ss3PKwwZDbBJzkDPr2DzuU";
    const ANOTHER_NONCE = "8RryAHpC54mE1b9MESrLC9UxYGPjZDXJFpScRFaknqVu";
    /** Waits until the broadcaster has read a nonce account `n` more times. */
    async function nonceReads(n: number) {
      const read = () => node.calls.filter((method) => method === "getAccountInfo").length;
      const before = read();
      while (read() < before + n) await new Promise((resolve) => setTimeout(resolve, 20));
    }

    it("its nonce advanced by another transaction, with no status for its signature: FAILED, it can never land", async () => {
      const nonceAccount = "5x6bjumMXkR2R64zS3J7CeJ3JDNqMoHmqKQt7yCyVVTQ";
      const before = node.balance(RECIPIENT);
      const payer = await solanaAccount(sdk, "nonce advanced", SOL);
      node.setNonce(nonceAccount, payer, NONCE);
      node.hold();
      let id: string;
      try {
        ({ sendTransactionStatusId: id } = await send(
          sdk,
          durableNonceTransfers(payer, nonceAccount, payer, NONCE, [{ from: payer, to: RECIPIENT, lamports: 3_300_000n }]),
          [payer],
        ));
        await statusReaches(id, "BROADCASTING");
        // The nonce still held: followed, not failed.
        await nonceReads(2);
        expect((await sdk.getSendTransactionStatus({ sendTransactionStatusId: id })).txStatus).toBe("BROADCASTING");
        node.dropHeld();
        node.setNonce(nonceAccount, payer, ANOTHER_NONCE);
        const status = await finalStatus(sdk, id);
        expect(status.txStatus).toBe("FAILED");
        expect(status.txError).toBe(
          `the nonce account ${nonceAccount} was advanced past the transaction's nonce ${NONCE} without it; it can never land now: send it again`,
        );
      } finally {
        // Whatever was held again is refused now: its nonce is no longer the account's.
        node.landHeld();
      }
      expect(node.balance(RECIPIENT)).toBe(before);
    });

    it("past the rebroadcast limit it is followed while its nonce holds, and INCLUDED when it lands (advancing the nonce itself)", async () => {
      const nonceAccount = "46gMhWRdcsMKyaNtJuu8EPB23BP5WbvZFH9ZcpSP4ndh";
      const payer = await solanaAccount(sdk, "nonce holds", SOL);
      node.setNonce(nonceAccount, payer, NONCE);
      node.hold();
      let id: string;
      try {
        const sent = sendCount();
        ({ sendTransactionStatusId: id } = await send(
          sdk,
          durableNonceTransfers(payer, nonceAccount, payer, NONCE, [{ from: payer, to: RECIPIENT, lamports: 3_400_000n }]),
          [payer],
        ));
        await statusReaches(id, "BROADCASTING");
        while (sendCount() < sent + MAX_BROADCASTS) await new Promise((resolve) => setTimeout(resolve, 20));
        await nonceReads(3);
        expect((await sdk.getSendTransactionStatus({ sendTransactionStatusId: id })).txStatus).toBe("BROADCASTING");
        expect(sendCount()).toBe(sent + MAX_BROADCASTS);
      } finally {
        node.landHeld();
      }
      expect((await finalStatus(sdk, id)).txStatus).toBe("INCLUDED");
      expect(node.nonceOf(nonceAccount)).not.toBe(NONCE);
    });
  });
});

describe("bad input: a clear error, nothing signed, nothing broadcast", () => {
  const cases: [string, () => [string, string[], Record<string, unknown>], string | (() => string), string][] = [
    [
      "a caip2 with no node",
      () => [transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1_000_000n }]), [sender], { caip2: "solana:mainnet" }],
      "caip2 solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp has no node on this server",
      "CHAIN_NOT_CONFIGURED",
    ],
    [
      "a signWith that is not the organization's",
      () => [transfers(RECIPIENT, [{ from: RECIPIENT, to: sender, lamports: 1_000_000n }]), [RECIPIENT], {}],
      `signWiths[0] ${RECIPIENT} is not the address of a wallet account or private key of this organization`,
      "SIGNER_NOT_FOUND",
    ],
    [
      "no signWiths",
      () => [transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1n }]), [], {}],
      "signWiths must hold between 1 and 16 addresses, got 0",
      "REQUEST_INVALID",
    ],
    [
      "17 signWiths",
      () => [transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1n }]), Array(17).fill(sender), {}],
      "signWiths must hold between 1 and 16 addresses, got 17",
      "REQUEST_INVALID",
    ],
    [
      "a signWith named twice",
      () => [transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1n }]), [sender, sender], {}],
      () => `signWiths names ${sender} twice`,
      "REQUEST_INVALID",
    ],
    [
      "a transaction that is not hex",
      () => ["not hex", [sender], {}],
      "unsignedTransaction: unsignedTransaction must be the hex",
      "REQUEST_INVALID",
    ],
    [
      "a malformed transaction",
      () => ["01ff00", [sender], {}],
      "unsignedTransaction: unsignedTransaction is not a Solana transaction",
      "REQUEST_INVALID",
    ],
    [
      "sponsor true",
      () => [transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1_000_000n }]), [sender], { sponsor: true }],
      "this server has no sponsor",
      "GAS_STATION_NOT_OFFERED",
    ],
    [
      "a signer the transaction needs but signWiths does not list",
      () => [transfers(sender, [{ from: second, to: RECIPIENT, lamports: 1_000_000n }]), [sender], {}],
      () => `the transaction needs the signatures of ${second}, which signWiths does not list`,
      "REQUEST_INVALID",
    ],
    [
      "a signWith the transaction asks no signature of",
      () => [transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1_000_000n }]), [sender, second], {}],
      () => `the transaction asks no signature of ${second}`,
      "REQUEST_INVALID",
    ],
    [
      "a recentBlockhash that is not one",
      () => [transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1_000_000n }]), [sender], { recentBlockhash: "0xabc" }],
      "recentBlockhash must be a blockhash: 32 bytes in base58",
      "REQUEST_INVALID",
    ],
  ];
  for (const [label, input, message, code] of cases) {
    it(`${label}: ${code}`, async () => {
      const [unsigned, signWiths, extra] = input();
      const balances = [node.balance(sender), node.balance(second)];
      const sent = node.calls.filter((m) => m === "sendTransaction").length;
      const { failure } = await refusedLeavingOnlyItsActivity(h, () => send(sdk, unsigned, signWiths, extra), {
        message: expect.stringContaining(typeof message === "function" ? message() : message),
      });
      expect(failure.details[0].turnkeyErrorCode).toBe(code);
      expect([node.balance(sender), node.balance(second)]).toEqual(balances);
      expect(node.calls.filter((m) => m === "sendTransaction").length).toBe(sent);
    });
  }

  it("an Ethereum address of the organization: REQUEST_INVALID (Solana signs with ed25519 keys)", async () => {
    const { addresses } = await sdk.createWallet({ walletName: "evm", accounts: DEFAULT_ETHEREUM_ACCOUNTS });
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => send(sdk, transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1n }]), [addresses[0]!]),
      { message: expect.stringContaining("Solana transactions are signed with ed25519 keys") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("REQUEST_INVALID");
  });

  it("a private key id instead of its address: REQUEST_INVALID", async () => {
    const { privateKeys } = await sdk.createPrivateKeys({
      privateKeys: [{ privateKeyName: "sol key", curve: "CURVE_ED25519", addressFormats: ["ADDRESS_FORMAT_SOLANA"], privateKeyTags: [] }],
    });
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => send(sdk, transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1n }]), [privateKeys[0]!.privateKeyId!]),
      { message: expect.stringContaining("private key ids are not accepted") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("REQUEST_INVALID");
  });

  it("a caip2 neither the API's nor configured: CHAIN_NOT_CONFIGURED before anything is recorded", async () => {
    const before = await h.snapshot();
    await expect(
      send(sdk, transfers(sender, [{ from: sender, to: RECIPIENT, lamports: 1n }]), [sender], { caip2: "solana:localnet" }),
    ).rejects.toMatchObject({
      message: expect.stringContaining("caip2 solana:localnet has no node on this server"),
      details: [expect.objectContaining({ turnkeyErrorCode: "CHAIN_NOT_CONFIGURED" })],
    });
    expect(await h.snapshot()).toBe(before);
  });

  it("a node listed under a cluster it does not serve: CHAIN_NODE_UNAVAILABLE", async () => {
    const wrong = await startHarness({ SIGIL_CHAIN_RPC_URLS: `solana:mainnet=${node.url}` });
    try {
      const team = await wrong.organization();
      const client = wrong.sdk(team, team.key);
      const from = await solanaAccount(client, "wrong cluster", SOL);
      const { failure } = await refusedLeavingOnlyItsActivity(
        wrong,
        () =>
          client.solSendTransaction({
            unsignedTransaction: transfers(from, [{ from, to: RECIPIENT, lamports: 1_000_000n }]),
            signWiths: [from],
            caip2: "solana:mainnet",
          }),
        { message: expect.stringContaining("serves the cluster with genesis hash EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG") },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("CHAIN_NODE_UNAVAILABLE");
    } finally {
      await wrong.close();
    }
  });
});

describe("policies judge the transaction as sign_transaction's are judged, for every signing key", () => {
  it("a policy denying the transfer refuses the send and nothing is broadcast; what it allows is sent", async () => {
    const { org: team, root, members } = await organizationWith(h, ["alice"]);
    const from = await solanaAccount(root, "team", SOL);
    const allowed = "DWQx5Whvo7oF7EUiMUiisor575mxw8qibWicfVi7QojK";
    await root.createPolicies({
      policies: [
        {
          policyName: "sign",
          effect: "EFFECT_ALLOW",
          condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'",
          consensus: `approvers.any(user, user.id == '${members.alice!.userId}')`,
          notes: "",
        },
        { policyName: "not there", effect: "EFFECT_DENY", condition: `solana.tx.transfers.any(t, t.to == '${RECIPIENT}')`, notes: "" },
      ],
    });
    const alice = members.alice!.client;
    const before = node.balance(from);
    const sent = node.calls.filter((m) => m === "sendTransaction").length;
    const attempt = () =>
      alice.solSendTransaction({
        organizationId: team.organizationId,
        unsignedTransaction: transfers(from, [{ from, to: RECIPIENT, lamports: 1_000_000n }]),
        signWiths: [from],
        caip2: node.caip2 as Caip2,
      });
    const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, { message: expect.stringContaining("denied") });
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    expect(node.balance(from)).toBe(before);
    expect(node.calls.filter((m) => m === "sendTransaction").length).toBe(sent);
    const ok = await alice.solSendTransaction({
      organizationId: team.organizationId,
      unsignedTransaction: transfers(from, [{ from, to: allowed, lamports: 1_000_000n }]),
      signWiths: [from],
      caip2: node.caip2 as Caip2,
    });
    expect((await finalStatus(alice, ok.sendTransactionStatusId, team.organizationId)).txStatus).toBe("INCLUDED");
  });

  it("with two signers each key is judged: a policy denying one key refuses the send although the other is allowed", async () => {
    const { org: team, root, members } = await organizationWith(h, ["bob"]);
    const payer = await solanaAccount(root, "payer", SOL);
    const guarded = await solanaAccount(root, "guarded", SOL);
    await root.createPolicies({
      policies: [
        {
          policyName: "sign",
          effect: "EFFECT_ALLOW",
          condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'",
          consensus: `approvers.any(user, user.id == '${members.bob!.userId}')`,
          notes: "",
        },
        { policyName: "guarded key", effect: "EFFECT_DENY", condition: `wallet_account.address == '${guarded}'`, notes: "" },
      ],
    });
    const bob = members.bob!.client;
    const balances = [node.balance(payer), node.balance(guarded)];
    const unsigned = transfers(payer, [
      { from: payer, to: RECIPIENT, lamports: 1_000_000n },
      { from: guarded, to: RECIPIENT, lamports: 1_000_000n },
    ]);
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () =>
        bob.solSendTransaction({
          organizationId: team.organizationId,
          unsignedTransaction: unsigned,
          signWiths: [payer, guarded],
          caip2: node.caip2 as Caip2,
        }),
      { message: expect.stringContaining("explicitly denied") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    expect([node.balance(payer), node.balance(guarded)]).toEqual(balances);
    // The payer alone is allowed.
    const ok = await bob.solSendTransaction({
      organizationId: team.organizationId,
      unsignedTransaction: transfers(payer, [{ from: payer, to: RECIPIENT, lamports: 1_000_000n }]),
      signWiths: [payer],
      caip2: node.caip2 as Caip2,
    });
    expect((await finalStatus(bob, ok.sendTransactionStatusId, team.organizationId)).txStatus).toBe("INCLUDED");
  });
});

describe("the keys of one send share one evaluation budget", () => {
  // Costly but legal: two nested predicates over a 150-item list, about 136 000 of the 250 000 steps.
  const items = `[${Array.from({ length: 150 }, (_, i) => i).join(", ")}]`;
  const costly = `activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN' && ${items}.all(x, ${items}.all(y, x >= 0))`;

  it("the policy fits the budget once but not twice", () => {
    const budget = newBudget();
    const once = evaluatePolicies(
      [{ id: "costly", effect: "EFFECT_ALLOW", condition: costly, consensus: null, time: null }],
      { condition: { activity: { resource: "PRIVATE_KEY", action: "SIGN" } }, approvers: [], credentials: [], nowMs: 0 },
      budget,
    );
    expect(once).toMatchObject({ outcome: "OUTCOME_ALLOW", budgetExceeded: false });
    const cost = STEP_BUDGET - budget.steps;
    expect(cost).toBeLessThan(STEP_BUDGET);
    expect(2 * cost).toBeGreaterThan(STEP_BUDGET);
  });

  it("one signer is allowed; two signers exceed the one decision's budget and are refused, nothing signed", async () => {
    const { org: team, root, members } = await organizationWith(h, ["carol"]);
    const payer = await solanaAccount(root, "payer", SOL);
    const other = await solanaAccount(root, "other", SOL);
    await root.createPolicies({
      policies: [
        {
          policyName: "costly sign",
          effect: "EFFECT_ALLOW",
          condition: costly,
          consensus: `approvers.any(user, user.id == '${members.carol!.userId}')`,
          notes: "",
        },
      ],
    });
    const carol = members.carol!.client;
    const ok = await carol.solSendTransaction({
      organizationId: team.organizationId,
      unsignedTransaction: transfers(payer, [{ from: payer, to: RECIPIENT, lamports: 1_000_000n }]),
      signWiths: [payer],
      caip2: node.caip2 as Caip2,
    });
    expect((await finalStatus(carol, ok.sendTransactionStatusId, team.organizationId)).txStatus).toBe("INCLUDED");

    const balances = [node.balance(payer), node.balance(other)];
    const sent = node.calls.filter((m) => m === "sendTransaction").length;
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () =>
        carol.solSendTransaction({
          organizationId: team.organizationId,
          unsignedTransaction: transfers(payer, [
            { from: payer, to: RECIPIENT, lamports: 1_000_000n },
            { from: other, to: RECIPIENT, lamports: 1_000_000n },
          ]),
          signWiths: [payer, other],
          caip2: node.caip2 as Caip2,
        }),
      { message: expect.stringContaining(`exceeded the budget of one decision (${STEP_BUDGET} steps)`) },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    expect(failure.message).toContain("OUTCOME_DENY_IMPLICIT");
    expect([node.balance(payer), node.balance(other)]).toEqual(balances);
    expect(node.calls.filter((m) => m === "sendTransaction").length).toBe(sent);
  });
});

describe("balances, supported assets and history on Solana", () => {
  const sol = (caip2: string) => ({ caip19: `${caip2}/slip44:501`, symbol: "SOL", name: "Solana", decimals: 9 });

  it("lists SOL and the SPL token SIGIL_CHAIN_ASSETS names (the alias read as the cluster)", async () => {
    const { assets } = await sdk.listSupportedAssets({ caip2: "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1" });
    expect(assets).toEqual([
      { ...sol(node.caip2), stable: false },
      { caip19: `${node.caip2}/token:${MINT}`, symbol: "TST", name: "Test SPL token", decimals: 6, stable: false },
    ]);
  });

  it("answers the SOL balance from getBalance and the token's from the owner's token accounts; only non-zero ones", async () => {
    const holder = await solanaAccount(sdk, "token holder", (3n * SOL) / 2n);
    const ask = () => sdk.getWalletAddressBalances({ address: holder, caip2: node.caip2 as Caip2 });
    expect((await ask()).balances).toEqual([{ ...sol(node.caip2), balance: "1500000000", display: { crypto: "1.5" } }]);
    tokenAccount(holder, 2_500_000n);
    expect((await ask()).balances).toEqual([
      { ...sol(node.caip2), balance: "1500000000", display: { crypto: "1.5" } },
      {
        caip19: `${node.caip2}/token:${MINT}`,
        symbol: "TST",
        name: "Test SPL token",
        decimals: 6,
        balance: "2500000",
        display: { crypto: "2.5" },
      },
    ]);
    const empty = await solanaAccount(sdk, "empty", 0n);
    expect((await sdk.getWalletAddressBalances({ address: empty, caip2: node.caip2 as Caip2 })).balances).toEqual([]);
  });

  it("lists what Sigil sent with the account as fee payer, newest first, with slot, fee, signers and SOL transfers", async () => {
    const { transactions, pageInfo } = await sdk.listSolTransactionHistory({ address: sender, caip2: "solana:devnet" });
    // Five landed earlier in this file (one of them with two signers); the failed one is not listed.
    expect(transactions).toHaveLength(5);
    expect(pageInfo).toMatchObject({ hasNextPage: false, hasPreviousPage: false });
    for (const item of transactions) {
      const landed = node.landed(item.signature)!;
      expect(item).toMatchObject({
        block: {
          number: String(landed.slot),
          hash: landed.blockhash,
          timestamp: new Date(landed.blockTime * 1000).toISOString().replace(".000Z", "Z"),
        },
        status: "FINALIZED",
        origin: "TURNKEY",
        feePayer: sender,
        fee: { amount: String(landed.fee), caip19: `${node.caip2}/slip44:501` },
        turnkey: { sponsored: false, activityFingerprint: expect.stringMatching(/^[0-9a-f]{64}$/) },
      });
    }
    const [afterOutage, firstVersion, twoSigners, alias, first] = transactions;
    expect(afterOutage!.transfers).toEqual([expect.objectContaining({ amount: "4000000" })]);
    expect(firstVersion!.transfers).toEqual([expect.objectContaining({ amount: "2000000" })]);
    expect(twoSigners!.signers).toEqual([
      { address: sender, writable: true },
      { address: second, writable: true },
    ]);
    // Only the queried address's own transfers: the second signer's is not the sender's.
    expect(twoSigners!.transfers).toEqual([
      { direction: "OUT", asset: sol(node.caip2), amount: "3000000", counterparty: RECIPIENT, display: { crypto: "0.003" } },
    ]);
    expect(alias!.transfers).toEqual([expect.objectContaining({ amount: "10000000" })]);
    expect(first!.transfers).toEqual([expect.objectContaining({ amount: "100000000", display: { crypto: "0.1" } })]);
    expect(first!.signers).toEqual([{ address: sender, writable: true }]);
    // Pages of one.
    const page = await sdk.listSolTransactionHistory({
      address: sender,
      caip2: "solana:devnet",
      paginationOptions: { limit: "1", after: pageInfo!.startCursor! },
    });
    expect(page.transactions.map((t) => t.signature)).toEqual([firstVersion!.signature]);
    expect(page.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: true });
  });

  it("lists nothing under a signer that did not pay the fee", async () => {
    expect((await sdk.listSolTransactionHistory({ address: second, caip2: "solana:devnet" })).transactions).toEqual([]);
  });

  it("refuses an Ethereum account, a cluster with no node and a private key's address, recording nothing", async () => {
    const { addresses } = await sdk.createWallet({ walletName: "evm for sol", accounts: DEFAULT_ETHEREUM_ACCOUNTS });
    const { privateKeys } = await sdk.createPrivateKeys({
      privateKeys: [{ privateKeyName: "sol pk", curve: "CURVE_ED25519", addressFormats: ["ADDRESS_FORMAT_SOLANA"], privateKeyTags: [] }],
    });
    const cases: [() => Promise<unknown>, string, string][] = [
      [
        () => sdk.getWalletAddressBalances({ address: addresses[0]!, caip2: node.caip2 as Caip2 }),
        "is an ADDRESS_FORMAT_ETHEREUM account; solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1 takes an ADDRESS_FORMAT_SOLANA account's address",
        "REQUEST_INVALID",
      ],
      [
        () => sdk.listSolTransactionHistory({ address: sender, caip2: "solana:mainnet" }),
        "caip2 solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp has no node",
        "CHAIN_NOT_CONFIGURED",
      ],
      [
        () => sdk.getWalletAddressBalances({ address: privateKeys[0]!.addresses![0]!.address!, caip2: node.caip2 as Caip2 }),
        "private key addresses are not supported",
        "REQUEST_INVALID",
      ],
    ];
    for (const [ask, message, code] of cases) {
      const before = await h.snapshot();
      await expect(ask()).rejects.toMatchObject({
        message: expect.stringContaining(message),
        details: [expect.objectContaining({ turnkeyErrorCode: code })],
      });
      expect(await h.snapshot()).toBe(before);
    }
  });
});
