// Nonces of the addresses Sigil sends from. The nonce a send gets is the smallest one, at or above
// the node's pending nonce for the address, that no send of Sigil's still in flight (INITIALIZED or
// BROADCASTING) holds. So concurrent sends get distinct nonces without gaps; a send that failed
// without using its nonce gives it back (the next send takes it, and anything queued behind it in the
// node can be mined); and a nonce used outside Sigil (another wallet holding the same key) is skipped,
// since the node counts it. Reservations are made inside the activity's transaction, under the
// organization's lock and a row lock on the address's reservation (nonce_reservations): two server
// processes on one PostgreSQL database take their turns there.
import { sql } from "kysely";
import type { PublicClient } from "viem";
import { serviceError } from "../../errors.js";
import type { Dialect, Db, Tx } from "../../store/handles.js";
import { LIVE_STATUSES, SEND_STATUS } from "../../services/chain-broadcaster.js";
import { unavailable } from "../../services/chain-rpc.js";

/** The node's pending nonce of `address`: its mined transactions and those in its pool. */
export async function pendingNonce(client: PublicClient, caip2: string, address: `0x${string}`): Promise<number> {
  try {
    return await client.getTransactionCount({ address, blockTag: "pending" });
  } catch (error) {
    throw unavailable(caip2, error);
  }
}

/** The nonce the next send from `address` gets (see above); `address` EIP-55 checksummed. */
export async function nextNonce(db: Db | Tx, client: PublicClient, caip2: string, address: `0x${string}`): Promise<number> {
  return firstFreeNonce(db, caip2, address, await pendingNonce(client, caip2, address));
}

/**
 * The smallest nonce at or above the node's `pending` one that no send of Sigil's in flight holds, nor
 * one of Sigil's that was mined. `pending` is read before the organization's lock (the precheck), so
 * sends committed and mined meanwhile may have used nonces past it: their INCLUDED rows say so.
 */
export async function firstFreeNonce(db: Db | Tx, caip2: string, address: `0x${string}`, pending: number): Promise<number> {
  // A transaction carrying its sender's own EIP-7702 authorization holds two nonces (nonce_count 2),
  // so one just below the pending nonce may still hold it.
  const held = await db
    .selectFrom("sent_transactions")
    .select(["nonce", "nonce_count"])
    .where("caip2", "=", caip2)
    .where("from_address", "=", address)
    .where("status", "in", [...LIVE_STATUSES, SEND_STATUS.INCLUDED])
    .where("nonce", ">=", pending - 1)
    .orderBy("nonce")
    .execute();
  let nonce = pending;
  for (const { nonce: taken, nonce_count } of held) {
    if (taken === null) continue;
    if (taken <= nonce && nonce < taken + nonce_count) nonce = taken + nonce_count;
    else if (taken > nonce) break;
  }
  return nonce;
}

/**
 * Takes `nonce` (and the `count - 1` after it) for a send from `address`: locks the address's reservation row (made on first use),
 * and, for a nonce Sigil chose (`chosen`), checks that no send in flight holds it. A nonce the request
 * named is taken as asked: a second transaction with a nonce in flight replaces the first, or is
 * refused by the node, and the broadcaster reports which.
 */
export async function reserveNonce(
  trx: Tx,
  dialect: Dialect,
  caip2: string,
  address: string,
  nonce: number,
  chosen: boolean,
  now: number,
  count = 1,
) {
  await trx
    .insertInto("nonce_reservations")
    .values({ caip2, address, next_nonce: 0, updated_at: now })
    .onConflict((oc) => oc.columns(["caip2", "address"]).doNothing())
    .execute();
  let row = trx.selectFrom("nonce_reservations").select("next_nonce").where("caip2", "=", caip2).where("address", "=", address);
  if (dialect === "postgres") row = row.forUpdate();
  const { next_nonce } = await row.executeTakeFirstOrThrow();
  if (chosen) {
    const holder = await trx
      .selectFrom("sent_transactions")
      .select("id")
      .where("caip2", "=", caip2)
      .where("from_address", "=", address)
      .where("status", "in", LIVE_STATUSES)
      // Its nonces [nonce, nonce + nonce_count) meet the ones asked for.
      .where("nonce", "<", nonce + count)
      .where(sql<boolean>`nonce + nonce_count > ${nonce}`)
      .executeTakeFirst();
    if (holder)
      throw serviceError(
        "NONCE_RESERVATION_CONFLICT",
        `nonce ${nonce} of ${address} on ${caip2} was reserved by send ${holder.id} meanwhile; nothing was signed: send again`,
      );
  }
  await trx
    .updateTable("nonce_reservations")
    .set({ next_nonce: Math.max(next_nonce, nonce + count), updated_at: now })
    .where("caip2", "=", caip2)
    .where("address", "=", address)
    .execute();
}
