// The secrets in the configured node URLs never leave the server. Each node (Hardhat, the LiteSVM node)
// sits behind a gateway on loopback (test/helpers/leaky-node.ts) reached through a URL with a user name
// and password, an API key in the path and another in the query, and every error it answers quotes
// that URL whole (and the Basic authorization it was sent). Refusals of every kind — a JSON-RPC error
// for the precheck's reads, for the broadcast, for a query's read; an HTTP error quoting the URL in its
// reason phrase and body — are checked in the answer, the recorded failure, get_send_transaction_status,
// the webhooks (activity and send status), and at the end every log line (debug included) and every
// row of every table: none holds eight characters in a row of any secret.
import util from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEther, type Hex } from "viem";
import { DEFAULT_ETHEREUM_ACCOUNTS, DEFAULT_SOLANA_ACCOUNTS } from "@turnkey/sdk-server";
import { signedRequest, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { startEthereumNode, type EthereumNode } from "./helpers/ethereum-node.js";
import { startSolanaNode, transfers, type SolanaNode } from "./helpers/solana-node.js";
import { partsOf, startLeakyNode, type LeakyNode } from "./helpers/leaky-node.js";
import { receiver, until } from "./helpers/webhook-receiver.js";
import { ChainRpc } from "../src/services/chain-rpc.js";

type Sdk = ReturnType<Harness["sdk"]>;

let ethereum: EthereumNode;
let solana: SolanaNode;
let ethereumGateway: LeakyNode;
let solanaGateway: LeakyNode;
let h: Harness;
let org: TestOrganization;
let sdk: Sdk;
let hook: Awaited<ReturnType<typeof receiver>>;
let parts: string[];
const RECIPIENT = "0x00000000000000000000000000000000000000aa";
const SOL_RECIPIENT = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";

/** `text` holds no eight characters in a row of any secret, in any letter case. */
function expectNoSecret(text: string, what: string) {
  const lower = text.toLowerCase();
  const found = parts.filter((part) => lower.includes(part));
  expect(found, `${what} holds a part of a node URL's secrets: ${text.slice(0, 2000)}`).toEqual([]);
}

type Snapshot = Record<string, string[]>;

/**
 * A stamped submit that the operation refuses: its answer (status, code), and that it left nothing but
 * its FAILED activity, whose recorded failure is the answer, and that activity's webhook (the endpoint
 * subscribes to ACTIVITY_UPDATES; its deliveries are read at the end). The answer and the failure are
 * checked for the secrets.
 */
async function refused(path: string, body: Record<string, unknown>, status: number, code: string) {
  const before = JSON.parse(await h.snapshot()) as Snapshot;
  const { body: text, headers } = signedRequest(body, org.key);
  const answer = await h.post(path, text, headers);
  expect(answer.status, JSON.stringify(answer.json)).toBe(status);
  expect(answer.json.details[0].turnkeyErrorCode).toBe(code);
  const after = JSON.parse(await h.snapshot()) as Snapshot;
  for (const table of Object.keys(before))
    if (!["activities", "policy_evaluations", "webhook_deliveries"].includes(table)) expect(after[table], table).toEqual(before[table]);
  const added = after.activities!.filter((row) => !before.activities!.includes(row)).map((row) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0].status).toBe("ACTIVITY_STATUS_FAILED");
  // The recorded failure is the answer but for the request's id, which the row keeps apart.
  const { requestId, ...recorded } = answer.json;
  expect(JSON.parse(added[0].failure)).toEqual(recorded);
  expect(added[0].request_id).toBe(requestId);
  expectNoSecret(JSON.stringify(answer.json), "the answer");
  expectNoSecret(added[0].failure, "the recorded failure");
  return answer.json.message as string;
}

const ethSend = (from: string, extra: Record<string, unknown> = {}) => ({
  type: "ACTIVITY_TYPE_ETH_SEND_TRANSACTION_V2",
  timestampMs: String(Date.now()),
  organizationId: org.organizationId,
  parameters: { from, caip2: ethereum.caip2, calls: [{ to: RECIPIENT, value: "1000" }], sponsor: false, ...extra },
});

async function finalStatus(sendTransactionStatusId: string) {
  return until(
    "a final status",
    async () => {
      const status = await sdk.getSendTransactionStatus({ organizationId: org.organizationId, sendTransactionStatusId });
      return status.txStatus === "INCLUDED" || status.txStatus === "FAILED" ? status : undefined;
    },
    20_000,
  );
}

