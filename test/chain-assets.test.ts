// Balances, supported assets, Ethereum transaction history and eth_undelegate_7702 against a real
// Ethereum node (Hardhat Network, test/helpers/ethereum-node.ts), through @turnkey/sdk-server: the
// native balance and an ERC-20's (a token deployed from test/fixtures/TestToken.sol and listed in
// SIGIL_CHAIN_ASSETS), only non-zero ones; the history of what Sigil sent, paged; an EIP-7702
// delegation cleared; bad input refused with nothing recorded (queries) or only the failed activity.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createWalletClient,
  encodeAbiParameters,
  getAddress,
  encodeFunctionData,
  erc20Abi,
  http,
  parseEther,
  zeroAddress,
  type Abi,
  type Hex,
} from "viem";
import { DEFAULT_ETHEREUM_ACCOUNTS, DEFAULT_SOLANA_ACCOUNTS } from "@turnkey/sdk-server";
import { createAccount } from "@turnkey/viem";
import { startHarness, refusedLeavingOnlyItsActivity, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";
import { startEthereumNode, type EthereumNode } from "./helpers/ethereum-node.js";
import token from "./fixtures/test-token.json" with { type: "json" };
import counter from "./fixtures/counter.json" with { type: "json" };

type Sdk = ReturnType<Harness["sdk"]>;
type Chain = "eip155:11155111";

let node: EthereumNode;
let h: Harness;
let org: TestOrganization;
let sdk: Sdk;
let tokenAddress: Hex;
let holder: Hex;
let assetsDir: string;
const RECIPIENT = "0x00000000000000000000000000000000000000cc" as Hex;
const TOKEN_SUPPLY = 10_000_000_000n; // 10,000 TTK (6 decimals)

async function ethereumAccount(client: Sdk, name: string): Promise<Hex> {
  const { addresses } = await client.createWallet({ walletName: name, accounts: DEFAULT_ETHEREUM_ACCOUNTS });
  return addresses[0] as Hex;
}

async function finalStatus(client: Sdk, sendTransactionStatusId: string) {
  for (;;) {
    const status = await client.getSendTransactionStatus({ sendTransactionStatusId });
    if (status.txStatus === "INCLUDED" || status.txStatus === "FAILED") return status;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const caip2 = () => node.caip2 as Chain;

beforeAll(async () => {
  node = await startEthereumNode();
  // The token's whole supply goes to the node's funder, which hands some to a wallet account below.
  const args = encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [node.funder, TOKEN_SUPPLY]);
  tokenAddress = await node.deploy(token.abi as Abi, `${token.bytecode}${args.slice(2)}` as Hex);
  assetsDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-assets-"));
  const assetsFile = path.join(assetsDir, "assets.json");
  fs.writeFileSync(
    assetsFile,
    JSON.stringify({ [node.caip2]: [{ caip19: `${node.caip2}/erc20:${tokenAddress}`, symbol: "TTK", name: "Test Token", decimals: 6 }] }),
  );
  h = await startHarness({
    SIGIL_CHAIN_RPC_URLS: `${node.caip2}=${node.url}`,
    SIGIL_CHAIN_POLL_MS: "20",
    SIGIL_CHAIN_ASSETS: assetsFile,
  });
  org = await h.organization();
  sdk = h.sdk(org, org.key);
  holder = await ethereumAccount(sdk, "holder");
  await node.fund(holder, parseEther("100"));
  const funder = createWalletClient({ account: node.funder, transport: http(node.url) });
  const hash = await funder.writeContract({
    address: tokenAddress,
    abi: erc20Abi,
    functionName: "transfer",
    args: [holder, 1_234_500_000n],
    chain: null,
  });
  await node.client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
});
afterAll(async () => {
  await h?.close();
  await node?.stop();
  if (assetsDir) fs.rmSync(assetsDir, { recursive: true, force: true });
});

describe("list_supported_assets and get_wallet_address_balances", () => {
  it("lists the native coin and the token SIGIL_CHAIN_ASSETS names", async () => {
    const { assets } = await sdk.listSupportedAssets({ caip2: caip2() });
    expect(assets).toEqual([
      { caip19: `${node.caip2}/slip44:60`, symbol: "ETH", name: "Ethereum", decimals: 18, stable: false },
      { caip19: `${node.caip2}/erc20:${tokenAddress}`, symbol: "TTK", name: "Test Token", decimals: 6, stable: false },
    ]);
  });

  it("answers a wallet account's ether and token balances from the node, normalized for display, no USD", async () => {
    const { balances } = await sdk.getWalletAddressBalances({ address: holder, caip2: caip2() });
    expect(balances).toEqual([
      {
        caip19: `${node.caip2}/slip44:60`,
        symbol: "ETH",
        name: "Ethereum",
        decimals: 18,
        balance: String(await node.client.getBalance({ address: holder })),
        display: { crypto: "100" },
      },
      {
        caip19: `${node.caip2}/erc20:${tokenAddress}`,
        symbol: "TTK",
        name: "Test Token",
        decimals: 6,
        balance: "1234500000",
        display: { crypto: "1234.5" },
      },
    ]);
    // The address in any letter case names the same account.
    const lower = await sdk.getWalletAddressBalances({ address: holder.toLowerCase(), caip2: caip2() });
    expect(lower.balances).toEqual(balances);
  });

  it("answers only non-zero balances: none for an account holding nothing", async () => {
    const empty = await ethereumAccount(sdk, "empty");
    expect((await sdk.getWalletAddressBalances({ address: empty, caip2: caip2() })).balances).toEqual([]);
    await node.fund(empty, 5n);
    expect((await sdk.getWalletAddressBalances({ address: empty, caip2: caip2() })).balances).toEqual([
      expect.objectContaining({ symbol: "ETH", balance: "5", display: { crypto: "0.000000000000000005" } }),
    ]);
  });

  describe("bad input: a clear error, nothing recorded", () => {
    const refused = async (ask: () => Promise<unknown>, message: string, code: string) => {
      const before = await h.snapshot();
      const error = await ask().then(
        () => undefined,
        (e: { message: string; details?: { turnkeyErrorCode?: string }[] }) => e,
      );
      expect(error?.message).toContain(message);
      expect(error?.details?.[0]?.turnkeyErrorCode).toBe(code);
      expect(await h.snapshot()).toBe(before);
    };

    it("a private key's address: REQUEST_INVALID (wallet accounts only)", async () => {
      const { privateKeys } = await sdk.createPrivateKeys({
        privateKeys: [{ privateKeyName: "pk", curve: "CURVE_SECP256K1", addressFormats: ["ADDRESS_FORMAT_ETHEREUM"], privateKeyTags: [] }],
      });
      const address = privateKeys[0]!.addresses![0]!.address!;
      await refused(
        () => sdk.getWalletAddressBalances({ address, caip2: caip2() }),
        "private key addresses are not supported",
        "REQUEST_INVALID",
      );
      await refused(
        () => sdk.listEthTransactionHistory({ address, caip2: caip2() }),
        "private key addresses are not supported",
        "REQUEST_INVALID",
      );
    });

    it("an address no wallet account of the organization has: WALLET_ACCOUNT_NOT_FOUND", async () => {
      await refused(
        () => sdk.getWalletAddressBalances({ address: node.funder, caip2: caip2() }),
        `no wallet account with address ${node.funder}`,
        "WALLET_ACCOUNT_NOT_FOUND",
      );
    });

    it("a Solana account on an EVM chain, and a malformed address: REQUEST_INVALID", async () => {
      const { addresses } = await sdk.createWallet({ walletName: "sol", accounts: DEFAULT_SOLANA_ACCOUNTS });
      await refused(
        () => sdk.getWalletAddressBalances({ address: addresses[0]!, caip2: caip2() }),
        "address must be an Ethereum address",
        "REQUEST_INVALID",
      );
      await refused(
        () => sdk.getWalletAddressBalances({ address: "0x12", caip2: caip2() }),
        "address must be an Ethereum address",
        "REQUEST_INVALID",
      );
    });

    it("a chain with no node: CHAIN_NOT_CONFIGURED, for balances, assets and history", async () => {
      const mainnet = "eip155:1" as Chain;
      await refused(
        () => sdk.getWalletAddressBalances({ address: holder, caip2: mainnet }),
        "caip2 eip155:1 has no node",
        "CHAIN_NOT_CONFIGURED",
      );
      await refused(() => sdk.listSupportedAssets({ caip2: mainnet }), "caip2 eip155:1 has no node", "CHAIN_NOT_CONFIGURED");
      await refused(
        () => sdk.listEthTransactionHistory({ address: holder, caip2: mainnet }),
        "caip2 eip155:1 has no node",
        "CHAIN_NOT_CONFIGURED",
      );
    });

    it("a caip2 neither the API's nor configured: CHAIN_NOT_CONFIGURED", async () => {
      await refused(
        () => sdk.getWalletAddressBalances({ address: holder, caip2: "eip155:31337" as Chain }),
        "caip2 eip155:31337 has no node on this server",
        "CHAIN_NOT_CONFIGURED",
      );
    });
  });
});

describe("list_eth_transaction_history", () => {
  let sender: Hex;
  const sent: { id: string; hash: Hex }[] = [];

  beforeAll(async () => {
    sender = await ethereumAccount(sdk, "history");
    await node.fund(sender, parseEther("10"));
    const funder = createWalletClient({ account: node.funder, transport: http(node.url) });
    const hash = await funder.writeContract({
      address: tokenAddress,
      abi: erc20Abi,
      functionName: "transfer",
      args: [sender, 5_000_000n],
      chain: null,
    });
    await node.client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    const calls = [
      { to: RECIPIENT, value: "1000" },
      { to: tokenAddress, data: encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [RECIPIENT, 2_500_000n] }) },
      { to: RECIPIENT, value: "3000" },
    ];
    for (const call of calls) {
      const { sendTransactionStatusId } = await sdk.ethSendTransaction({ from: sender, caip2: caip2(), calls: [call] });
      const status = await finalStatus(sdk, sendTransactionStatusId);
      expect(status.txStatus).toBe("INCLUDED");
      sent.push({ id: sendTransactionStatusId, hash: status.eth!.txHash as Hex });
    }
    // A call whose simulation reverts never lands: it is not in the history.
    const counterAddress = await node.deploy(counter.abi as Abi, counter.bytecode as Hex);
    const reverted = await sdk.ethSendTransaction({
      from: sender,
      caip2: caip2(),
      calls: [{ to: counterAddress, data: encodeFunctionData({ abi: counter.abi as Abi, functionName: "fail", args: ["no"] }) }],
    });
    expect((await finalStatus(sdk, reverted.sendTransactionStatusId)).txStatus).toBe("FAILED");
  });

  it("lists what Sigil sent from the account, newest first, with block, fee, transfers and the sending activity", async () => {
    const { transactions, pageInfo } = await sdk.listEthTransactionHistory({ address: sender, caip2: caip2() });
    expect(transactions.map((t) => t.transactionHash)).toEqual(sent.map((s) => s.hash).reverse());
    expect(pageInfo).toEqual({ hasNextPage: false, hasPreviousPage: false, startCursor: sent[2]!.id, endCursor: sent[0]!.id });
    for (const item of transactions) {
      const receipt = await node.client.getTransactionReceipt({ hash: item.transactionHash as Hex });
      const block = await node.client.getBlock({ blockHash: receipt.blockHash });
      expect(item).toMatchObject({
        block: {
          number: String(receipt.blockNumber),
          hash: receipt.blockHash,
          timestamp: new Date(Number(block.timestamp) * 1000).toISOString().replace(".000Z", "Z"),
        },
        origin: "TURNKEY",
        from: sender,
        fee: { amount: String(receipt.gasUsed * receipt.effectiveGasPrice), caip19: `${node.caip2}/slip44:60` },
        turnkey: { sponsored: false, activityFingerprint: expect.stringMatching(/^[0-9a-f]{64}$/) },
      });
      expect(["CONFIRMED", "FINALIZED"]).toContain(item.status);
    }
    const [third, second, first] = transactions;
    const ether = { caip19: `${node.caip2}/slip44:60`, symbol: "ETH", name: "Ethereum", decimals: 18 };
    expect(first!.transfers).toEqual([
      { direction: "OUT", asset: ether, amount: "1000", counterparty: RECIPIENT, display: { crypto: "0.000000000000001" } },
    ]);
    expect(second!.to).toBe(getAddress(tokenAddress));
    expect(second!.transfers).toEqual([
      {
        direction: "OUT",
        asset: { caip19: `${node.caip2}/erc20:${tokenAddress}`, symbol: "TTK", name: "Test Token", decimals: 6 },
        amount: "2500000",
        counterparty: RECIPIENT,
        display: { crypto: "2.5" },
      },
    ]);
    expect(third!.transfers[0]).toMatchObject({ amount: "3000" });
    // The fingerprint is the sending activity's.
    const activities = await sdk.getActivities({});
    const fingerprints = new Set(activities.activities.map((a) => a.fingerprint));
    expect(transactions.every((t) => fingerprints.has(t.turnkey!.activityFingerprint!))).toBe(true);
  });

  it("pages with limit, after and before", async () => {
    const ids = sent.map((s) => s.hash).reverse();
    const page1 = await sdk.listEthTransactionHistory({ address: sender, caip2: caip2(), paginationOptions: { limit: "2" } });
    expect(page1.transactions.map((t) => t.transactionHash)).toEqual(ids.slice(0, 2));
    expect(page1.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: false });
    const page2 = await sdk.listEthTransactionHistory({
      address: sender,
      caip2: caip2(),
      paginationOptions: { limit: "2", after: page1.pageInfo!.endCursor! },
    });
    expect(page2.transactions.map((t) => t.transactionHash)).toEqual(ids.slice(2));
    expect(page2.pageInfo).toMatchObject({ hasNextPage: false, hasPreviousPage: true });
    const back = await sdk.listEthTransactionHistory({
      address: sender,
      caip2: caip2(),
      paginationOptions: { limit: "1", before: page2.pageInfo!.startCursor! },
    });
    expect(back.transactions.map((t) => t.transactionHash)).toEqual([ids[1]]);
    expect(back.pageInfo).toMatchObject({ hasNextPage: true, hasPreviousPage: true });
  });

  it("lists nothing for an account Sigil sent nothing from (transactions sent elsewhere are not indexed)", async () => {
    // holder received ether and tokens, and sent nothing through Sigil.
    const { transactions, pageInfo } = await sdk.listEthTransactionHistory({ address: holder, caip2: caip2() });
    expect(transactions).toEqual([]);
    expect(pageInfo).toEqual({ hasNextPage: false, hasPreviousPage: false });
  });

  it("refuses a limit outside 1..100, both cursors, and a cursor of another list, recording nothing", async () => {
    const cases: [Record<string, string>, string][] = [
      [{ limit: "0" }, 'paginationOptions.limit must be between 1 and 100, got "0"'],
      [{ limit: "101" }, 'paginationOptions.limit must be between 1 and 100, got "101"'],
      [{ before: sent[0]!.id, after: sent[1]!.id }, "paginationOptions takes before or after, not both"],
      [{ after: "no-such-transaction" }, "pagination cursor no-such-transaction is not a transaction of this address's history"],
    ];
    for (const [paginationOptions, message] of cases) {
      const before = await h.snapshot();
      await expect(sdk.listEthTransactionHistory({ address: sender, caip2: caip2(), paginationOptions })).rejects.toMatchObject({
        message: expect.stringContaining(message),
      });
      expect(await h.snapshot()).toBe(before);
    }
    // A cursor of another address's history is not one of this list.
    await expect(
      sdk.listEthTransactionHistory({ address: holder, caip2: caip2(), paginationOptions: { after: sent[0]!.id } }),
    ).rejects.toMatchObject({ message: expect.stringContaining("is not a transaction of this address's history") });
  });
});

