// eth_send_transaction, eth_send_raw_transaction, get_send_transaction_status and get_nonces against a
// real Ethereum node (Hardhat Network, test/helpers/ethereum-node.ts), through the official clients:
// value and contract calls mined, reverts reported with their reasons, concurrent sends with distinct
// nonces, tracking that survives a restart, dropped and replaced transactions, and bad input refused
// with nothing signed and nothing broadcast.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pino from "pino";
import { encodeFunctionData, keccak256, maxUint256, parseEther, serializeTransaction, toFunctionSelector, type Abi, type Hex } from "viem";
import { DEFAULT_ETHEREUM_ACCOUNTS, Turnkey } from "@turnkey/sdk-server";
import { createAccount } from "@turnkey/viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { startServer, type RunningServer } from "../src/http/server.js";
import { decodeRevert } from "../src/chains/ethereum-reverts.js";
import { MAX_BROADCASTS } from "../src/services/chain-broadcaster.js";
import { startHarness, refusedLeavingOnlyItsActivity, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";
import { startEthereumNode, type EthereumNode } from "./helpers/ethereum-node.js";
import { backend } from "./helpers/backend.js";
import counter from "./fixtures/counter.json" with { type: "json" };

const abi = counter.abi as Abi;
const bytecode = counter.bytecode as Hex;
const call = (functionName: string, args: unknown[] = []) => encodeFunctionData({ abi, functionName, args });

type Sdk = ReturnType<Harness["sdk"]>;

/** @turnkey/sdk-server's client of another server on the same database. */
const sdkAt = (url: string, { organizationId, key }: TestOrganization): Sdk =>
  new Turnkey({
    apiBaseUrl: url,
    apiPublicKey: key.publicKey,
    apiPrivateKey: key.privateKey,
    defaultOrganizationId: organizationId,
  }).apiClient();

let node: EthereumNode;
let h: Harness;
let org: TestOrganization;
let sdk: Sdk;
let sender: Hex;
let contract: Hex;
const RECIPIENT = "0x00000000000000000000000000000000000000aa" as Hex;

// The node is also listed under Base's chain id, which it does not serve: sends there must be refused.
const chainEnv = () => ({
  SIGIL_CHAIN_RPC_URLS: `${node.caip2}=${node.url},eip155:8453=${node.url}`,
  SIGIL_CHAIN_POLL_MS: "20",
  SIGIL_CHAIN_TIMEOUT_MS: "5000",
  // A send whose nonce is ahead of the chain's is FAILED this long after it was made (no earlier nonce came).
  SIGIL_CHAIN_NONCE_WAIT_MS: "300",
});

async function fundedAccount(client: Sdk, name: string): Promise<Hex> {
  const { addresses } = await client.createWallet({ walletName: name, accounts: DEFAULT_ETHEREUM_ACCOUNTS });
  const address = addresses[0] as Hex;
  await node.fund(address, parseEther("100"));
  return address;
}

/** The send's status once it is final (INCLUDED or FAILED), asked the way a client polls it. */
async function finalStatus(client: Sdk, sendTransactionStatusId: string, organizationId = org.organizationId) {
  for (;;) {
    const status = await client.getSendTransactionStatus({ organizationId, sendTransactionStatusId });
    if (status.txStatus === "INCLUDED" || status.txStatus === "FAILED") return status;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function statusReaches(client: Sdk, sendTransactionStatusId: string, wanted: string) {
  for (;;) {
    const status = await client.getSendTransactionStatus({ organizationId: org.organizationId, sendTransactionStatusId });
    if (status.txStatus === wanted) return status;
    if (status.txStatus === "FAILED" || status.txStatus === "INCLUDED") throw new Error(`reached ${status.txStatus}, not ${wanted}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The send as the broadcaster keeps it. */
const sentRow = (id: string) =>
  h.server.store.db.selectFrom("sent_transactions").selectAll().where("id", "=", id).executeTakeFirstOrThrow();

const send = (client: Sdk, from: Hex, calls: { to: string; value?: string; data?: string }[], extra: Record<string, unknown> = {}) =>
  client.ethSendTransaction({ from, caip2: node.caip2 as "eip155:11155111", calls, ...extra });

/** What the node says of an address: nothing may change when a request is refused. */
const chainState = async (address: Hex) => ({
  nonce: await node.client.getTransactionCount({ address, blockTag: "pending" }),
  balance: await node.client.getBalance({ address }),
  // cacheTime 0: viem otherwise answers a block number up to its polling interval old.
  block: await node.client.getBlockNumber({ cacheTime: 0 }),
});

beforeAll(async () => {
  node = await startEthereumNode();
  h = await startHarness(chainEnv());
  org = await h.organization();
  sdk = h.sdk(org, org.key);
  sender = await fundedAccount(sdk, "sender");
  contract = await node.deploy(abi, bytecode);
});
afterAll(async () => {
  await h?.close();
  await node?.stop();
});

describe("eth_send_transaction through @turnkey/sdk-server", () => {
  it("sends value from a wallet account: signed, broadcast and INCLUDED, with its hash", async () => {
    const before = await node.client.getBalance({ address: RECIPIENT });
    const nonce = await node.client.getTransactionCount({ address: sender });
    const { sendTransactionStatusId, activity } = await send(sdk, sender, [{ to: RECIPIENT, value: "1234567" }]);
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    // The SDK's own poller, as the product's docs show it.
    const status = await sdk.pollTransactionStatus({ sendTransactionStatusId, pollingIntervalMs: 20, timeoutMs: 20_000 });
    expect(status.txStatus).toBe("INCLUDED");
    const hash = status.eth!.txHash as Hex;
    const receipt = await node.client.getTransactionReceipt({ hash });
    expect(receipt.status).toBe("success");
    expect(receipt.from).toBe(sender.toLowerCase());
    const mined = await node.client.getTransaction({ hash });
    expect(mined).toMatchObject({ type: "eip1559", nonce, value: 1234567n, chainId: node.chainId });
    expect(await node.client.getBalance({ address: RECIPIENT })).toBe(before + 1234567n);
    // The activity records the intent as sent.
    const recorded = await sdk.getActivity({ activityId: activity.id });
    expect(recorded.activity.type).toBe("ACTIVITY_TYPE_ETH_SEND_TRANSACTION_V2");
    expect(recorded.activity.intent.ethSendTransactionIntentV2).toMatchObject({
      from: sender,
      calls: [{ to: RECIPIENT, value: "1234567" }],
    });
    expect(recorded.activity.result.ethSendTransactionResultV2).toEqual({ sendTransactionStatusId });
  });

  it("calls a contract, with the nonce, gas and fees the request names", async () => {
    const nonce = await node.client.getTransactionCount({ address: sender });
    const { sendTransactionStatusId } = await send(sdk, sender, [{ to: contract, data: call("increment", [5n]) }], {
      nonce: String(nonce),
      gasLimit: "90000",
      maxFeePerGas: "3000000000",
      maxPriorityFeePerGas: "1000000000",
    });
    const status = await finalStatus(sdk, sendTransactionStatusId);
    expect(status).toMatchObject({ txStatus: "INCLUDED" });
    expect(status.error).toBeUndefined();
    const mined = await node.client.getTransaction({ hash: status.eth!.txHash as Hex });
    expect(mined).toMatchObject({ nonce, gas: 90_000n, maxFeePerGas: 3_000_000_000n, maxPriorityFeePerGas: 1_000_000_000n });
    expect(await node.client.readContract({ address: contract, abi, functionName: "count" })).toBe(5n);
  });

  it("get_nonces answers the nonce the next send takes; a gas station nonce is not offered", async () => {
    const { nonce } = await sdk.getNonces({ address: sender, caip2: node.caip2 as "eip155:11155111", nonce: true });
    expect(nonce).toBe(String(await node.client.getTransactionCount({ address: sender, blockTag: "pending" })));
    await expect(
      sdk.getNonces({ address: sender, caip2: node.caip2 as "eip155:11155111", nonce: true, gasStationNonce: true }),
    ).rejects.toMatchObject({ message: expect.stringContaining("Gas Station") });
  });
});

describe("reverts are reported with their reasons", () => {
  it("a call whose simulation reverts with Error(string) is FAILED with the reason; nothing is signed or sent", async () => {
    const before = await chainState(sender);
    const { sendTransactionStatusId } = await send(sdk, sender, [{ to: contract, data: call("fail", ["not today"]) }]);
    const status = await finalStatus(sdk, sendTransactionStatusId);
    const entry = {
      address: contract.toLowerCase(),
      errorType: "native",
      displayMessage: "not today",
      native: { nativeType: "error_string", message: "not today" },
    };
    expect(status).toMatchObject({
      txStatus: "FAILED",
      txError: "execution reverted in simulation: not today",
      error: { message: "execution reverted in simulation: not today", revertChain: [entry], eth: { revertChain: [entry] } },
    });
    expect(status.eth).toBeUndefined();
    expect(await chainState(sender)).toEqual(before);
    // The SDK's poller rejects a FAILED send with its message.
    await expect(sdk.pollTransactionStatus({ sendTransactionStatusId, pollingIntervalMs: 20 })).rejects.toMatchObject({
      message: "execution reverted in simulation: not today",
    });
  });

  it("a transaction that reverts on chain is INCLUDED with its hash and the decoded Error(string)", async () => {
    const { sendTransactionStatusId } = await send(sdk, sender, [{ to: contract, data: call("fail", ["on chain"]) }], {
      gasLimit: "100000",
    });
    const status = await finalStatus(sdk, sendTransactionStatusId);
    expect(status.txStatus).toBe("INCLUDED");
    const receipt = await node.client.getTransactionReceipt({ hash: status.eth!.txHash as Hex });
    expect(receipt.status).toBe("reverted");
    expect(status.error!.eth!.revertChain).toEqual([
      {
        address: contract.toLowerCase(),
        errorType: "native",
        displayMessage: "on chain",
        native: { nativeType: "error_string", message: "on chain" },
      },
    ]);
    expect(status.txError).toBe("execution reverted on chain: on chain");
  });

  it("an arithmetic overflow on chain is reported as Panic(0x11)", async () => {
    // The counter must hold something for the increment below to overflow it.
    await finalStatus(sdk, (await send(sdk, sender, [{ to: contract, data: call("increment", [1n]) }])).sendTransactionStatusId);
    const { sendTransactionStatusId } = await send(sdk, sender, [{ to: contract, data: call("increment", [maxUint256]) }], {
      gasLimit: "100000",
    });
    const status = await finalStatus(sdk, sendTransactionStatusId);
    expect(status.txStatus).toBe("INCLUDED");
    expect(status.error!.revertChain![0]).toMatchObject({
      errorType: "native",
      native: { nativeType: "panic", panicCode: "17" },
      displayMessage: expect.stringMatching(/^panic 0x11: Arithmetic operation resulted in underflow or overflow/),
    });
  });

  it("a custom error is unknown without the contract's ABI, named with it; a bare revert says so", async () => {
    const { sendTransactionStatusId } = await send(sdk, sender, [{ to: contract, data: call("limited", [11n]) }]);
    const status = await finalStatus(sdk, sendTransactionStatusId);
    const selector = toFunctionSelector("TooLarge(uint256,uint256)");
    expect(status.txStatus).toBe("FAILED");
    expect(status.error!.revertChain![0]).toMatchObject({ errorType: "unknown", unknown: { selector } });
    const data = status.error!.revertChain![0]!.unknown!.data as Hex;
    const named = {
      errorType: "custom",
      displayMessage: "TooLarge(11, 10)",
      custom: { errorName: "TooLarge", paramsJson: JSON.stringify({ asked: "11", limit: "10" }) },
    };
    expect(decodeRevert(data, contract, abi)).toMatchObject(named);
    // Once the organization uploads the contract's ABI (a smart contract interface), the send names it.
    const { smartContractInterfaceId } = await sdk.createSmartContractInterface({
      type: "SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM",
      smartContractAddress: contract,
      smartContractInterface: JSON.stringify(abi),
      label: "Counter",
    } as Parameters<Sdk["createSmartContractInterface"]>[0]);
    try {
      const again = await finalStatus(
        sdk,
        (await send(sdk, sender, [{ to: contract, data: call("limited", [12n]) }])).sendTransactionStatusId,
      );
      expect(again.txStatus).toBe("FAILED");
      expect(again.error!.revertChain![0]).toMatchObject({
        ...named,
        displayMessage: "TooLarge(12, 10)",
        custom: { errorName: "TooLarge", paramsJson: JSON.stringify({ asked: "12", limit: "10" }) },
      });
    } finally {
      await sdk.deleteSmartContractInterface({ smartContractInterfaceId });
    }
    const bare = await finalStatus(sdk, (await send(sdk, sender, [{ to: contract, data: call("bare") }])).sendTransactionStatusId);
    expect(bare.error!.revertChain![0]).toMatchObject({ errorType: "native", native: { nativeType: "execution_reverted" } });
  });
});

describe("nonces", () => {
  it("20 concurrent sends from one address get distinct, gap-free nonces and all mine", async () => {
    const first = await node.client.getTransactionCount({ address: sender, blockTag: "pending" });
    const ids = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        send(sdk, sender, [{ to: RECIPIENT, value: String(i + 1) }]).then((r) => r.sendTransactionStatusId),
      ),
    );
    const statuses = await Promise.all(ids.map((id) => finalStatus(sdk, id)));
    expect(statuses.map((s) => s.txStatus)).toEqual(Array(20).fill("INCLUDED"));
    const nonces = await Promise.all(statuses.map(async (s) => (await node.client.getTransaction({ hash: s.eth!.txHash as Hex })).nonce));
    expect([...nonces].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => first + i));
  });

  it("a transaction dropped by the node is sent again and mined", async () => {
    await node.test.setAutomine(false);
    try {
      const { sendTransactionStatusId } = await send(sdk, sender, [{ to: RECIPIENT, value: "7" }]);
      const { eth } = await statusReaches(sdk, sendTransactionStatusId, "BROADCASTING");
      const hash = eth!.txHash as Hex;
      await node.test.dropTransaction({ hash });
      // The broadcaster finds the node no longer knows it, and hands it over again.
      while (!(await node.client.request({ method: "eth_getTransactionByHash", params: [hash] })))
        await new Promise((r) => setTimeout(r, 20));
      await node.test.mine({ blocks: 1 });
      expect(await finalStatus(sdk, sendTransactionStatusId)).toMatchObject({ txStatus: "INCLUDED", eth: { txHash: hash } });
      expect(h.logLines.some((line) => line.includes(sendTransactionStatusId) && line.includes("transaction sent again"))).toBe(true);
    } finally {
      await node.test.setAutomine(true);
    }
  });

  it("a transaction whose nonce another transaction used is FAILED (replaced); the next send takes the next nonce", async () => {
    await node.test.setAutomine(false);
    let replaced: string;
    let nonce: number;
    try {
      nonce = await node.client.getTransactionCount({ address: sender, blockTag: "pending" });
      ({ sendTransactionStatusId: replaced } = await send(sdk, sender, [{ to: RECIPIENT, value: "8" }]));
      await statusReaches(sdk, replaced, "BROADCASTING");
      // Another transaction with the same nonce and higher fees, signed with the same key (sign_transaction
      // through @turnkey/viem) and sent to the node directly: it replaces the first in the node's pool.
      const account = await createAccount({ client: sdk, organizationId: org.organizationId, signWith: sender });
      const replacement = await account.signTransaction({
        type: "eip1559",
        chainId: node.chainId,
        nonce,
        to: RECIPIENT,
        value: 9n,
        gas: 21_000n,
        maxFeePerGas: parseEther("0.0001"),
        maxPriorityFeePerGas: parseEther("0.00005"),
      });
      await node.client.request({ method: "eth_sendRawTransaction", params: [replacement] });
      await node.test.mine({ blocks: 1 });
    } finally {
      await node.test.setAutomine(true);
    }
    const status = await finalStatus(sdk, replaced);
    expect(status.txStatus).toBe("FAILED");
    expect(status.txError).toMatch(new RegExp(`^nonce ${nonce} of ${sender} was used by another transaction \\(replaced\\)`));
    const next = await finalStatus(sdk, (await send(sdk, sender, [{ to: RECIPIENT, value: "10" }])).sendTransactionStatusId);
    expect((await node.client.getTransaction({ hash: next.eth!.txHash as Hex })).nonce).toBe(nonce + 1);
  });

  it("dropped past the rebroadcast limit it is followed, not FAILED: mined later from another pool it is INCLUDED", async () => {
    await node.test.setAutomine(false);
    try {
      const { sendTransactionStatusId: id } = await send(sdk, sender, [{ to: RECIPIENT, value: "13" }]);
      const hash = (await statusReaches(sdk, id, "BROADCASTING")).eth!.txHash as Hex;
      // The node drops it each time it is handed over, until Sigil stops handing it over.
      for (;;) {
        const row = await sentRow(id);
        if (await node.client.request({ method: "eth_getTransactionByHash", params: [hash] })) await node.test.dropTransaction({ hash });
        else if (row.broadcasts >= MAX_BROADCASTS) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      // Three more looks find it unknown to the node, its nonce not used: still BROADCASTING, not sent again.
      while ((await sentRow(id)).attempts < 3) await new Promise((r) => setTimeout(r, 20));
      expect(await sentRow(id)).toMatchObject({ status: "BROADCASTING", broadcasts: MAX_BROADCASTS });
      expect(await node.client.request({ method: "eth_getTransactionByHash", params: [hash] })).toBeNull();
      // Another node's pool still had it and mines it.
      await node.client.request({ method: "eth_sendRawTransaction", params: [(await sentRow(id)).signed_transaction as Hex] });
      await node.test.mine({ blocks: 1 });
      expect(await finalStatus(sdk, id)).toMatchObject({ txStatus: "INCLUDED", eth: { txHash: hash } });
    } finally {
      await node.test.setAutomine(true);
    }
  });

  it("a rebroadcast the node refuses (fees too low for the moment) is not a verdict: sent again later and mined", async () => {
    await node.test.setAutomine(false);
    let id: string;
    let hash: Hex;
    try {
      ({ sendTransactionStatusId: id } = await send(sdk, sender, [{ to: RECIPIENT, value: "14" }]));
      hash = (await statusReaches(sdk, id, "BROADCASTING")).eth!.txHash as Hex;
      // The node's next block's base fee goes above what the transaction pays and it mines at once again;
      // only then does it drop the transaction, so the broadcaster's next look (which may come at any
      // moment) hands it over to a node that refuses it, never to one still pooling without mining.
      await node.client.request({ method: "hardhat_setNextBlockBaseFeePerGas", params: ["0xe8d4a51000"] } as never);
      await node.test.setAutomine(true);
      await node.test.dropTransaction({ hash });
      const looked = (await sentRow(id)).attempts;
      while ((await sentRow(id)).attempts < looked + 3) await new Promise((r) => setTimeout(r, 20));
      expect(await sentRow(id)).toMatchObject({ status: "BROADCASTING", broadcasts: 1 });
      // Refused, not pooled: the node does not know it.
      expect(await node.client.request({ method: "eth_getTransactionByHash", params: [hash] })).toBeNull();
    } finally {
      await node.client.request({ method: "hardhat_setNextBlockBaseFeePerGas", params: ["0x1"] } as never);
      await node.test.setAutomine(true);
    }
    expect(await finalStatus(sdk, id)).toMatchObject({ txStatus: "INCLUDED", eth: { txHash: hash } });
    expect((await sentRow(id)).broadcasts).toBe(2);
  });

  it("a nonce the request names ahead of the chain's is FAILED after SIGIL_CHAIN_NONCE_WAIT_MS, its nonce given back", async () => {
    const ahead = (await node.client.getTransactionCount({ address: sender, blockTag: "pending" })) + 5;
    const { sendTransactionStatusId: id } = await send(sdk, sender, [{ to: RECIPIENT, value: "15" }], { nonce: String(ahead) });
    const status = await finalStatus(sdk, id);
    expect(status.txStatus).toBe("FAILED");
    expect(status.txError).toMatch(
      new RegExp(
        `^nonce ${ahead} of ${sender} is ahead of the chain's next nonce and no earlier nonce arrived within 300 ms \\(SIGIL_CHAIN_NONCE_WAIT_MS\\); not sent: .*nonce too high`,
        "i",
      ),
    );
    expect(status.eth).toBeUndefined();
  });

  it("a transaction the node refuses gives its nonce back: the next send takes it and mines", async () => {
    const poor = await fundedAccount(sdk, "poor");
    const nonce = await node.client.getTransactionCount({ address: poor, blockTag: "pending" });
    // More than the account holds; with the gas named, nothing is estimated and the node refuses it.
    const refused = await send(sdk, poor, [{ to: RECIPIENT, value: parseEther("1000").toString() }], { gasLimit: "21000" });
    const status = await finalStatus(sdk, refused.sendTransactionStatusId);
    expect(status.txStatus).toBe("FAILED");
    expect(status.txError).toMatch(/^the node refused the transaction: .*(insufficient|funds|balance)/i);
    const next = await finalStatus(sdk, (await send(sdk, poor, [{ to: RECIPIENT, value: "1" }])).sendTransactionStatusId);
    expect(next.txStatus).toBe("INCLUDED");
    expect((await node.client.getTransaction({ hash: next.eth!.txHash as Hex })).nonce).toBe(nonce);
  });
});

