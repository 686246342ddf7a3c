// One look at a Solana transaction sol_send_transaction signed, for the chain broadcaster
// (chain-broadcaster.ts), which leases the rows, schedules the looks and records what each decided:
//   INITIALIZED  → sendTransaction with the node's preflight (a simulation). Accepted → BROADCASTING.
//                  Refused → FAILED with the node's words: its JSON-RPC code and message, and for a
//                  preflight failure the transaction error, program logs and compute units it reported —
//                  unless the signature already has a status (sent before, the answer lost). No answer → again.
//   BROADCASTING → its signature status: confirmed or finalized → INCLUDED, with its slot, block hash and
//                  time and the fee it paid (a transaction that landed but failed in execution is INCLUDED
//                  with its error and logs, as an Ethereum revert is). Unknown to the node: while its
//                  blockhash is still valid it is sent again (at most `maxBroadcasts` times in all,
//                  then only followed: another validator may still land it, and a rebroadcast the node
//                  refuses decides nothing); once the blockhash has expired with no status for the
//                  signature it can never land → FAILED. A transaction on a durable nonce has no
//                  expiring blockhash: its nonce account is read instead (getAccountInfo, finalized),
//                  and once it holds another nonce with no status for the signature → FAILED; until
//                  then it is sent again like the others, and past `maxBroadcasts` followed.
import type { Address, Base64EncodedWireTransaction, Blockhash, Signature } from "@solana/kit";
import type { SentTransaction } from "../store/schema.js";
import { getNonceDecoder, NonceState, SYSTEM_PROGRAM_ADDRESS } from "@solana-program/system";
import { durableNonceAccountOf, fromWire, readUnsignedTransaction, transactionHex } from "../chains/solana-send.js";
import { solanaRpcFailureOf, type SolanaChain, type SolanaRpcRefusal } from "./solana-rpc.js";

/** v1SolanaFailureDetails: what the node said of a failed Solana transaction. */
export interface SolanaFailureDetails {
  source: string;
  rpcCode?: number;
  rpcMessage?: string;
  transactionErrorJson?: string;
  logs?: string[];
  unitsConsumed?: string;
  innerInstructionsJson?: string;
}

export interface SolanaSendError {
  message: string;
  solana?: SolanaFailureDetails;
}

/** What one look decided (the broadcaster's Change, for a Solana transaction). */
export type SolanaLook =
  | { status: "INITIALIZED" | "BROADCASTING"; broadcasts: number; note: string | null; reset: boolean }
  | {
      status: "INCLUDED";
      blockNumber: number;
      error: SolanaSendError | null;
      block: { hash: string | null; time: number | null; fee: string | null };
    }
  | { status: "FAILED"; error: SolanaSendError };

// The node's JSON as it wrote it: kit reads every number as a bigint; one past a double's exact range
// is written as decimal digits.
const json = (value: unknown) =>
  JSON.stringify(value, (_, v) =>
    typeof v === "bigint" ? (v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= -BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString()) : v,
  );

/** The failure details of a refused sendTransaction: for a preflight failure (-32002) its simulation's. */
function refusalDetails(refusal: SolanaRpcRefusal): SolanaFailureDetails {
  const data = (typeof refusal.data === "object" && refusal.data !== null ? refusal.data : {}) as Record<string, unknown>;
  const preflight = refusal.code === -32002;
  return {
    source: preflight ? "preflight" : "broadcast",
    ...(refusal.code !== undefined ? { rpcCode: refusal.code } : {}),
    rpcMessage: refusal.rpcMessage,
    ...(data.err !== undefined && data.err !== null ? { transactionErrorJson: json(data.err) } : {}),
    ...(Array.isArray(data.logs) ? { logs: data.logs.map(String) } : {}),
    ...(data.unitsConsumed !== undefined && data.unitsConsumed !== null ? { unitsConsumed: String(data.unitsConsumed) } : {}),
    ...(data.innerInstructions !== undefined && data.innerInstructions !== null
      ? { innerInstructionsJson: json(data.innerInstructions) }
      : {}),
  };
}

/**
 * Whether the nonce account, as finalized, holds a nonce other than `nonce`: the nonce was advanced (by
 * this transaction or another). An account that is missing, not the System Program's, or not an
 * initialized nonce decides nothing (it may not be finalized yet): false, and the transaction is followed.
 */
async function nonceAdvancedPast(rpc: SolanaChain["rpc"], account: string, nonce: string): Promise<boolean> {
  const { value } = await rpc.getAccountInfo(account as Address, { encoding: "base64", commitment: "finalized" }).send();
  if (!value || value.owner !== SYSTEM_PROGRAM_ADDRESS || !Array.isArray(value.data) || typeof value.data[0] !== "string") return false;
  const data = Buffer.from(value.data[0], "base64");
  const decoder = getNonceDecoder();
  if (data.length !== decoder.fixedSize) return false;
  const stored = decoder.decode(data);
  return stored.state === NonceState.Initialized && stored.blockhash !== nonce;
}