describe("eth_undelegate_7702", () => {
  it("clears a delegation: a type-4 transaction to itself authorizing the zero address with the next nonce", async () => {
    const account = await ethereumAccount(sdk, "delegated");
    await node.fund(account, parseEther("1"));
    const counterAddress = await node.deploy(counter.abi as Abi, counter.bytecode as Hex);
    // Delegate first: a type-4 transaction the account signs through @turnkey/viem, its own authorization at nonce + 1.
    const viemAccount = await createAccount({ client: sdk, organizationId: org.organizationId, signWith: account });
    const nonce = await node.client.getTransactionCount({ address: account });
    const authorization = await viemAccount.signAuthorization!({ address: counterAddress, chainId: node.chainId, nonce: nonce + 1 });
    const fees = await node.client.estimateFeesPerGas();
    const delegating = await viemAccount.signTransaction({
      type: "eip7702",
      chainId: node.chainId,
      nonce,
      to: RECIPIENT,
      gas: 100_000n,
      authorizationList: [authorization],
      ...fees,
    });
    const delegated = await node.client.request({ method: "eth_sendRawTransaction", params: [delegating] });
    await node.client.waitForTransactionReceipt({ hash: delegated, pollingInterval: 20 });
    expect(await node.client.getCode({ address: account })).toBe(`0xef0100${counterAddress.slice(2).toLowerCase()}`);

    const { sendTransactionStatusId, activity } = await sdk.ethUndelegate7702({ from: account, caip2: caip2() });
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    // @turnkey/sdk-server sends ACTIVITY_TYPE_ETH_UNDELEGATE7702: recorded as the API's spelling.
    expect((await sdk.getActivity({ activityId: activity.id })).activity.type).toBe("ACTIVITY_TYPE_ETH_UNDELEGATE_7702");
    const status = await sdk.pollTransactionStatus({ sendTransactionStatusId, pollingIntervalMs: 20, timeoutMs: 20_000 });
    expect(status.txStatus).toBe("INCLUDED");
    expect(status.error).toBeUndefined();
    const mined = await node.client.getTransaction({ hash: status.eth!.txHash as Hex });
    expect(mined).toMatchObject({
      type: "eip7702",
      from: account.toLowerCase(),
      to: account.toLowerCase(),
      nonce: nonce + 2,
      gas: 60_000n,
    });
    expect(mined.authorizationList).toEqual([expect.objectContaining({ address: zeroAddress, chainId: node.chainId, nonce: nonce + 3 })]);
    expect(await node.client.getCode({ address: account })).toBeUndefined();
    // The next send takes the nonce after the authorization's.
    const next = await sdk.ethSendTransaction({ from: account, caip2: caip2(), calls: [{ to: RECIPIENT, value: "1" }] });
    const nextStatus = await finalStatus(sdk, next.sendTransactionStatusId);
    expect((await node.client.getTransaction({ hash: nextStatus.eth!.txHash as Hex })).nonce).toBe(nonce + 4);
  });

  it("a send made while an undelegation is in flight skips both of its nonces", async () => {
    const account = await ethereumAccount(sdk, "busy");
    await node.fund(account, parseEther("1"));
    const nonce = await node.client.getTransactionCount({ address: account });
    await node.test.setAutomine(false);
    let ids: string[];
    try {
      const undelegation = await sdk.ethUndelegate7702({ from: account, caip2: caip2() });
      const send = await sdk.ethSendTransaction({ from: account, caip2: caip2(), calls: [{ to: RECIPIENT, value: "2" }] });
      ids = [undelegation.sendTransactionStatusId, send.sendTransactionStatusId];
      for (const id of ids)
        while ((await sdk.getSendTransactionStatus({ sendTransactionStatusId: id })).txStatus !== "BROADCASTING")
          await new Promise((r) => setTimeout(r, 20));
      await node.test.mine({ blocks: 1 });
      // Hardhat's pool does not see that the authorization raised the sender's nonce too, and keeps
      // the send (nonce + 2) queued for ever; a node that re-reads the state nonce (geth) mines it.
      // Dropped from the pool, it is sent again by the broadcaster and mined.
      const queued = (await sdk.getSendTransactionStatus({ sendTransactionStatusId: ids[1]! })).eth!.txHash as Hex;
      await node.test.dropTransaction({ hash: queued });
    } finally {
      await node.test.setAutomine(true);
    }
    const statuses = await Promise.all(ids.map((id) => finalStatus(sdk, id)));
    expect(statuses.map((s) => s.txStatus)).toEqual(["INCLUDED", "INCLUDED"]);
    const nonces = await Promise.all(statuses.map(async (s) => (await node.client.getTransaction({ hash: s.eth!.txHash as Hex })).nonce));
    expect(nonces).toEqual([nonce, nonce + 2]);
  });

  describe("bad input: a clear error, nothing signed, nothing broadcast", () => {
    const cases: [string, () => Record<string, unknown>, string, string][] = [
      ["a chain with no node", () => ({ from: holder, caip2: "eip155:1" }), "caip2 eip155:1 has no node", "CHAIN_NOT_CONFIGURED"],
      [
        "a from that is not the organization's",
        () => ({ from: node.funder, caip2: caip2() }),
        "is not the address of a wallet account or private key of this organization",
        "SIGNER_NOT_FOUND",
      ],
      ["a from that is not an address", () => ({ from: "holder", caip2: caip2() }), "private key ids are not accepted", "REQUEST_INVALID"],
      [
        "a tip above the maximum fee",
        () => ({ from: holder, caip2: caip2(), maxFeePerGas: "10", maxPriorityFeePerGas: "11" }),
        "maxPriorityFeePerGas must not exceed maxFeePerGas",
        "REQUEST_INVALID",
      ],
      [
        "a gas limit that is not a number",
        () => ({ from: holder, caip2: caip2(), gasLimit: "lots" }),
        "gasLimit must be a whole number",
        "REQUEST_INVALID",
      ],
    ];
    for (const [label, input, message, code] of cases) {
      it(`${label}: ${code}`, async () => {
        const nonce = await node.client.getTransactionCount({ address: holder, blockTag: "pending" });
        const { failure } = await refusedLeavingOnlyItsActivity(h, () => sdk.ethUndelegate7702(input() as never), {
          message: expect.stringContaining(message),
        });
        expect(failure.details[0].turnkeyErrorCode).toBe(code);
        expect(await node.client.getTransactionCount({ address: holder, blockTag: "pending" })).toBe(nonce);
      });
    }

    it("a policy denying undelegations (by their authorization) refuses it", async () => {
      const { org: team, root, members } = await organizationWith(h, ["carol"]);
      const account = await ethereumAccount(root, "team");
      await node.fund(account, parseEther("1"));
      await root.createPolicies({
        policies: [
          {
            policyName: "sign",
            effect: "EFFECT_ALLOW",
            condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'",
            consensus: `approvers.any(user, user.id == '${members.carol!.userId}')`,
            notes: "",
          },
          {
            policyName: "keep delegations",
            effect: "EFFECT_DENY",
            condition: `eth.eip_7702_authorization.address == '${zeroAddress}' && eth.tx.type == 'TYPE_4'`,
            notes: "",
          },
        ],
      });
      const nonce = await node.client.getTransactionCount({ address: account, blockTag: "pending" });
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () => members.carol!.client.ethUndelegate7702({ organizationId: team.organizationId, from: account, caip2: caip2() }),
        { message: expect.stringContaining("explicitly denied") },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
      expect(await node.client.getTransactionCount({ address: account, blockTag: "pending" })).toBe(nonce);
    });
  });
});
