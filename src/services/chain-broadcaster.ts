// Sends the transactions eth_send_transaction signed and follows each to its final state. An activity
// writes its signed transaction (sent_transactions, status INITIALIZED) in its own transaction, so a
// transaction exists for the broadcaster exactly when its activity committed, and never before: one
// whose activity rolled back is never broadcast. Each server process runs a broadcaster (an outbox
// worker, outbox-worker.ts); they share the rows through a lease, as webhooks and messages do, so a
// restart, or another process, carries on where the last one stopped.
//
// FAILED is final and gives the nonce back, so it is reported only when the transaction can no longer
// be mined: a client sending again on FAILED must not pay twice. One look at a transaction, by status:
//   INITIALIZED  → eth_sendRawTransaction. Accepted (or "already known") → BROADCASTING. Refused: a nonce
//                  already used → its receipt, else FAILED (another transaction took the nonce); a nonce
//                  ahead of the node's → looked at again (an earlier one is still on its way), for at
//                  most SIGIL_CHAIN_NONCE_WAIT_MS once no send of Sigil's holds an earlier nonce, then
//                  FAILED; anything else (insufficient funds, underpriced…) → FAILED with the node's
//                  words: no node ever took it. No answer → again.
//   BROADCASTING → its receipt: found → INCLUDED (a revert is reported with its decoded reason). Not
//                  found, but the node knows the transaction → again. Unknown to the node: if the
//                  sender's mined nonce has passed it with no receipt of ours, another transaction took
//                  the nonce → FAILED; else it was dropped → sent again, at most MAX_BROADCASTS times in
//                  all, and then only followed (another node's pool may still mine it). A rebroadcast the
//                  node refuses is not a verdict: the next look decides from the chain.
// Transactions of one sender are first broadcast in nonce order (a node that mines at once, like
// Hardhat's, refuses a nonce ahead of the one it expects).
import type pino from "pino";
import { parseTransaction, type Hex, type PublicClient } from "viem";
import type { Store } from "../store/database.js";
import type { Tx } from "../store/handles.js";
import type { SentTransaction } from "../store/schema.js";
import type { ChainConfig } from "../config.js";
import { decodeRevert, revertError, type SendError } from "../chains/ethereum-reverts.js";
import { ServiceError } from "../errors.js";
import { OutboxWorker, type AttemptResult, type SendOutcome } from "./outbox-worker.js";
import { rpcFailureOf, type ChainRpc, type ContractAbiLookup } from "./chain-rpc.js";
import { lookAtSolanaSend, type SolanaSendError } from "./solana-broadcast.js";
import { recordWithStatusEvent } from "./send-status-events.js";

/** The statuses of a sent transaction, as the product names them (get_send_transaction_status's txStatus). */
export const SEND_STATUS = {
  /** Signed and recorded; not yet accepted by the node. */
  INITIALIZED: "INITIALIZED",
  /** The node accepted it; waiting for it to be mined. */
  BROADCASTING: "BROADCASTING",
  /** Mined in a block (successfully, or reverted: then `error` says why). */
  INCLUDED: "INCLUDED",
  /** It will not be mined, and is not tried again. */
  FAILED: "FAILED",
} as const;
export type SendStatus = (typeof SEND_STATUS)[keyof typeof SEND_STATUS];

/** Statuses that are not final: the broadcaster looks at them again, and their nonce stays reserved. */
export const LIVE_STATUSES: SendStatus[] = [SEND_STATUS.INITIALIZED, SEND_STATUS.BROADCASTING];

/** How often a transaction is handed to the node in all: the first broadcast and rebroadcasts after
 * the node dropped it (evicted from its pool, or restarted). Past that it is only followed: it is
 * final when it lands, or when it can no longer land (its nonce used by another; its blockhash expired). */
export const MAX_BROADCASTS = 5;

/** The longest wait between two looks at a transaction that is not final. */
const MAX_BACKOFF_FACTOR = 8;