describe("eth_send_raw_transaction through @turnkey/http", () => {
  it("hands a transaction signed with @turnkey/viem to the node and answers its hash", async () => {
    const account = await createAccount({ client: sdk, organizationId: org.organizationId, signWith: sender });
    const nonce = await node.client.getTransactionCount({ address: sender, blockTag: "pending" });
    const fees = await node.client.estimateFeesPerGas();
    const signed = await account.signTransaction({
      type: "eip1559",
      chainId: node.chainId,
      nonce,
      to: RECIPIENT,
      value: 11n,
      gas: 21_000n,
      ...fees,
    });
    const response = await h.http(org.key).ethSendRawTransaction({
      type: "ACTIVITY_TYPE_ETH_SEND_RAW_TRANSACTION",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { signedTransaction: signed, caip2: node.caip2 as "eip155:11155111" },
    });
    const hash = keccak256(signed);
    expect(response.activity.result.ethSendRawTransactionResult).toEqual({ transactionHash: hash });
    expect((await node.client.waitForTransactionReceipt({ hash, pollingInterval: 20 })).status).toBe("success");
    // Sent by the chain broadcaster after the activity committed, and followed like Sigil's own sends.
    const followed = () =>
      h.server.store.db.selectFrom("sent_transactions").selectAll().where("tx_hash", "=", hash).executeTakeFirstOrThrow();
    while ((await followed()).status !== "INCLUDED") await new Promise((r) => setTimeout(r, 20));
    expect(await followed()).toMatchObject({ activity_id: response.activity.id, from_address: sender, nonce, broadcasts: 1 });
  });

  it("refuses a malformed transaction and one the node refuses, recording only the failed activity", async () => {
    const raw = (signedTransaction: string) => () =>
      h.http(org.key).ethSendRawTransaction({
        type: "ACTIVITY_TYPE_ETH_SEND_RAW_TRANSACTION",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { signedTransaction, caip2: node.caip2 as "eip155:11155111" },
      });
    const before = await chainState(sender);
    await refusedLeavingOnlyItsActivity(h, raw("0x02f8zz"), {
      message: expect.stringContaining("signedTransaction must be the hex of a signed Ethereum transaction"),
    });
    const unsigned = serializeTransaction({
      type: "eip1559",
      chainId: node.chainId,
      nonce: 0,
      to: RECIPIENT,
      value: 1n,
      gas: 21_000n,
      maxFeePerGas: 1n,
      maxPriorityFeePerGas: 1n,
    });
    await refusedLeavingOnlyItsActivity(h, raw(unsigned), {
      message: expect.stringContaining("signedTransaction carries no signature"),
    });
    // Signed, but with a nonce already used: the node's own words.
    const account = await createAccount({ client: sdk, organizationId: org.organizationId, signWith: sender });
    const fees = await node.client.estimateFeesPerGas();
    const stale = await account.signTransaction({
      type: "eip1559",
      chainId: node.chainId,
      nonce: 0,
      to: RECIPIENT,
      value: 1n,
      gas: 21_000n,
      ...fees,
    });
    const { failure } = await refusedLeavingOnlyItsActivity(h, raw(stale), {
      message: expect.stringMatching(new RegExp(`nonce 0 of ${sender} was already used on ${node.caip2} \\(its next nonce is \\d+\\)`)),
    });
    expect(failure.details[0].turnkeyErrorCode).toBe("NONCE_ALREADY_USED");
    // Signed for another chain than caip2 names.
    const mainnet = await account.signTransaction({
      type: "eip1559",
      chainId: 1,
      nonce: before.nonce,
      to: RECIPIENT,
      value: 1n,
      gas: 21_000n,
      ...fees,
    });
    await refusedLeavingOnlyItsActivity(h, raw(mainnet), {
      message: expect.stringContaining("signedTransaction is signed for chain 1, not eip155:11155111"),
    });
    // Signed for no chain at all (legacy, before EIP-155): valid on every chain, so replayable anywhere.
    const anywhere = await privateKeyToAccount(generatePrivateKey()).signTransaction({
      type: "legacy",
      nonce: 0,
      to: RECIPIENT,
      value: 1n,
      gas: 21_000n,
      gasPrice: fees.maxFeePerGas,
    });
    await refusedLeavingOnlyItsActivity(h, raw(anywhere), {
      message: expect.stringContaining("signedTransaction names no chain id"),
    });
    expect(await chainState(sender)).toEqual(before);
  });
});

