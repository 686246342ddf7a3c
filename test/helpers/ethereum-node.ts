// A real Ethereum node for the sending tests: Hardhat Network (hardhat 2.x from npm, which runs on
// Node 20; docs/sending-transactions.md says why not Hardhat 3) in a child process on a free loopback
// port, started and stopped by the suite. It mines each transaction as it arrives (automine), which a
// test may switch off to hold transactions in the pool; its twenty default accounts are unlocked and
// funded, so tests fund wallets and deploy contracts with eth_sendTransaction, naming no private key.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawn, type ChildProcess } from "node:child_process";
import { createPublicClient, createTestClient, createWalletClient, http, type Abi, type Hex, type PublicClient } from "viem";
import { freePort } from "./processes.js";

const HARDHAT_CLI = path.resolve("node_modules/hardhat/internal/cli/cli.js");

export interface EthereumNode {
  url: string;
  chainId: number;
  /** eip155:<chainId> */
  caip2: string;
  client: PublicClient;
  /** Hardhat's own methods: automine, mine, drop a transaction from the pool. */
  test: ReturnType<typeof createTestClient>;
  /** Hardhat's first default account (unlocked). */
  funder: Hex;
  /** Sends `value` wei from the funder and waits for it to be mined. */
  fund(to: Hex, value: bigint): Promise<void>;
  /** Deploys a contract from the funder; answers its address. */
  deploy(abi: Abi, bytecode: Hex): Promise<Hex>;
  stop(): Promise<void>;
}

/**
 * Starts a node. The chain id is one the API's caip2 enum lists (requests naming any other are refused
 * by the request schema): Sepolia's by default, so that no request could reach a real chain's node.
 */
export async function startEthereumNode(chainId = 11155111): Promise<EthereumNode> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-hardhat-"));
  fs.writeFileSync(path.join(dir, "hardhat.config.cjs"), `module.exports = { networks: { hardhat: { chainId: ${chainId} } } };\n`);
  const port = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [HARDHAT_CLI, "node", "--config", path.join(dir, "hardhat.config.cjs"), "--hostname", "127.0.0.1", "--port", String(port)],
    // Its project is the temporary directory (the config, and the cache it writes), while Hardhat is
    // this repository's: allowed explicitly. No telemetry prompt: the node only ever answers on loopback.
    {
      cwd: dir,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        HARDHAT_EXPERIMENTAL_ALLOW_NON_LOCAL_INSTALLATION: "true",
        HARDHAT_DISABLE_TELEMETRY_PROMPT: "true",
        CI: "true",
      },
    },
  );
  const output: string[] = [];
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output.push(chunk.toString());
      if (output.join("").includes("Started HTTP and WebSocket JSON-RPC server")) resolve();
    };
    child.stdout!.on("data", onData);
    // The node logs every request; read on so that a full pipe never stalls it, keeping only the start.
    child.stderr!.on("data", (chunk: Buffer) => output.push(chunk.toString()));
    child.once("exit", (code) => reject(new Error(`hardhat node exited (${code}) before it listened:\n${output.join("").slice(-2000)}`)));
  });
  child.stdout!.removeAllListeners("data");
  child.stdout!.resume();

  const url = `http://127.0.0.1:${port}`;
  const transport = http(url, { retryCount: 0 });
  const client = createPublicClient({ transport });
  const test = createTestClient({ mode: "hardhat", transport });
  const [funder] = await createWalletClient({ transport }).getAddresses();
  const wallet = createWalletClient({ account: funder!, transport });
  return {
    url,
    chainId,
    caip2: `eip155:${chainId}`,
    client,
    test,
    funder: funder as Hex,
    async fund(to, value) {
      const hash = await wallet.sendTransaction({ to, value, chain: null });
      await client.waitForTransactionReceipt({ hash, pollingInterval: 50 });
    },
    async deploy(abi, bytecode) {
      const hash = await wallet.deployContract({ abi, bytecode, chain: null });
      const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 50 });
      return receipt.contractAddress as Hex;
    },
    async stop() {
      child.kill("SIGTERM");
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