/** Where an included transaction landed and what it paid (the history reports it). */
interface LandedBlock {
  hash: string | null;
  /** ms since the epoch */
  time: number | null;
  /** wei or lamports, decimal digits */
  fee: string | null;
}

/** What one look decided, written by `record`. */
type Change =
  | { status: "INITIALIZED" | "BROADCASTING"; broadcasts: number; note: string | null; reset: boolean }
  | { status: "INCLUDED"; blockNumber: number; error: SendError | SolanaSendError | null; block?: LandedBlock }
  | { status: "FAILED"; error: SendError | SolanaSendError };

interface ClaimedSend {
  row: SentTransaction;
  leaseUntil: number;
  /** Set by `send`, read by `record`. */
  change?: Change;
}

const NONCE_USED = /nonce too low|nonce has already been used|already been used|NONCE_EXPIRED|OldNonce/i;
const NONCE_AHEAD = /nonce too high|NONCE_TOO_HIGH|future transaction/i;
const ALREADY_KNOWN = /already known|known transaction|already imported|ALREADY_EXISTS/i;

export class ChainBroadcaster extends OutboxWorker<ClaimedSend> {
  constructor(
    private readonly store: Store,
    private readonly chains: ChainRpc,
    private readonly findContractAbi: ContractAbiLookup,
    private readonly config: ChainConfig,
    private readonly logger: pino.Logger,
    clock: () => number = Date.now,
  ) {
    // Attempts are looks at a transaction; they never run out (a transaction is final when the chain
    // says so, or when it was dropped too often), and the wait between looks grows from the poll
    // interval to eight times it.
    super(
      {
        pollMs: config.pollMs,
        concurrency: 8,
        attemptTimeoutMs: config.timeoutMs * 4,
        retryBaseMs: config.pollMs,
        maxBackoffMs: config.pollMs * MAX_BACKOFF_FACTOR,
        maxAttempts: Number.MAX_SAFE_INTEGER,
      },
      clock,
    );
  }

  protected override reportFailure(error: unknown, item?: ClaimedSend): void {
    this.logger.error({ err: error, sendTransactionStatusId: item?.row.id }, "chain broadcaster failed; retrying at the next poll");
  }

  protected override attemptOf({ row }: ClaimedSend): number {
    return row.attempts + 1;
  }

  protected override async claim(limit: number): Promise<ClaimedSend[]> {
    const now = this.clock();
    // Committed rows only (the reader): a row of an activity still in its transaction is not there yet.
    const due = await this.store.reader
      .selectFrom("sent_transactions as s")
      .selectAll("s")
      .where("s.status", "in", LIVE_STATUSES)
      .where("s.next_attempt_at", "<=", now)
      .where((eb) => eb.or([eb("s.lease_until", "is", null), eb("s.lease_until", "<", now)]))
      // A sender's transactions are first broadcast in nonce order: one waits for those before it.
      .where(({ eb, not, exists, selectFrom }) =>
        eb.or([
          eb("s.status", "!=", SEND_STATUS.INITIALIZED),
          not(
            exists(
              selectFrom("sent_transactions as e")
                .select("e.id")
                .whereRef("e.caip2", "=", "s.caip2")
                .whereRef("e.from_address", "=", "s.from_address")
                .where("e.status", "=", SEND_STATUS.INITIALIZED)
                .whereRef("e.nonce", "<", "s.nonce"),
            ),
          ),
        ]),
      )
      .orderBy("s.next_attempt_at")
      .orderBy("s.nonce")
      .limit(limit)
      .execute();
    const claimed: ClaimedSend[] = [];
    for (const row of due) {
      const claimedAt = this.clock();
      const leaseUntil = claimedAt + this.config.timeoutMs * 8;
      const update = await this.store.transact("exclusive", (trx) =>
        trx
          .updateTable("sent_transactions")
          .set({ lease_until: leaseUntil })
          .where("id", "=", row.id)
          .where("status", "=", row.status)
          .where((eb) => eb.or([eb("lease_until", "is", null), eb("lease_until", "<", claimedAt)]))
          .executeTakeFirst(),
      );
      if (Number(update.numUpdatedRows) === 1) claimed.push({ row, leaseUntil });
    }
    return claimed;
  }