describe("bad input: a clear error, nothing signed, nothing broadcast", () => {
  const cases: [string, () => [Hex, { to: string; value?: string; data?: string }[], Record<string, unknown>], string, string][] = [
    [
      "a caip2 with no node",
      () => [sender, [{ to: RECIPIENT, value: "1" }], { caip2: "eip155:1" }],
      "caip2 eip155:1 has no node on this server",
      "CHAIN_NOT_CONFIGURED",
    ],
    [
      "a from that is not the organization's",
      () => [node.funder, [{ to: RECIPIENT, value: "1" }], {}],
      "is not the address of a wallet account or private key of this organization",
      "SIGNER_NOT_FOUND",
    ],
    ["no calls", () => [sender, [], {}], "calls must hold between 1 and 50 entries, got 0", "REQUEST_INVALID"],
    [
      "51 calls",
      () => [sender, Array.from({ length: 51 }, () => ({ to: RECIPIENT, value: "1" })), {}],
      "calls must hold between 1 and 50 entries, got 51",
      "REQUEST_INVALID",
    ],
    [
      "two calls without a sponsor",
      () => [sender, [{ to: RECIPIENT }, { to: RECIPIENT }], {}],
      "EIP-7702 batch through the product's Gas Station",
      "GAS_STATION_NOT_OFFERED",
    ],
    ["an invalid to", () => [sender, [{ to: "0x1234", value: "1" }], {}], "calls[0].to must be an Ethereum address", "REQUEST_INVALID"],
    [
      "a to with a wrong checksum",
      () => [sender, [{ to: "0x00000000000000000000000000000000000000aA", value: "1" }], {}],
      "calls[0].to must be an Ethereum address",
      "REQUEST_INVALID",
    ],
    [
      "sponsor true",
      () => [sender, [{ to: RECIPIENT, value: "1" }], { sponsor: true }],
      "this server has no sponsor",
      "GAS_STATION_NOT_OFFERED",
    ],
    [
      "a value that is not a number",
      () => [sender, [{ to: RECIPIENT, value: "1.5" }], {}],
      "calls[0].value must be a whole number",
      "REQUEST_INVALID",
    ],
    ["odd-length data", () => [sender, [{ to: contract, data: "0xabc" }], {}], "calls[0].data must be hex bytes", "REQUEST_INVALID"],
    [
      "a nonce that is not a number",
      () => [sender, [{ to: RECIPIENT, value: "1" }], { nonce: "-1" }],
      "nonce must be a whole number",
      "REQUEST_INVALID",
    ],
    [
      "a tip above the maximum fee",
      () => [sender, [{ to: RECIPIENT, value: "1" }], { maxFeePerGas: "10", maxPriorityFeePerGas: "11" }],
      "maxPriorityFeePerGas must not exceed maxFeePerGas",
      "REQUEST_INVALID",
    ],
    [
      "a node listed under a chain it does not serve",
      () => [sender, [{ to: RECIPIENT, value: "1" }], { caip2: "eip155:8453" }],
      "the node SIGIL_CHAIN_RPC_URLS lists for eip155:8453 serves chain 11155111, not 8453",
      "CHAIN_NODE_UNAVAILABLE",
    ],
  ];
  for (const [label, input, message, code] of cases) {
    it(`${label}: ${code}`, async () => {
      const [from, calls, extra] = input();
      const before = await chainState(sender);
      const { failure } = await refusedLeavingOnlyItsActivity(h, () => send(sdk, from, calls, extra), {
        message: expect.stringContaining(message),
      });
      expect(failure.details[0].turnkeyErrorCode).toBe(code);
      expect(await chainState(sender)).toEqual(before);
    });
  }

  it("a from that is a private key id, not an address: REQUEST_INVALID", async () => {
    const { privateKeys } = await sdk.createPrivateKeys({
      privateKeys: [{ privateKeyName: "by id", curve: "CURVE_SECP256K1", addressFormats: ["ADDRESS_FORMAT_ETHEREUM"], privateKeyTags: [] }],
    });
    const before = await chainState(sender);
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => send(sdk, privateKeys[0]!.privateKeyId as Hex, [{ to: RECIPIENT, value: "1" }]),
      {
        message: expect.stringContaining("private key ids are not accepted"),
      },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("REQUEST_INVALID");
    expect(await chainState(sender)).toEqual(before);
  });

  it("get_nonces refuses an address that is not one", async () => {
    await expect(sdk.getNonces({ address: "0x12", caip2: node.caip2 as "eip155:11155111", nonce: true })).rejects.toMatchObject({
      message: expect.stringContaining("address must be an Ethereum address"),
    });
  });

  it("a caip2 neither the API's nor configured: CHAIN_NOT_CONFIGURED before anything is recorded", async () => {
    const before = await h.snapshot();
    await expect(send(sdk, sender, [{ to: RECIPIENT, value: "1" }], { caip2: "eip155:31337" })).rejects.toMatchObject({
      message: expect.stringContaining(
        `caip2 eip155:31337 has no node on this server (SIGIL_CHAIN_RPC_URLS; chains with a node: ${node.caip2}, eip155:8453)`,
      ),
      details: [expect.objectContaining({ turnkeyErrorCode: "CHAIN_NOT_CONFIGURED" })],
    });
    expect(await h.snapshot()).toBe(before);
  });

  it("a status id that is not the organization's is not found", async () => {
    await expect(sdk.getSendTransactionStatus({ sendTransactionStatusId: "no-such-send" })).rejects.toMatchObject({
      message: expect.stringContaining("no sent transaction no-such-send"),
    });
  });
});

