// The Solana nodes of SIGIL_CHAIN_RPC_URLS (keys `solana:<genesis-hash prefix>`), spoken through
// @solana/kit's RPC client over its HTTP transport. Each node is asked its genesis hash once before it
// is used, as an EVM node is asked its chain id: a devnet node listed as mainnet would otherwise be
// handed transactions meant for the other cluster. The transport is wrapped so that an error the node
// answers reaches Sigil as the node wrote it (code, message, data with the preflight's logs and the
// transaction error), which get_send_transaction_status reports, less the secrets of the configured
// URLs (node-answers.ts); kit's own errors (an HTTP status text, a parse error quoting the answer) are
// replaced by Sigil's words before they leave the transport.
import {
  createDefaultRpcTransport,
  createSolanaRpcFromTransport,
  isSolanaError,
  SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR,
  type Rpc,
  type RpcTransport,
  type SolanaRpcApi,
} from "@solana/kit";
import { SOLANA_CLUSTERS } from "../config.js";
import { serviceError } from "../errors.js";
import { endpointOf, NodeUnreachable, unreachableReason, type NodeSecrets } from "./node-answers.js";

export interface SolanaChain {
  caip2: string;
  rpc: Rpc<SolanaRpcApi>;
}

/** A JSON-RPC error the node answered, as it wrote it. */
export class SolanaRpcRefusal extends Error {
  override name = "SolanaRpcRefusal";
  constructor(
    readonly code: number | undefined,
    readonly rpcMessage: string,
    readonly data: unknown,
  ) {
    super(rpcMessage);
  }
}

/** What a failed call came to: no answer (try again later), or an error the node answered. */
export type SolanaRpcFailure = { kind: "unreachable"; message: string } | { kind: "rejected"; refusal: SolanaRpcRefusal };

export function solanaRpcFailureOf(error: unknown): SolanaRpcFailure {
  if (error instanceof SolanaRpcRefusal) return { kind: "rejected", refusal: error };
  const name = (error as { name?: string })?.name;
  if (name === "AbortError" || name === "TimeoutError") return { kind: "unreachable", message: "the node did not answer in time" };
  if (error instanceof NodeUnreachable) return { kind: "unreachable", message: error.message };
  // Not from the transport (which lets only the above out): a failure of Sigil's own, in its own words.
  return { kind: "unreachable", message: error instanceof Error ? error.message : String(error) };
}

/** CHAIN_NODE_UNAVAILABLE for a call that found no node; the node's words come redacted (node-answers.ts). */
export function solanaUnavailable(caip2: string, error: unknown) {
  const failure = solanaRpcFailureOf(error);
  const message = failure.kind === "unreachable" ? failure.message : `${failure.refusal.rpcMessage}`;
  return serviceError("CHAIN_NODE_UNAVAILABLE", `the node of ${caip2} failed: ${message}`);
}

/**
 * kit's HTTP transport, with a deadline per request and the node's errors raised as SolanaRpcRefusal,
 * redacted. A user name and password in the URL travel as Basic authorization (fetch refuses a URL
 * holding them, quoting it whole).
 */
function transportFor(url: string, timeoutMs: number, secrets: NodeSecrets): RpcTransport {
  const endpoint = endpointOf(url);
  const http = createDefaultRpcTransport({ url: endpoint.url, headers: endpoint.headers });
  return (async (config: Parameters<RpcTransport>[0]) => {
    const deadline = AbortSignal.timeout(timeoutMs);
    const signal = config.signal ? AbortSignal.any([config.signal, deadline]) : deadline;
    let response: { error?: { code?: unknown; message?: unknown; data?: unknown } };
    try {
      response = (await http({ ...config, signal })) as typeof response;
    } catch (error) {
      const name = (error as { name?: unknown } | null)?.name;
      if (name === "AbortError" || name === "TimeoutError") throw error;
      if (isSolanaError(error, SOLANA_ERROR__RPC__TRANSPORT_HTTP_ERROR)) throw new NodeUnreachable(`HTTP ${error.context.statusCode}`);
      if (error instanceof SyntaxError) throw new NodeUnreachable("its answer is not JSON");
      throw new NodeUnreachable(unreachableReason(error));
    }
    if (response && typeof response === "object" && response.error) {
      const { code, message, data } = response.error;
      // kit reads JSON numbers as bigints where they do not fit a double; a code always fits.
      const number = typeof code === "number" || typeof code === "bigint" ? Number(code) : undefined;
      throw new SolanaRpcRefusal(number, secrets.redact(typeof message === "string" ? message : "error"), secrets.redactValue(data));
    }
    return response;
  }) as RpcTransport;
}

export function solanaRpc(url: string, timeoutMs: number, secrets: NodeSecrets): Rpc<SolanaRpcApi> {
  return createSolanaRpcFromTransport(transportFor(url, timeoutMs, secrets));
}

/** Whether the node serves the cluster `caip2` names: its genesis hash begins with the reference. */
export async function verifyGenesisHash(rpc: Rpc<SolanaRpcApi>, caip2: string): Promise<void> {
  let genesis: string;
  try {
    genesis = await rpc.getGenesisHash().send();
  } catch (error) {
    throw solanaUnavailable(caip2, error);
  }
  const reference = caip2.slice("solana:".length);
  const expected = SOLANA_CLUSTERS[caip2]?.genesisHash;
  if (expected ? genesis !== expected : !genesis.startsWith(reference))
    throw serviceError(
      "CHAIN_NODE_UNAVAILABLE",
      `the node SIGIL_CHAIN_RPC_URLS lists for ${caip2} serves the cluster with genesis hash ${genesis}, not ${expected ?? `${reference}…`}: fix the setting`,
    );
}