  protected override async send(item: ClaimedSend): Promise<SendOutcome> {
    const { row } = item;
    try {
      if (row.caip2.startsWith("solana:")) {
        // Solana's looks are its own (solana-broadcast.ts); leases, backoff and records are shared.
        item.change = await lookAtSolanaSend(await this.chains.solana(row.caip2), row, MAX_BROADCASTS);
      } else {
        const { client } = await this.chains.evm(row.caip2);
        item.change = row.status === SEND_STATUS.INITIALIZED ? await this.broadcast(client, row, false) : await this.follow(client, row);
      }
    } catch (error) {
      // The node was removed from the settings, or does not answer: the transaction waits for it.
      const message = error instanceof ServiceError ? error.message : String(error);
      item.change = { status: row.status as "INITIALIZED", broadcasts: row.broadcasts, note: message, reset: false };
      return { kind: "retry", status: null, error: message };
    }
    if (item.change.status === SEND_STATUS.INCLUDED) return { kind: "delivered", status: null };
    if (item.change.status === SEND_STATUS.FAILED) return { kind: "failed", status: null, error: item.change.error.message };
    return { kind: "retry", status: null, error: item.change.note ?? item.change.status };
  }

  /** Hands the signed transaction to the node (again, when `again`). */
  private async broadcast(client: PublicClient, row: SentTransaction, again: boolean): Promise<Change> {
    const broadcasts = row.broadcasts + 1;
    try {
      await client.request({ method: "eth_sendRawTransaction", params: [row.signed_transaction as Hex] });
      return { status: "BROADCASTING", broadcasts, note: again ? "sent again: the node had dropped it" : null, reset: true };
    } catch (error) {
      const failure = rpcFailureOf(error);
      if (failure.kind === "unreachable")
        return { status: row.status as "INITIALIZED", broadcasts: row.broadcasts, note: failure.message, reset: false };
      if (ALREADY_KNOWN.test(failure.message)) return { status: "BROADCASTING", broadcasts, note: null, reset: true };
      // A node that mines on arrival may answer a reverted transaction with an error although it mined
      // it (Hardhat does): a receipt wins over the error.
      const receipt = await this.receipt(client, row).catch(() => null);
      if (receipt) return receipt;
      // A rebroadcast: the transaction was accepted once and may still sit in another node's pool, so
      // a refusal (the node busy, its pool full, a fee floor raised) decides nothing; the next look
      // reads the chain (a used nonce without our receipt is a replacement).
      if (again) return { status: "BROADCASTING", broadcasts: row.broadcasts, note: `not sent again: ${failure.message}`, reset: false };
      if (NONCE_AHEAD.test(failure.message)) return this.waitForEarlierNonces(row, failure.message);
      if (NONCE_USED.test(failure.message))
        return {
          status: "FAILED",
          error: { message: `nonce ${row.nonce} of ${row.from_address} was used by another transaction (replaced): ${failure.message}` },
        };
      return { status: "FAILED", error: { message: `the node refused the transaction: ${failure.message}` } };
    }
  }