describe("policies judge the transaction as sign_transaction's are judged", () => {
  it("a user whose policy denies the send is refused and nothing is broadcast; what it allows is sent", async () => {
    const { org: team, root, members } = await organizationWith(h, ["alice"]);
    const from = await fundedAccount(root, "team");
    const allowed = "0x00000000000000000000000000000000000000bb";
    await root.createPolicies({
      policies: [
        {
          policyName: "sign",
          effect: "EFFECT_ALLOW",
          condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'",
          consensus: "approvers.any(user, user.id == '" + members.alice!.userId + "')",
          notes: "",
        },
        { policyName: "not there", effect: "EFFECT_DENY", condition: `eth.tx.to == '${RECIPIENT}' || eth.tx.value > 1000`, notes: "" },
      ],
    });
    const alice = members.alice!.client;
    const before = await chainState(from);
    const attempt = () =>
      alice.ethSendTransaction({
        organizationId: team.organizationId,
        from,
        caip2: node.caip2 as "eip155:11155111",
        calls: [{ to: RECIPIENT, value: "5" }],
      });
    const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, { message: expect.stringContaining("denied") });
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    expect(await chainState(from)).toEqual(before);
    const ok = await alice.ethSendTransaction({
      organizationId: team.organizationId,
      from,
      caip2: node.caip2 as "eip155:11155111",
      calls: [{ to: allowed, value: "5" }],
    });
    expect((await finalStatus(alice, ok.sendTransactionStatusId, team.organizationId)).txStatus).toBe("INCLUDED");
  });
});

