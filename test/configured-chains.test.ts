// The chains a deployment's operator configures are served, though the API description lists only
// the hosted service's: Hardhat's eip155:31337 (a real Hardhat node) and a Solana cluster of its own
// genesis hash (a real LiteSVM runtime behind JSON-RPC), through the official client. A chain neither
// listed nor configured is refused with CHAIN_NOT_CONFIGURED, naming it and what is configured, and
// changes nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Hex } from "viem";
import { DEFAULT_ETHEREUM_ACCOUNTS, DEFAULT_SOLANA_ACCOUNTS } from "@turnkey/sdk-server";
import { loadConfig } from "../src/config.js";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { startEthereumNode, type EthereumNode } from "./helpers/ethereum-node.js";
import { startSolanaNode, type SolanaNode } from "./helpers/solana-node.js";

type Sdk = ReturnType<Harness["sdk"]>;
// The client's types list the hosted service's chains; a configured one is sent all the same.
type ApiChain = "eip155:11155111";
type ApiCluster = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

/** A genesis hash no public cluster has: a private cluster, served because it is configured. */
const LOCAL_GENESIS_HASH = "8E9rvCKLFQia2Y35HXjjpWzj8weVo44K3TSCmsKNmCXX";

let hardhat: EthereumNode;
let solana: SolanaNode;
let h: Harness;
let org: TestOrganization;
let sdk: Sdk;
let ethAddress: Hex;
let solAddress: string;
const RECIPIENT = "0x00000000000000000000000000000000000000bb" as Hex;

beforeAll(async () => {
  hardhat = await startEthereumNode(31337);
  solana = await startSolanaNode(LOCAL_GENESIS_HASH);
  h = await startHarness({
    SIGIL_CHAIN_RPC_URLS: `eip155:31337=${hardhat.url},${solana.caip2}=${solana.url}`,
    SIGIL_CHAIN_POLL_MS: "20",
    SIGIL_CHAIN_TIMEOUT_MS: "5000",
  });
  org = await h.organization();
  sdk = h.sdk(org, org.key);
  const { addresses } = await sdk.createWallet({
    walletName: "local",
    accounts: [...DEFAULT_ETHEREUM_ACCOUNTS, ...DEFAULT_SOLANA_ACCOUNTS],
  });
  [ethAddress, solAddress] = [addresses[0] as Hex, addresses[1]!];
  await hardhat.fund(ethAddress, 10n ** 18n);
  solana.airdrop(solAddress, 2_000_000_000n);
});
afterAll(async () => {
  await h?.close();
  await hardhat?.stop();
  await solana?.stop();
});

describe("a chain the operator configured, which the API description does not list", () => {
  it("eip155:31337: eth_send_transaction signs for chain 31337, broadcasts and is INCLUDED", async () => {
    expect(hardhat.caip2).toBe("eip155:31337");
    const { sendTransactionStatusId, activity } = await sdk.ethSendTransaction({
      from: ethAddress,
      caip2: "eip155:31337" as ApiChain,
      calls: [{ to: RECIPIENT, value: "4242" }],
    });
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const status = await sdk.pollTransactionStatus({ sendTransactionStatusId, pollingIntervalMs: 20, timeoutMs: 20_000 });
    expect(status.txStatus).toBe("INCLUDED");
    const mined = await hardhat.client.getTransaction({ hash: status.eth!.txHash as Hex });
    expect(mined).toMatchObject({ chainId: 31337, value: 4242n, to: RECIPIENT });
    expect(await hardhat.client.getBalance({ address: RECIPIENT })).toBe(4242n);
  });

  it("eip155:31337: get_nonces and balances read the Hardhat node; its coin is ether", async () => {
    const { nonce } = await sdk.getNonces({ address: ethAddress, caip2: "eip155:31337" as ApiChain, nonce: true });
    expect(nonce).toBe(String(await hardhat.client.getTransactionCount({ address: ethAddress, blockTag: "pending" })));
    const { balances } = await sdk.getWalletAddressBalances({ address: ethAddress, caip2: "eip155:31337" as ApiChain });
    expect(balances).toEqual([
      expect.objectContaining({
        caip19: "eip155:31337/slip44:60",
        symbol: "ETH",
        balance: String(await hardhat.client.getBalance({ address: ethAddress })),
      }),
    ]);
  });

  it("a Solana cluster of its own genesis hash: balances read its node", async () => {
    expect(solana.caip2).toBe(`solana:${LOCAL_GENESIS_HASH.slice(0, 32)}`);
    const { balances } = await sdk.getWalletAddressBalances({ address: solAddress, caip2: solana.caip2 as ApiCluster });
    expect(balances).toEqual([expect.objectContaining({ symbol: "SOL", balance: String(solana.balance(solAddress)) })]);
    // The cluster's whole genesis hash names it too, as it does devnet and mainnet.
    const whole = await sdk.getWalletAddressBalances({ address: solAddress, caip2: `solana:${LOCAL_GENESIS_HASH}` as ApiCluster });
    expect(whole.balances).toEqual(balances);
  });
});

