// SEND_TRANSACTION_STATUS_UPDATES end to end: sol_send_transaction against the LiteSVM node
// (test/helpers/solana-node.ts) and eth_send_transaction against Hardhat's, a receiver on loopback subscribed to the event type, every delivery
// verified with @turnkey/crypto's verifyTurnkeyWebhookSignature and its body checked field by field
// against the product's documented `transaction:status` payload. Also: the billing organization
// receives its sub-organizations' sends, and a sub-organization may not subscribe itself.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeFunctionData, parseEther, type Abi, type Hex } from "viem";
import { DEFAULT_ETHEREUM_ACCOUNTS, DEFAULT_SOLANA_ACCOUNTS } from "@turnkey/sdk-server";
import { newKeyPair, refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { startSolanaNode, transfers, type SolanaNode } from "./helpers/solana-node.js";
import { startEthereumNode, type EthereumNode } from "./helpers/ethereum-node.js";
import counter from "./fixtures/counter.json" with { type: "json" };
import { receiver, until, verdictOf, verificationKeys } from "./helpers/webhook-receiver.js";

type Sdk = ReturnType<Harness["sdk"]>;
type Caip2 = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

const SOL = 1_000_000_000n;
const RECIPIENT = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
const EVENT = "SEND_TRANSACTION_STATUS_UPDATES";

let node: SolanaNode;
let ethereum: EthereumNode;
let h: Harness;
let org: TestOrganization;
let sdk: Sdk;
let hook: Awaited<ReturnType<typeof receiver>>;

/** An unsigned transfer of `lamports` from `from` (the fee payer) to RECIPIENT. */
const transfer = (from: string, lamports: bigint) => transfers(from, [{ from, to: RECIPIENT, lamports }]);

async function fundedAccount(client: Sdk, funded: bigint, organizationId?: string): Promise<string> {
  const { addresses } = await client.createWallet({
    ...(organizationId ? { organizationId } : {}),
    walletName: `w${Math.random()}`,
    accounts: DEFAULT_SOLANA_ACCOUNTS,
  });
  node.airdrop(addresses[0]!, funded);
  return addresses[0]!;
}

async function finalStatus(client: Sdk, organizationId: string, sendTransactionStatusId: string) {
  return until("a final status", async () => {
    const status = await client.getSendTransactionStatus({ organizationId, sendTransactionStatusId });
    return status.txStatus === "INCLUDED" || status.txStatus === "FAILED" ? status : undefined;
  });
}

/** The verified deliveries about one send, in the order they arrived. */
async function deliveriesOf(sendTransactionStatusId: string, count: number) {
  const about = () =>
    hook.received.filter((r) => JSON.parse(r.body.toString("utf8")).msg?.sendTransactionStatusId === sendTransactionStatusId);
  await until(`${count} deliveries`, () => about().length >= count);
  // Nothing more arrives for it (the poll interval is 50 ms).
  await new Promise((resolve) => setTimeout(resolve, 300));
  const keys = await verificationKeys(h.url);
  return about().map((delivery) => {
    const verdict = verdictOf(delivery, keys);
    expect(verdict.ok, JSON.stringify(verdict)).toBe(true);
    expect(delivery.headers["x-turnkey-event-type"]).toBe(EVENT);
    return { headers: delivery.headers, body: JSON.parse(delivery.body.toString("utf8")) };
  });
}

beforeAll(async () => {
  node = await startSolanaNode();
  ethereum = await startEthereumNode();
  h = await startHarness({
    SIGIL_CHAIN_RPC_URLS: `${node.caip2}=${node.url},${ethereum.caip2}=${ethereum.url}`,
    SIGIL_CHAIN_POLL_MS: "20",
    SIGIL_CHAIN_TIMEOUT_MS: "5000",
    SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
    SIGIL_WEBHOOK_RETRY_BASE_MS: "30",
    SIGIL_WEBHOOK_POLL_MS: "50",
    SIGIL_WEBHOOK_TIMEOUT_MS: "500",
  });
  org = await h.organization("Billing");
  sdk = h.sdk(org, org.key, fastPoller);
  hook = await receiver();
  const created = await sdk.createWebhookEndpoint({ url: hook.url, name: "sends", subscriptions: [{ eventType: EVENT }] });
  expect(created.webhookEndpoint.subscriptions).toEqual([{ eventType: EVENT, filtersJson: "", isActive: true }]);
});
afterAll(async () => {
  await hook?.close();
  await h?.close();
  await node?.stop();
  await ethereum?.stop();
});

describe("SEND_TRANSACTION_STATUS_UPDATES", () => {
  it("a landed send is delivered as BROADCASTING then INCLUDED (with its signature), signed, as the product's payload", async () => {
    const activityHook = await receiver();
    const { endpointId } = await sdk.createWebhookEndpoint({
      url: activityHook.url,
      name: "activities",
      subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
    });
    try {
      const from = await fundedAccount(sdk, SOL);
      const sent = await sdk.solSendTransaction({
        unsignedTransaction: transfer(from, 1_000_000n),
        signWiths: [from],
        caip2: node.caip2 as Caip2,
      });
      const status = await finalStatus(sdk, org.organizationId, sent.sendTransactionStatusId);
      expect(status.txStatus).toBe("INCLUDED");

      const deliveries = await deliveriesOf(sent.sendTransactionStatusId, 2);
      expect(deliveries.map((d) => d.body.msg.status)).toEqual(["BROADCASTING", "INCLUDED"]);
      const base = {
        sendTransactionStatusId: sent.sendTransactionStatusId,
        activityId: sent.activity.id,
        caip2: node.caip2,
        idempotencyKey: expect.stringMatching(/^[0-9a-f]{64}$/),
        timestamp: expect.any(Number),
      };
      const [broadcasting, included] = deliveries.map((d) => d.body);
      // Exactly these fields: nothing signed, no node URL, no error on a success.
      expect(broadcasting).toEqual({
        type: "transaction:status",
        organizationId: org.organizationId,
        parentOrganizationId: org.organizationId,
        msg: { ...base, status: "BROADCASTING" },
      });
      expect(included).toEqual({
        type: "transaction:status",
        organizationId: org.organizationId,
        parentOrganizationId: org.organizationId,
        msg: { ...base, status: "INCLUDED", txHash: status.solana!.signature },
      });
      expect(broadcasting.msg.idempotencyKey).not.toBe(included.msg.idempotencyKey);
      expect(Math.abs(included.msg.timestamp - Date.now() / 1000)).toBeLessThan(600);
      for (const d of deliveries) expect(d.headers["x-turnkey-organization-id"]).toBe(org.organizationId);

      // An endpoint subscribed to activity updates only hears of the activity, not of its transaction.
      await until("the send's activity", () => activityHook.activities().some((a) => a.type === "ACTIVITY_TYPE_SOL_SEND_TRANSACTION_V2"));
      expect(activityHook.activities().filter((a) => a.type === "transaction:status")).toEqual([]);
      expect(new Set(activityHook.received.map((r) => r.headers["x-turnkey-event-type"]))).toEqual(new Set(["ACTIVITY_UPDATES"]));
    } finally {
      await sdk.deleteWebhookEndpoint({ endpointId });
      await activityHook.close();
    }
  });

  it("a send the node refuses is delivered once, FAILED, with the error get_send_transaction_status shows and no hash", async () => {
    const poor = await fundedAccount(sdk, SOL / 10n);
    const sent = await sdk.solSendTransaction({
      unsignedTransaction: transfer(poor, 5n * SOL),
      signWiths: [poor],
      caip2: node.caip2 as Caip2,
    });
    const status = await finalStatus(sdk, org.organizationId, sent.sendTransactionStatusId);
    expect(status.txStatus).toBe("FAILED");
    const [failed, ...more] = await deliveriesOf(sent.sendTransactionStatusId, 1);
    expect(more).toEqual([]);
    expect(failed!.body.msg).toEqual({
      sendTransactionStatusId: sent.sendTransactionStatusId,
      activityId: sent.activity.id,
      status: "FAILED",
      caip2: node.caip2,
      idempotencyKey: expect.stringMatching(/^[0-9a-f]{64}$/),
      timestamp: expect.any(Number),
      error: { message: status.txError, solana: (status.error as { solana: unknown }).solana },
    });
    expect(failed!.body.msg.error.solana).toMatchObject({ source: "preflight", rpcCode: -32002 });
  });

  it("an Ethereum send that reverts on chain is INCLUDED with its hash and the decoded revert chain", async () => {
    const abi = counter.abi as Abi;
    const contract = await ethereum.deploy(abi, counter.bytecode as Hex);
    const { addresses } = await sdk.createWallet({ walletName: "eth", accounts: DEFAULT_ETHEREUM_ACCOUNTS });
    const from = addresses[0] as Hex;
    await ethereum.fund(from, parseEther("1"));
    const sent = await sdk.ethSendTransaction({
      from,
      caip2: ethereum.caip2 as "eip155:11155111",
      calls: [{ to: contract, data: encodeFunctionData({ abi, functionName: "fail", args: ["on chain"] }) }],
      gasLimit: "100000",
    });
    const status = await finalStatus(sdk, org.organizationId, sent.sendTransactionStatusId);
    expect(status.txStatus).toBe("INCLUDED");
    // Hardhat mines on arrival: BROADCASTING may or may not be seen before INCLUDED.
    await until("the INCLUDED event", () =>
      hook.received.some((r) => {
        const { msg } = JSON.parse(r.body.toString("utf8"));
        return msg?.sendTransactionStatusId === sent.sendTransactionStatusId && msg.status === "INCLUDED";
      }),
    );
    const deliveries = await deliveriesOf(sent.sendTransactionStatusId, 1);
    expect(deliveries.at(-1)!.body.msg.status).toBe("INCLUDED");
    const included = deliveries.at(-1)!.body;
    expect(included.msg).toMatchObject({ txHash: status.eth!.txHash, caip2: ethereum.caip2, activityId: sent.activity.id });
    expect(included.msg.error).toEqual({
      message: "execution reverted on chain: on chain",
      eth: { revertChain: status.error!.eth!.revertChain },
    });
    expect(included.msg.error.eth.revertChain[0]).toMatchObject({ errorType: "native", displayMessage: "on chain" });
  });

  it("a sub-organization's sends go to the parent's endpoints; the sub-organization may not subscribe itself", async () => {
    const key = newKeyPair();
    const { subOrganizationId } = await sdk.createSubOrganization({
      subOrganizationName: "Customer",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "customer",
          apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const sub = h.sdk({ organizationId: subOrganizationId }, key, fastPoller);

    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => sub.createWebhookEndpoint({ url: hook.url, name: "mine", subscriptions: [{ eventType: EVENT }] }),
      { code: 7, message: expect.stringContaining(`managed by the parent organization ${org.organizationId}`) },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("WEBHOOK_BILLING_ORGANIZATION_ONLY");
    // An event type nobody delivers is refused as before, also with the two that are.
    await refusedLeavingOnlyItsActivity(
      h,
      () => sdk.createWebhookEndpoint({ url: hook.url, name: "x", subscriptions: [{ eventType: "BALANCE_CONFIRMED_UPDATES" }] }),
      { code: 3, message: expect.stringContaining("this server delivers ACTIVITY_UPDATES and SEND_TRANSACTION_STATUS_UPDATES") },
    );

    const from = await fundedAccount(sub, SOL, subOrganizationId);
    const sent = await sub.solSendTransaction({
      organizationId: subOrganizationId,
      unsignedTransaction: transfer(from, 1_000n),
      signWiths: [from],
      caip2: node.caip2 as Caip2,
    });
    expect((await finalStatus(sub, subOrganizationId, sent.sendTransactionStatusId)).txStatus).toBe("INCLUDED");
    const deliveries = await deliveriesOf(sent.sendTransactionStatusId, 2);
    for (const d of deliveries) {
      expect(d.body).toMatchObject({ organizationId: subOrganizationId, parentOrganizationId: org.organizationId });
      expect(d.headers["x-turnkey-organization-id"]).toBe(org.organizationId);
    }
  });
});