describe("a send waiting for approvals", () => {
  it("is listed with the approver's canApprove weighed on its stored transaction; the approval reads the node afresh and sends", async () => {
    const { org: team, root, members } = await organizationWith(h, ["ann", "ben", "cat"]);
    const from = await fundedAccount(root, "approved");
    await root.createPolicies({
      policies: [
        {
          policyName: "small sends, with ben's approval",
          effect: "EFFECT_ALLOW",
          condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN' && eth.tx.value < 1000",
          consensus: `approvers.any(user, user.id == '${members.ben!.userId}')`,
          notes: "",
        },
        {
          policyName: "large sends, with cat's approval",
          effect: "EFFECT_ALLOW",
          condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN' && eth.tx.value >= 1000",
          consensus: `approvers.any(user, user.id == '${members.cat!.userId}')`,
          notes: "",
        },
      ],
    });
    const pending = await members.ann!.client.ethSendTransaction({
      organizationId: team.organizationId,
      from,
      caip2: node.caip2 as "eip155:11155111",
      calls: [{ to: RECIPIENT, value: "17" }],
    });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const nonce = await node.client.getTransactionCount({ address: from, blockTag: "pending" });
    // The policies read eth.tx: the listing weighs them on the transaction the request prepared (stored
    // with the activity), asking no node: ben may approve a 17 wei send, cat may not.
    const seenBy = async (member: string) =>
      (await members[member]!.client.getActivities({ organizationId: team.organizationId })).activities.find(
        (a) => a.id === pending.activity.id,
      );
    expect(await seenBy("ben")).toMatchObject({ canApprove: true, canReject: true });
    expect(await seenBy("cat")).toMatchObject({ canApprove: false, canReject: false });
    expect(
      (await members.ben!.client.getActivity({ organizationId: team.organizationId, activityId: pending.activity.id })).activity,
    ).toMatchObject({ canApprove: true });
    // The approval builds the transaction anew (fees, gas and nonce read when it is approved).
    const approved = await members.ben!.client.approveActivity({
      organizationId: team.organizationId,
      fingerprint: pending.activity.fingerprint,
    });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const result = approved.activity.result as { ethSendTransactionResultV2?: { sendTransactionStatusId: string } };
    const { sendTransactionStatusId } = result.ethSendTransactionResultV2!;
    const status = await finalStatus(root, sendTransactionStatusId, team.organizationId);
    expect(status.txStatus).toBe("INCLUDED");
    expect((await node.client.getTransaction({ hash: status.eth!.txHash as Hex })).nonce).toBe(nonce);
  });
});