describe("a chain neither the API lists nor the operator configured: CHAIN_NOT_CONFIGURED, nothing changed", () => {
  const configured = () => `chains with a node: eip155:31337, ${solana.caip2}`;
  const cases: [string, () => Promise<unknown>, string][] = [
    [
      "eth_send_transaction to eip155:31338",
      () => sdk.ethSendTransaction({ from: ethAddress, caip2: "eip155:31338" as ApiChain, calls: [{ to: RECIPIENT, value: "1" }] }),
      "eip155:31338",
    ],
    [
      "get_nonces on eip155:31338",
      () => sdk.getNonces({ address: ethAddress, caip2: "eip155:31338" as ApiChain, nonce: true }),
      "eip155:31338",
    ],
    [
      "the configured chain id with a leading zero",
      () => sdk.getWalletAddressBalances({ address: ethAddress, caip2: "eip155:031337" as ApiChain }),
      "eip155:031337",
    ],
    [
      "another Solana cluster",
      () => sdk.getWalletAddressBalances({ address: solAddress, caip2: "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z" as ApiCluster }),
      "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z",
    ],
    [
      "a long made-up chain: named shortened",
      () => sdk.getNonces({ address: ethAddress, caip2: `eip155:${"9".repeat(500)}` as ApiChain, nonce: true }),
      `eip155:${"9".repeat(73)}…`,
    ],
  ];
  it.each(cases)("%s", async (_name, ask, named) => {
    const before = await h.snapshot();
    const blocks = await hardhat.client.getBlockNumber({ cacheTime: 0 });
    const error = await ask().then(
      () => undefined,
      (e: { message: string; details?: { turnkeyErrorCode?: string }[] }) => e,
    );
    expect(error?.message).toContain(`caip2 ${named} has no node on this server (SIGIL_CHAIN_RPC_URLS; ${configured()})`);
    expect(error?.details?.[0]?.turnkeyErrorCode).toBe("CHAIN_NOT_CONFIGURED");
    expect(await h.snapshot()).toBe(before);
    expect(await hardhat.client.getBlockNumber({ cacheTime: 0 })).toBe(blocks);
  });

  // A chain the API lists passes the request's schema, as it does on the hosted service, and is refused
  // by the activity that needs its node: a failed activity records the refusal.
  it("a chain the API lists, with no node here: the activity fails with CHAIN_NOT_CONFIGURED, nothing else stored", async () => {
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => sdk.ethSendTransaction({ from: ethAddress, caip2: "eip155:1", calls: [{ to: RECIPIENT, value: "1" }] }),
      { message: expect.stringContaining(`caip2 eip155:1 has no node on this server (SIGIL_CHAIN_RPC_URLS; ${configured()})`) },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("CHAIN_NOT_CONFIGURED");
  });

  it("an unserved chain beside another mistake: the request is invalid, both named", async () => {
    const before = await h.snapshot();
    const error = await sdk.getNonces({ address: ethAddress, caip2: "eip155:31338" as ApiChain, nonce: "yes" as unknown as boolean }).then(
      () => undefined,
      (e: { message: string; details?: { turnkeyErrorCode?: string }[] }) => e,
    );
    expect(error?.details?.[0]?.turnkeyErrorCode).toBe("REQUEST_INVALID");
    expect(error?.message).toContain('field "caip2" names eip155:31338, a chain this server does not serve');
    expect(error?.message).toContain('field "nonce" must be boolean');
    expect(await h.snapshot()).toBe(before);
  });

  it("GET /openapi.json keeps the API description's list of chains", async () => {
    const openapi = (await (await fetch(`${h.url}/openapi.json`)).json()) as { components: { schemas: Record<string, any> } };
    const caip2 = openapi.components.schemas.v1GetNoncesRequest.properties.caip2;
    expect(caip2.enum).toContain("eip155:1");
    expect(caip2.enum).not.toContain("eip155:31337");
  });
});

describe("SIGIL_CHAIN_RPC_URLS names EVM chains as nodes do", () => {
  it.each([
    ["eip155:031337=http://127.0.0.1:8545", "eip155:031337"],
    ["eip155:0=http://127.0.0.1:8545", "eip155:0"],
    ["eip155:0x7a69=http://127.0.0.1:8545", "eip155:0x7a69"],
    ["eip155:99999999999999999=http://127.0.0.1:8545", "eip155:99999999999999999"],
  ])("%s is refused at start", (setting, chain) => {
    expect(() => loadConfig({ SIGIL_CHAIN_RPC_URLS: setting })).toThrow(
      `${chain} is not an EVM chain id (eip155: and the chain id in decimal, without leading zeros)`,
    );
  });
});