  private async follow(client: PublicClient, row: SentTransaction): Promise<Change> {
    const waiting = (note: string | null): Change => ({ status: "BROADCASTING", broadcasts: row.broadcasts, note, reset: false });
    try {
      const receipt = await this.receipt(client, row);
      if (receipt) return receipt;
      const known = await client.request({ method: "eth_getTransactionByHash", params: [row.tx_hash as Hex] });
      if (known) return waiting(null);
      // Unknown to the node. If the sender's mined nonce is past ours, another transaction took it —
      // unless ours was mined in the moment between the two questions: its receipt is asked once more.
      const mined = await client.request({ method: "eth_getTransactionCount", params: [row.from_address as Hex, "latest"] });
      if (BigInt(mined) > BigInt(row.nonce ?? 0)) {
        return (
          (await this.receipt(client, row)) ?? {
            status: "FAILED",
            error: { message: `nonce ${row.nonce} of ${row.from_address} was used by another transaction (replaced)` },
          }
        );
      }
      // Dropped too often: not sent again, but followed until it is mined or its nonce is used.
      if (row.broadcasts >= MAX_BROADCASTS)
        return waiting(`dropped by the node ${row.broadcasts} times; not sent again, followed until mined or replaced`);
      return await this.broadcast(client, row, true);
    } catch (error) {
      return waiting(rpcFailureOf(error).message);
    }
  }

  /**
   * A transaction whose nonce is ahead of the chain's next one waits for the nonces before it: sends of
   * Sigil's still on their way, or transactions the caller sends elsewhere. Once no live send of Sigil's
   * holds an earlier nonce, it waits at most SIGIL_CHAIN_NONCE_WAIT_MS from its creation, then it is
   * FAILED (never broadcast, so it cannot be mined) and its nonce is given back.
   */
  private async waitForEarlierNonces(row: SentTransaction, refusal: string): Promise<Change> {
    const waiting: Change = { status: "INITIALIZED", broadcasts: row.broadcasts, note: refusal, reset: false };
    if (this.clock() - row.created_at < this.config.nonceWaitMs) return waiting;
    const earlier = await this.store.reader
      .selectFrom("sent_transactions")
      .select("id")
      .where("caip2", "=", row.caip2)
      .where("from_address", "=", row.from_address)
      .where("status", "in", LIVE_STATUSES)
      .where("nonce", "<", row.nonce ?? 0)
      .executeTakeFirst();
    if (earlier) return waiting;
    return {
      status: "FAILED",
      error: {
        message:
          `nonce ${row.nonce} of ${row.from_address} is ahead of the chain's next nonce and no earlier nonce arrived within ` +
          `${this.config.nonceWaitMs} ms (SIGIL_CHAIN_NONCE_WAIT_MS); not sent: ${refusal}`,
      },
    };
  }

  /** INCLUDED with the block, when the transaction has a receipt; a revert with its decoded reason. */
  private async receipt(client: PublicClient, row: SentTransaction): Promise<Change | null> {
    const receipt = await client.request({ method: "eth_getTransactionReceipt", params: [row.tx_hash as Hex] });
    if (!receipt) return null;
    const blockNumber = Number(BigInt(receipt.blockNumber));
    const block = await this.landedBlock(client, receipt);
    if (receipt.status === "0x1") return { status: "INCLUDED", blockNumber, error: null, block };
    return { status: "INCLUDED", blockNumber, error: await this.revertReason(client, row, BigInt(receipt.blockNumber)), block };
  }

  /** The block's hash and time and the fee paid (gas used × effective gas price), for the history. */
  private async landedBlock(
    client: PublicClient,
    receipt: { blockHash: Hex; gasUsed: Hex; effectiveGasPrice?: Hex },
  ): Promise<LandedBlock> {
    const header = await client.request({ method: "eth_getBlockByHash", params: [receipt.blockHash, false] }).catch(() => null);
    const fee = receipt.effectiveGasPrice !== undefined ? (BigInt(receipt.gasUsed) * BigInt(receipt.effectiveGasPrice)).toString() : null;
    return { hash: receipt.blockHash, time: header ? Number(BigInt(header.timestamp)) * 1000 : null, fee };
  }