beforeAll(async () => {
  ethereum = await startEthereumNode();
  solana = await startSolanaNode();
  ethereumGateway = await startLeakyNode(ethereum.url);
  solanaGateway = await startLeakyNode(solana.url);
  parts = partsOf([...ethereumGateway.secrets, ...solanaGateway.secrets]);
  h = await startHarness({
    SIGIL_CHAIN_RPC_URLS: `${ethereum.caip2}=${ethereumGateway.url},${solana.caip2}=${solanaGateway.url}`,
    SIGIL_CHAIN_POLL_MS: "20",
    SIGIL_CHAIN_TIMEOUT_MS: "5000",
    SIGIL_LOG_LEVEL: "debug",
    SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
    SIGIL_WEBHOOK_POLL_MS: "50",
  });
  org = await h.organization();
  sdk = h.sdk(org, org.key, fastPoller);
  hook = await receiver();
  await sdk.createWebhookEndpoint({
    url: hook.url,
    name: "everything",
    subscriptions: [{ eventType: "ACTIVITY_UPDATES" }, { eventType: "SEND_TRANSACTION_STATUS_UPDATES" }],
  });
});
afterAll(async () => {
  await hook?.close();
  await h?.close();
  await ethereumGateway?.stop();
  await solanaGateway?.stop();
  await ethereum?.stop();
  await solana?.stop();
});