describe("durability", () => {
  it("a restart in the middle of tracking still reaches the final status", async () => {
    const restartable = await startHarness(chainEnv());
    let restarted: RunningServer | undefined;
    try {
      const team = await restartable.organization();
      const client = restartable.sdk(team, team.key);
      const from = await fundedAccount(client, "restart");
      await node.test.setAutomine(false);
      let id: string;
      try {
        ({ sendTransactionStatusId: id } = await client.ethSendTransaction({
          from,
          caip2: node.caip2 as "eip155:11155111",
          calls: [{ to: RECIPIENT, value: "12" }],
        }));
        for (;;) {
          const status = await client.getSendTransactionStatus({ sendTransactionStatusId: id });
          if (status.txStatus === "BROADCASTING") break;
          await new Promise((r) => setTimeout(r, 20));
        }
        await restartable.server.close();
        await node.test.mine({ blocks: 1 });
      } finally {
        await node.test.setAutomine(true);
      }
      // A new server on the same database carries on: it finds the receipt the first never saw.
      restarted = await startServer({ ...restartable.config, port: 0 }, pino({ level: "silent" }));
      const apiClient = sdkAt(restarted.url, team);
      const status = await finalStatus(apiClient, id, team.organizationId);
      expect(status.txStatus).toBe("INCLUDED");
      expect((await node.client.getTransactionReceipt({ hash: status.eth!.txHash as Hex })).status).toBe("success");
    } finally {
      await restarted?.close();
      await restartable.database.drop();
    }
  });

  if (backend === "postgres") {
    it("two server processes on one PostgreSQL database sending from one address get distinct, gap-free nonces", async () => {
      // A second server with its own pool on the same database, as a second process would have.
      const second = await startServer({ ...h.config, port: 0 }, pino({ level: "silent" }));
      try {
        const from = await fundedAccount(sdk, "two servers");
        const secondSdk = sdkAt(second.url, org);
        const first = await node.client.getTransactionCount({ address: from, blockTag: "pending" });
        const ids = await Promise.all(
          Array.from({ length: 16 }, (_, i) =>
            send(i % 2 ? secondSdk : sdk, from, [{ to: RECIPIENT, value: String(i + 1) }]).then((r) => r.sendTransactionStatusId),
          ),
        );
        const statuses = await Promise.all(ids.map((id) => finalStatus(sdk, id)));
        expect(statuses.map((s) => s.txStatus)).toEqual(Array(16).fill("INCLUDED"));
        const nonces = await Promise.all(
          statuses.map(async (s) => (await node.client.getTransaction({ hash: s.eth!.txHash as Hex })).nonce),
        );
        expect([...nonces].sort((a, b) => a - b)).toEqual(Array.from({ length: 16 }, (_, i) => first + i));
      } finally {
        await second.close();
      }
    });
  }
});