export async function lookAtSolanaSend({ rpc }: SolanaChain, row: SentTransaction, maxBroadcasts: number): Promise<SolanaLook> {
  const signature = row.tx_hash as Signature;
  const wire = row.signed_transaction as Base64EncodedWireTransaction;
  const waiting = (note: string | null): SolanaLook => ({
    status: row.status as "BROADCASTING",
    broadcasts: row.broadcasts,
    note,
    reset: false,
  });

  /** Its status, when the node has one that counts (confirmed or finalized). */
  const landed = async (): Promise<SolanaLook | null> => {
    const { value } = await rpc.getSignatureStatuses([signature], { searchTransactionHistory: true }).send();
    const status = value[0];
    if (!status || (status.confirmationStatus !== "confirmed" && status.confirmationStatus !== "finalized")) return null;
    return included(Number(status.slot), status.err);
  };

  /** INCLUDED with its block and fee; an execution error with its logs. */
  const included = async (slot: number, err: unknown): Promise<SolanaLook> => {
    const transaction = await rpc
      .getTransaction(signature, { encoding: "json", maxSupportedTransactionVersion: 0, commitment: "confirmed" })
      .send()
      .catch(() => null);
    const block = await rpc
      .getBlock(BigInt(slot), { transactionDetails: "none", rewards: false, commitment: "confirmed", maxSupportedTransactionVersion: 0 })
      .send()
      .catch(() => null);
    const blockTime = transaction?.blockTime ?? block?.blockTime ?? null;
    const error: SolanaSendError | null = err
      ? {
          message: `the transaction failed in execution on chain: ${json(err)}`,
          solana: {
            source: "execution",
            transactionErrorJson: json(err),
            ...(transaction?.meta?.logMessages ? { logs: [...transaction.meta.logMessages] } : {}),
            ...(transaction?.meta?.computeUnitsConsumed !== undefined
              ? { unitsConsumed: String(transaction.meta.computeUnitsConsumed) }
              : {}),
          },
        }
      : null;
    return {
      status: "INCLUDED",
      blockNumber: slot,
      error,
      block: {
        hash: block?.blockhash ?? null,
        time: blockTime !== null ? Number(blockTime) * 1000 : null,
        fee: transaction?.meta ? String(transaction.meta.fee) : null,
      },
    };
  };

  const send = async (again: boolean): Promise<SolanaLook> => {
    const broadcasts = row.broadcasts + 1;
    try {
      // A rebroadcast skips the preflight: the first one passed it, and a second would call the
      // transaction already processed.
      await rpc.sendTransaction(wire, { encoding: "base64", preflightCommitment: "confirmed", skipPreflight: again }).send();
      return { status: "BROADCASTING", broadcasts, note: again ? "sent again: the node did not know it" : null, reset: true };
    } catch (error) {
      const failure = solanaRpcFailureOf(error);
      if (failure.kind === "unreachable") return waiting(failure.message);
      // Accepted once: the blockhash, not a refusal of this copy, decides whether it can still land.
      if (again) return waiting(`not sent again: ${failure.refusal.rpcMessage}`);
      // Sent before and landed (the answer to that send was lost): its status wins over the refusal.
      const status = await landed().catch(() => null);
      if (status) return status;
      const details = refusalDetails(failure.refusal);
      const what = details.source === "preflight" ? "the node's preflight simulation failed" : "the node refused the transaction";
      return { status: "FAILED", error: { message: `${what}: ${failure.refusal.rpcMessage}`, solana: details } };
    }
  };

  /**
   * FAILED with `message` once its lifetime is over (blockhash expired, nonce advanced) — unless the node
   * has it after all: processed in the meantime, it may still be confirmed (its status decides), so a
   * status of any commitment keeps it waiting.
   */
  const unlessSeen = async (message: string): Promise<SolanaLook> => {
    const status = await landed();
    if (status) return status;
    const { value: seen } = await rpc.getSignatureStatuses([signature], { searchTransactionHistory: true }).send();
    if (seen[0]) return waiting(null);
    return { status: "FAILED", error: { message } };
  };

  if (row.status === "INITIALIZED") return send(false);
  try {
    const status = await landed();
    if (status) return status;
    const { value: known } = await rpc.getSignatureStatuses([signature]).send();
    if (known[0]) return waiting(null); // seen, not yet confirmed
    const transaction = fromWire(wire);
    const { blockhash } = readUnsignedTransaction(transactionHex(transaction));
    const durableNonce = durableNonceAccountOf(transaction);
    if (!durableNonce) {
      const { value: valid } = await rpc.isBlockhashValid(blockhash as Blockhash, { commitment: "processed" }).send();
      if (!valid)
        return unlessSeen(`the blockhash ${blockhash} expired before the transaction landed; it can never land now: send it again`);
    } else if (durableNonce.account && (await nonceAdvancedPast(rpc, durableNonce.account, blockhash))) {
      return unlessSeen(
        `the nonce account ${durableNonce.account} was advanced past the transaction's nonce ${blockhash} without it; it can never land now: send it again`,
      );
    }
    if (row.broadcasts >= maxBroadcasts)
      return waiting(
        `dropped by the node ${row.broadcasts} times; not sent again, followed until it lands or its ${durableNonce ? "nonce is advanced" : "blockhash expires"}`,
      );
    return await send(true);
  } catch (error) {
    const failure = solanaRpcFailureOf(error);
    return waiting(failure.kind === "unreachable" ? failure.message : failure.refusal.rpcMessage);
  }
}