describe("an Ethereum node whose errors quote its URL", () => {
  let sender: Hex;
  beforeAll(async () => {
    const { addresses } = await sdk.createWallet({ walletName: "ethereum", accounts: DEFAULT_ETHEREUM_ACCOUNTS });
    sender = addresses[0] as Hex;
    await ethereum.fund(sender, parseEther("10"));
  });

  it("its chain id check refused: CHAIN_NODE_UNAVAILABLE, the node's words without the secrets", async () => {
    ethereumGateway.refuse("eth_chainId", "project suspended");
    try {
      const message = await refused("/public/v1/submit/eth_send_transaction", ethSend(sender), 503, "CHAIN_NODE_UNAVAILABLE");
      expect(message).toContain("project suspended");
      expect(message).toContain("[redacted]");
    } finally {
      ethereumGateway.clear();
    }
  });

  it("a gas estimate it refuses: 400 TRANSACTION_REJECTED_BY_NODE, the node's words without the secrets", async () => {
    ethereumGateway.refuse("eth_estimateGas", "insufficient funds for gas * price + value");
    try {
      const message = await refused("/public/v1/submit/eth_send_transaction", ethSend(sender), 400, "TRANSACTION_REJECTED_BY_NODE");
      expect(message).toContain("insufficient funds for gas * price + value");
      // The host says which node it was; nothing else of the URL is left.
      expect(message).toMatch(
        /\(http:\/\/\[redacted\]@127\.0\.0\.1:\d+\[redacted\], authorization Basic \[redacted\], key \[redacted\], \[redacted\]…\)$/,
      );
    } finally {
      ethereumGateway.clear();
    }
  });

  it("fees it fails to tell with an HTTP error quoting the URL: CHAIN_NODE_UNAVAILABLE (HTTP 502)", async () => {
    ethereumGateway.fail("eth_getBlockByNumber", 502);
    try {
      const message = await refused("/public/v1/submit/eth_send_transaction", ethSend(sender), 503, "CHAIN_NODE_UNAVAILABLE");
      expect(message).toContain("HTTP 502");
    } finally {
      ethereumGateway.clear();
    }
  });

  it("a broadcast it refuses: FAILED, get_send_transaction_status and the webhook give its words without the secrets", async () => {
    ethereumGateway.refuse("eth_sendRawTransaction", "transaction underpriced");
    try {
      const { sendTransactionStatusId } = await sdk.ethSendTransaction({
        from: sender,
        caip2: ethereum.caip2 as "eip155:11155111",
        calls: [{ to: RECIPIENT, value: "1000" }],
      });
      const status = await finalStatus(sendTransactionStatusId);
      expect(status.txStatus).toBe("FAILED");
      expect(status.txError).toContain("the node refused the transaction: transaction underpriced");
      expect(status.txError).toContain("[redacted]");
      expectNoSecret(JSON.stringify(status), "get_send_transaction_status");
      const failed = await until("the FAILED webhook", () =>
        hook.activities().find((body) => body.msg?.sendTransactionStatusId === sendTransactionStatusId && body.msg.status === "FAILED"),
      );
      expect(failed.msg.error.message).toContain("transaction underpriced");
      expectNoSecret(JSON.stringify(failed), "the webhook");
    } finally {
      ethereumGateway.clear();
    }
  });

  it("get_nonces, whose read it refuses: CHAIN_NODE_UNAVAILABLE without the secrets", async () => {
    ethereumGateway.refuse("eth_getTransactionCount", "rate limited");
    try {
      const body = JSON.stringify({ organizationId: org.organizationId, address: sender, caip2: ethereum.caip2, nonce: true });
      const { headers } = signedRequest(body, org.key);
      const answer = await h.post("/public/v1/query/get_nonces", body, headers);
      expect(answer.status).toBe(503);
      expect(answer.json.details[0].turnkeyErrorCode).toBe("CHAIN_NODE_UNAVAILABLE");
      expect(answer.json.message).toContain("rate limited");
      expectNoSecret(JSON.stringify(answer.json), "the answer");
    } finally {
      ethereumGateway.clear();
    }
  });

  it("viem's errors, as a log line would show them whole, hold no secret", async () => {
    const chains = new ChainRpc(h.config.chains);
    const { client } = await chains.evm(ethereum.caip2);
    for (const refusal of [
      () => ethereumGateway.refuse("eth_blockNumber", "quota exceeded"),
      () => ethereumGateway.fail("eth_blockNumber"),
    ]) {
      refusal();
      try {
        const error = await client.getBlockNumber({ cacheTime: 0 }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(Error);
        expectNoSecret(util.inspect(error, { depth: 20, showHidden: true }), "viem's error");
        expectNoSecret(JSON.stringify(error), "viem's error as JSON");
      } finally {
        ethereumGateway.clear();
      }
    }
  });
});

describe("a Solana node whose errors quote its URL", () => {
  let sender: string;
  beforeAll(async () => {
    const { addresses } = await sdk.createWallet({ walletName: "solana", accounts: DEFAULT_SOLANA_ACCOUNTS });
    sender = addresses[0]!;
    solana.airdrop(sender, 1_000_000_000n);
  });

  const solSend = (lamports: bigint) => ({
    type: "ACTIVITY_TYPE_SOL_SEND_TRANSACTION_V2",
    timestampMs: String(Date.now()),
    organizationId: org.organizationId,
    parameters: {
      unsignedTransaction: transfers(sender, [{ from: sender, to: SOL_RECIPIENT, lamports }]),
      signWiths: [sender],
      caip2: solana.caip2,
    },
  });

  it("a send it serves through the URL's user name, password, path and query lands", async () => {
    const { sendTransactionStatusId } = await sdk.solSendTransaction({
      unsignedTransaction: transfers(sender, [{ from: sender, to: SOL_RECIPIENT, lamports: 1_000_000n }]),
      signWiths: [sender],
      caip2: solana.caip2 as "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
    });
    expect((await finalStatus(sendTransactionStatusId)).txStatus).toBe("INCLUDED");
    expect(solanaGateway.unauthorized).toBe(0);
  });

  it("a preflight failure quoting the URL in its message and logs: FAILED with its details, without the secrets", async () => {
    const { sendTransactionStatusId } = await sdk.solSendTransaction({
      unsignedTransaction: transfers(sender, [{ from: sender, to: SOL_RECIPIENT, lamports: 50_000_000_000n }]),
      signWiths: [sender],
      caip2: solana.caip2 as "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
    });
    const status = await finalStatus(sendTransactionStatusId);
    expect(status.txStatus).toBe("FAILED");
    const details = (status.error as { solana: { rpcMessage: string; logs: string[] } }).solana;
    expect(details.rpcMessage).toContain("Transaction simulation failed");
    expect(details.rpcMessage).toContain("[redacted]");
    expect(details.logs.length).toBeGreaterThan(0);
    expect(details.logs.every((line) => line.includes("[redacted]"))).toBe(true);
    expectNoSecret(JSON.stringify(status), "get_send_transaction_status");
    const failed = await until("the FAILED webhook", () =>
      hook.activities().find((body) => body.msg?.sendTransactionStatusId === sendTransactionStatusId && body.msg.status === "FAILED"),
    );
    expectNoSecret(JSON.stringify(failed), "the webhook");
  });

  it("its latest blockhash refused: the send's activity FAILED with CHAIN_NODE_UNAVAILABLE, without the secrets", async () => {
    solanaGateway.refuse("getLatestBlockhash", "credits exhausted");
    try {
      const message = await refused("/public/v1/submit/sol_send_transaction", solSend(1000n), 503, "CHAIN_NODE_UNAVAILABLE");
      expect(message).toContain("credits exhausted");
    } finally {
      solanaGateway.clear();
    }
  });

  it("a balance read failing with an HTTP error quoting the URL in its reason phrase: CHAIN_NODE_UNAVAILABLE (HTTP 502)", async () => {
    solanaGateway.fail("getBalance", 502);
    try {
      const body = JSON.stringify({ organizationId: org.organizationId, address: sender, caip2: solana.caip2 });
      const { headers } = signedRequest(body, org.key);
      const answer = await h.post("/public/v1/query/get_wallet_address_balances", body, headers);
      expect(answer.status).toBe(503);
      expect(answer.json.message).toContain("HTTP 502");
      expectNoSecret(JSON.stringify(answer.json), "the answer");
    } finally {
      solanaGateway.clear();
    }
  });
});

describe("nowhere", () => {
  it("no log line, no row of any table and no webhook holds any part of the secrets", async () => {
    // Let the webhooks of the refusals above go out.
    await until("the webhooks", () => hook.received.length >= 6);
    expect(ethereumGateway.unauthorized + solanaGateway.unauthorized).toBe(0);
    expect(h.logLines.some((line) => line.includes('"level":20'))).toBe(true);
    for (const line of h.logLines) expectNoSecret(line, "a log line");
    expectNoSecret(await h.snapshot(), "the database");
    for (const delivery of hook.received) expectNoSecret(delivery.body.toString("utf8"), "a webhook");
  });
});
