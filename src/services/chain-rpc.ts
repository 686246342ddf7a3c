// The chain nodes a deployment sends transactions to (SIGIL_CHAIN_RPC_URLS): one JSON-RPC endpoint per
// CAIP-2 chain id: EVM chains spoken through viem's public client and HTTP transport, Solana clusters
// through @solana/kit's (solana-rpc.ts). Each node is asked which chain it serves once before it is
// used (an EVM node its chain id, a Solana node its genesis hash): a node listed under the wrong caip2
// would otherwise be handed transactions signed for another chain. What a node answers reaches Sigil
// with the secrets of every configured URL removed (node-answers.ts).
import {
  BaseError,
  HttpRequestError,
  RpcRequestError,
  TimeoutError,
  createPublicClient,
  http,
  type Abi,
  type Hex,
  type PublicClient,
} from "viem";
import { canonicalCaip2, type ChainConfig, isEvmChainId } from "../config.js";
import type { Db, Tx } from "../store/handles.js";
import { serviceError } from "../errors.js";
import { solanaRpc, verifyGenesisHash, type SolanaChain } from "./solana-rpc.js";
import { fetchFromNode, endpointOf, NodeSecrets, NodeUnreachable } from "./node-answers.js";

/**
 * The ABI uploaded for a contract of the organization (its smart contract interface), used to decode
 * custom revert errors; undefined when none is known. A single parameter on purpose: the server wires
 * it (http/server.ts) to the smart contract interfaces' look-up, which lives in operations/.
 */
export type ContractAbiLookup = (db: Db | Tx, organizationId: string, contractAddress: string) => Promise<Abi | undefined>;

/** An EVM chain's client, and the chain id its transactions are signed for. */
export interface EvmChain {
  caip2: string;
  chainId: number;
  client: PublicClient;
}

export class ChainRpc {
  private readonly clients = new Map<string, PublicClient>();
  private readonly solanaClients = new Map<string, SolanaChain["rpc"]>();
  /** The chain id check of each node: made once, forgotten when it could not be made (node down). */
  private readonly verified = new Map<string, Promise<void>>();
  /** Every configured URL's secrets, removed from whatever any node answers. */
  private readonly secrets: NodeSecrets;

  constructor(private readonly config: ChainConfig) {
    this.secrets = new NodeSecrets(Object.values(config.rpcUrls));
  }

  /** The assets SIGIL_CHAIN_ASSETS lists, by caip2 (canonical). */
  get assets(): ChainConfig["assets"] {
    return this.config.assets;
  }

  /** The chains with a node, as configured. */
  get chains(): string[] {
    return Object.keys(this.config.rpcUrls);
  }

  has(caip2: string): boolean {
    return Object.hasOwn(this.config.rpcUrls, canonicalCaip2(caip2));
  }

  /** Whether the operator configured `caip2`: a node for it, or assets listed for it. */
  configures(caip2: string): boolean {
    const canonical = canonicalCaip2(caip2);
    return Object.hasOwn(this.config.rpcUrls, canonical) || Object.hasOwn(this.config.assets, canonical);
  }

  /** CHAIN_NOT_CONFIGURED for `caip2` (as sent, shortened when long), naming the chains that have a node. */
  notConfigured(caip2: string): Error {
    const listed = this.chains.length ? `chains with a node: ${this.chains.join(", ")}` : "no chain has one";
    const sent = caip2.length > 80 ? `${caip2.slice(0, 80)}…` : caip2;
    return serviceError("CHAIN_NOT_CONFIGURED", `caip2 ${sent} has no node on this server (SIGIL_CHAIN_RPC_URLS; ${listed})`);
  }

  /** CHAIN_NOT_CONFIGURED when no node is listed for `caip2`. */
  private requireNode(caip2: string): void {
    if (!this.has(caip2)) throw this.notConfigured(caip2);
  }

  /** The client of a Solana cluster (`caip2` canonical: see canonicalCaip2), its genesis hash checked once. */
  async solana(caip2: string): Promise<SolanaChain> {
    this.requireNode(caip2);
    let rpc = this.solanaClients.get(caip2);
    if (!rpc) {
      rpc = solanaRpc(this.config.rpcUrls[caip2]!, this.config.timeoutMs, this.secrets);
      this.solanaClients.set(caip2, rpc);
    }
    let check = this.verified.get(caip2);
    if (!check) {
      check = verifyGenesisHash(rpc, caip2);
      this.verified.set(caip2, check);
      check.catch(() => this.verified.delete(caip2));
    }
    await check;
    return { caip2, rpc };
  }