  /**
   * Why a mined transaction reverted: its call replayed (eth_call) on the state before its block. A
   * transaction earlier in the same block could make the replay differ; the reason is then the best
   * the node can give, and a replay that does not revert reports a plain "execution reverted".
   */
  private async revertReason(client: PublicClient, row: SentTransaction, blockNumber: bigint): Promise<SendError> {
    const transaction = parseTransaction(row.signed_transaction as Hex);
    let data: Hex | undefined;
    try {
      await client.call({
        account: row.from_address as Hex,
        to: transaction.to ?? undefined,
        data: transaction.data,
        value: transaction.value,
        gas: transaction.gas,
        blockNumber: blockNumber > 0n ? blockNumber - 1n : blockNumber,
      });
    } catch (error) {
      const failure = rpcFailureOf(error);
      data = failure.kind === "rejected" ? failure.data : undefined;
    }
    const abi = row.to_address ? await this.findContractAbi(this.store.reader, row.organization_id, row.to_address) : undefined;
    return revertError("execution reverted on chain", decodeRevert(data, row.to_address ?? undefined, abi));
  }

  protected override async record(item: ClaimedSend, result: AttemptResult): Promise<void> {
    const { row, leaseUntil, change } = item;
    const { now, attempt, retryInMs } = result;
    const fenced = (trx: Tx) => trx.updateTable("sent_transactions").where("id", "=", row.id).where("lease_until", "=", leaseUntil);
    if (!change) {
      // The look ended without a verdict (its deadline passed, or something unexpected failed): as it
      // was, looked at again after the backoff. The error is not stored: it may quote the node's URL.
      await this.store.transact("exclusive", (trx) =>
        fenced(trx)
          .set({ attempts: attempt, next_attempt_at: now + retryInMs, lease_until: null })
          .execute(),
      );
      this.logger.warn(
        { sendTransactionStatusId: row.id, caip2: row.caip2 },
        "transaction not looked at: the attempt ended without an answer",
      );
      return;
    }
    const fields = {
      sendTransactionStatusId: row.id,
      organizationId: row.organization_id,
      caip2: row.caip2,
      txHash: row.tx_hash,
      nonce: row.nonce,
    };
    if (change.status === "INCLUDED" || change.status === "FAILED") {
      await this.store.transact("exclusive", (trx) =>
        recordWithStatusEvent(
          trx,
          row,
          change,
          now,
          fenced(trx).set({
            status: change.status,
            error: change.error ? JSON.stringify(change.error) : null,
            block_number: change.status === "INCLUDED" ? change.blockNumber : null,
            ...(change.status === "INCLUDED" && change.block
              ? { block_hash: change.block.hash, block_time: change.block.time, fee: change.block.fee }
              : {}),
            attempts: attempt,
            lease_until: null,
            updated_at: now,
          }),
        ),
      );
      if (change.status === "INCLUDED")
        this.logger.info({ ...fields, blockNumber: change.blockNumber, reverted: !!change.error }, "transaction included");
      else this.logger.warn({ ...fields, error: change.error.message }, "transaction failed");
      return;
    }
    // Not final: looked at again after the backoff, which starts over when the status changed.
    const changed = change.status !== row.status || change.broadcasts !== row.broadcasts;
    const attempts = change.reset ? 0 : attempt;
    const wait = change.reset ? this.config.pollMs : retryInMs;
    await this.store.transact("exclusive", (trx) =>
      recordWithStatusEvent(
        trx,
        row,
        change,
        now,
        fenced(trx).set({
          status: change.status,
          broadcasts: change.broadcasts,
          attempts,
          next_attempt_at: now + wait,
          lease_until: null,
          updated_at: changed ? now : row.updated_at,
        }),
      ),
    );
    if (changed)
      this.logger.info(
        { ...fields, broadcasts: change.broadcasts, note: change.note },
        change.broadcasts > 1 ? "transaction sent again" : "transaction broadcast",
      );
    else if (change.note) this.logger.debug({ sendTransactionStatusId: row.id, note: change.note }, "transaction not final yet");
  }
}
