// What the sending activities read from a chain's node, and when. Every node read happens in the
// activity's precheck, before the organization's lock is taken (a slow node holds up nobody else's
// writes); the result is plain JSON, handed to the policy keywords and the execution, and stored with
// an activity that waits for approvals (a listing weighs votes on it without asking a node). Inside the
// transaction only the database is read: the signer, the nonces Sigil holds, the nonce reservation.
//
// A node's refusal or silence is kept as data rather than thrown, so that the activity still reports
// what the request got wrong first (an address that is not the organization's, say) and only then
// what the node said.
import type { PublicClient } from "viem";
import { type ErrorBody, ServiceError } from "../../errors.js";
import { unavailable } from "../../services/chain-rpc.js";

/** A node read: what it answered, or the refusal to report once the request's own checks passed. */
export type NodeRead<T> = { ok: T } | { failure: ErrorBody };

/** Runs `read`, keeping a ServiceError (the node down, a refusal) as the read's failure. */
export async function readNode<T>(read: () => Promise<T>): Promise<NodeRead<T>> {
  try {
    return { ok: await read() };
  } catch (error) {
    if (error instanceof ServiceError) return { failure: error.toBody() };
    throw error;
  }
}

/** What `read` answered; its failure thrown as the activity's error. */
export function answerOf<T>(read: NodeRead<T> | undefined): T {
  // Every run of an operation with a precheck has one (the pipeline runs it before the execution).
  if (!read) throw new Error("the precheck's node reads are missing");
  if ("failure" in read) throw ServiceError.fromBody(read.failure);
  return read.ok;
}

/** EIP-1559 fees, as decimal strings of wei (plain JSON). */
export interface Fees {
  maxFeePerGas: string;
  maxPriorityFeePerGas: string;
}

/** The fees the request names, the node's estimate for the rest: its base fee part with the tip asked for (or the node's). */
export async function feesFor(
  client: PublicClient,
  caip2: string,
  maxFeeAsked: bigint | undefined,
  tipAsked: bigint | undefined,
): Promise<Fees> {
  let maxFeePerGas = maxFeeAsked;
  let maxPriorityFeePerGas = tipAsked;
  if (maxFeePerGas === undefined || maxPriorityFeePerGas === undefined) {
    let estimate: { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint };
    try {
      estimate = await client.estimateFeesPerGas();
    } catch (error) {
      throw unavailable(caip2, error);
    }
    maxPriorityFeePerGas ??= estimate.maxPriorityFeePerGas;
    maxFeePerGas ??= estimate.maxFeePerGas - estimate.maxPriorityFeePerGas + maxPriorityFeePerGas;
  }
  return { maxFeePerGas: maxFeePerGas.toString(), maxPriorityFeePerGas: maxPriorityFeePerGas.toString() };
}