  /** The client of an EVM chain; CHAIN_NOT_CONFIGURED when no node is listed for it. */
  async evm(caip2: string): Promise<EvmChain> {
    const chainId = evmChainId(caip2);
    this.requireNode(caip2);
    let client = this.clients.get(caip2);
    if (!client) {
      client = createPublicClient({ transport: evmTransport(caip2, this.config.rpcUrls[caip2]!, this.config.timeoutMs, this.secrets) });
      this.clients.set(caip2, client);
    }
    let check = this.verified.get(caip2);
    if (!check) {
      check = verifyChainId(client, caip2, chainId);
      this.verified.set(caip2, check);
      check.catch(() => this.verified.delete(caip2));
    }
    await check;
    return { caip2, chainId, client };
  }
}

/**
 * viem's HTTP transport to a node. viem quotes the URL it is given in its errors (and so in anything that
 * logs one): it is given a stand-in naming the chain, and `fetchFromNode` sends each request to the
 * configured URL and hands back the node's answers with their errors redacted. No retries here: an
 * activity waits for its answer, and the broadcaster retries on its own schedule.
 */
function evmTransport(caip2: string, url: string, timeoutMs: number, secrets: NodeSecrets) {
  const endpoint = endpointOf(url);
  const standIn = `https://${caip2.replace(/[^A-Za-z0-9]/g, "-").toLowerCase()}.chain-node.invalid/`;
  return http(standIn, {
    timeout: timeoutMs,
    retryCount: 0,
    fetchFn: (_standIn, init) => fetchFromNode(endpoint, init, secrets),
  });
}

/** eip155:<n> -> n; anything else is not an EVM chain. */
export function evmChainId(caip2: string): number {
  if (!isEvmChainId(caip2)) throw serviceError("REQUEST_INVALID", `caip2 ${caip2} is not an EVM chain id (eip155:<chain id>)`);
  return Number(caip2.slice("eip155:".length));
}

async function verifyChainId(client: PublicClient, caip2: string, expected: number): Promise<void> {
  let actual: number;
  try {
    actual = await client.getChainId();
  } catch (error) {
    throw unavailable(caip2, error);
  }
  if (actual !== expected)
    throw serviceError(
      "CHAIN_NODE_UNAVAILABLE",
      `the node SIGIL_CHAIN_RPC_URLS lists for ${caip2} serves chain ${actual}, not ${expected}: fix the setting`,
    );
}

/** What a failed JSON-RPC call came to: the node could not be reached (try again later), or it
 * answered with an error (its message, code and any revert data). */
export type RpcFailure = { kind: "unreachable"; message: string } | { kind: "rejected"; message: string; code?: number; data?: Hex };

const isHex = (value: unknown): value is Hex => typeof value === "string" && /^0x([0-9a-fA-F]{2})*$/.test(value);

/** Revert data a node attached to an error: `data` as hex, or nested as `data.data` (Hardhat, some clients). */
function revertDataOf(data: unknown): Hex | undefined {
  if (isHex(data)) return data;
  if (typeof data === "object" && data !== null && "data" in data) return revertDataOf((data as { data: unknown }).data);
  return undefined;
}

export function rpcFailureOf(error: unknown): RpcFailure {
  if (!(error instanceof BaseError)) return { kind: "unreachable", message: error instanceof Error ? error.message : String(error) };
  const answered = error.walk((e) => e instanceof RpcRequestError) as RpcRequestError | null;
  if (answered) {
    const data = revertDataOf((answered as RpcRequestError & { data?: unknown }).data);
    return { kind: "rejected", message: answered.details, code: answered.code, ...(data ? { data } : {}) };
  }
  // A node may answer a JSON-RPC error with an HTTP error status: its body still says what it refused.
  const http = error.walk((e) => e instanceof HttpRequestError) as HttpRequestError | null;
  const body = http?.body as { error?: { message?: unknown; code?: unknown; data?: unknown } } | undefined;
  if (http && typeof body?.error?.message === "string") {
    const data = revertDataOf(body.error.data);
    return {
      kind: "rejected",
      message: body.error.message,
      ...(typeof body.error.code === "number" ? { code: body.error.code } : {}),
      ...(data ? { data } : {}),
    };
  }
  const timedOut = error.walk((e) => e instanceof TimeoutError);
  const unreachable = error.walk((e) => e instanceof NodeUnreachable) as NodeUnreachable | null;
  return {
    kind: "unreachable",
    message: timedOut
      ? "the node did not answer in time"
      : unreachable
        ? unreachable.message
        : http
          ? `HTTP ${http.status ?? "error"}`
          : error.shortMessage,
  };
}

/** CHAIN_NODE_UNAVAILABLE for a call that failed; the node's words come redacted (node-answers.ts). */
export function unavailable(caip2: string, error: unknown) {
  const failure = rpcFailureOf(error);
  return serviceError("CHAIN_NODE_UNAVAILABLE", `the node of ${caip2} failed: ${failure.message}`);
}
