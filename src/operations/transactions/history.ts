// Transaction history (docs/chain-assets.md): what a self-hosted server can answer without an indexer —
// every transaction Sigil itself sent from a wallet account on a chain and that landed there (the
// sent_transactions rows the chain broadcaster brought to INCLUDED), newest first, with its block, fee,
// native and token transfers, and the activity that sent it. Transactions sent by anything
// else are not listed: no node can be asked for "every transaction of an address".
import { address as solanaAddress, type Rpc, type SolanaRpcApi } from "@solana/kit";
import { decodeFunctionData, erc20Abi, parseTransaction, type Hex } from "viem";
import { canonicalCaip2 } from "../../config.js";
import { serviceError } from "../../errors.js";
import type { Db } from "../../store/handles.js";
import type { SentTransaction } from "../../store/schema.js";
import { chainAssets, displayAmount, nativeAsset, tokenReference, type AssetMetadata } from "../../chains/assets.js";
import { fromWire, signersOf, systemTransfersOf, tokenAccountOf, tokenTransfersOf, type TokenTransfer } from "../../chains/solana-send.js";
import { defineQuery, type QueryContext } from "../../registry/registry.js";
import { SEND_STATUS } from "../../services/chain-broadcaster.js";
import { pageSize, type Pagination } from "../resources.js";
import { namespaceOf, supportedAssets, walletAccountOn } from "./balances.js";

type Row = SentTransaction & { fingerprint: string | null };

interface Page {
  rows: Row[];
  pageInfo: { hasNextPage: boolean; hasPreviousPage: boolean; startCursor?: string; endCursor?: string };
}

/**
 * One page of the address's landed transactions, newest first. Cursors are sendTransactionStatusIds of
 * the same list: `after` pages to older transactions, `before` to newer ones.
 */
async function landedPage(db: Db, organizationId: string, caip2: string, from: string, pagination: Pagination | undefined): Promise<Page> {
  const { limit, before, after } = pagination ?? {};
  if (before && after) throw serviceError("REQUEST_INVALID", "paginationOptions takes before or after, not both");
  const size = pageSize(limit);
  const scope = db
    .selectFrom("sent_transactions as s")
    .leftJoin("activities as a", "a.id", "s.activity_id")
    .selectAll("s")
    .select("a.fingerprint")
    .where("s.organization_id", "=", organizationId)
    .where("s.caip2", "=", caip2)
    .where("s.from_address", "=", from)
    .where("s.status", "=", SEND_STATUS.INCLUDED);
  const cursorId = before || after;
  const cursor = cursorId ? await scope.where("s.id", "=", cursorId).executeTakeFirst() : undefined;
  if (cursorId && !cursor)
    throw serviceError("REQUEST_INVALID", `pagination cursor ${cursorId} is not a transaction of this address's history on ${caip2}`);
  // Newest first is (created_at, id) descending; `before` reads the other way and turns the page around.
  const older = !before;
  const op = older ? "<" : ">";
  const direction = older ? "desc" : "asc";
  const from_ = cursor
    ? scope.where((eb) =>
        eb.or([eb("s.created_at", op, cursor.created_at), eb.and([eb("s.created_at", "=", cursor.created_at), eb("s.id", op, cursor.id)])]),
      )
    : scope;
  const read = await from_
    .orderBy("s.created_at", direction)
    .orderBy("s.id", direction)
    .limit(size + 1)
    .execute();
  const more = read.length > size;
  const rows = read.slice(0, size);
  if (!older) rows.reverse();
  return {
    rows,
    pageInfo: {
      // Past a cursor the cursor's own transaction lies on the other side.
      hasNextPage: older ? more : !!cursor,
      hasPreviousPage: older ? !!cursor : more,
      ...(rows.length ? { startCursor: rows[0]!.id, endCursor: rows[rows.length - 1]!.id } : {}),
    },
  };
}

const rfc3339 = (ms: number | null) => (ms === null ? "" : new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z"));

const transfer = (direction: "IN" | "OUT", asset: AssetMetadata | undefined, amount: bigint, counterparty: string) => ({
  direction,
  ...(asset ? { asset: { caip19: asset.caip19, symbol: asset.symbol, name: asset.name, decimals: asset.decimals } } : {}),
  amount: amount.toString(),
  counterparty,
  ...(asset ? { display: { crypto: displayAmount(amount, asset.decimals) } } : {}),
});

const turnkeyOf = (row: Row) => ({
  sponsored: false,
  ...(row.fingerprint ? { activityFingerprint: row.fingerprint } : {}),
  submittedAt: rfc3339(row.created_at),
});

/** What the history says of a block it has not recorded (a row from before Sigil recorded blocks). */
interface BlockFacts {
  hash: string | null;
  time: number | null;
  fee: string | null;
}

async function ethereumItems(ctx: QueryContext, caip2: string, owner: string, rows: Row[]) {
  const { client } = await ctx.chains.evm(caip2);
  const native = nativeAsset(caip2, ctx.chains.assets);
  const tokens = new Map(
    chainAssets(caip2, ctx.chains.assets).flatMap((asset) => {
      const token = tokenReference(asset);
      return token ? [[token.address.toLowerCase(), asset] as const] : [];
    }),
  );
  // FINALIZED up to the node's finalized block; a node that names none finalizes nothing.
  const finalized = await client
    .getBlock({ blockTag: "finalized" })
    .then((b) => b.number)
    .catch(() => -1n);
  return Promise.all(
    rows.map(async (row) => {
      const facts: BlockFacts = row.block_hash
        ? { hash: row.block_hash, time: row.block_time, fee: row.fee }
        : await client
            .getTransactionReceipt({ hash: row.tx_hash as Hex })
            .then(async (r) => ({
              hash: r.blockHash,
              time: Number((await client.getBlock({ blockHash: r.blockHash })).timestamp) * 1000,
              fee: (r.gasUsed * r.effectiveGasPrice).toString(),
            }))
            .catch(() => ({ hash: null, time: null, fee: null }));
      const transaction = parseTransaction(row.signed_transaction as Hex);
      const transfers = [];
      if (transaction.value && transaction.value > 0n && transaction.to)
        transfers.push(transfer("OUT", native, transaction.value, transaction.to));
      const token = transaction.to ? tokens.get(transaction.to.toLowerCase()) : undefined;
      if (token && transaction.data) {
        try {
          const call = decodeFunctionData({ abi: erc20Abi, data: transaction.data });
          if (call.functionName === "transfer") transfers.push(transfer("OUT", token, call.args[1], call.args[0]));
        } catch {
          // not an ERC-20 call: no token transfer to report
        }
      }
      return {
        transactionHash: row.tx_hash!,
        block: { number: String(row.block_number), hash: facts.hash ?? "", timestamp: rfc3339(facts.time) },
        status: BigInt(row.block_number ?? 0) <= finalized ? "FINALIZED" : "CONFIRMED",
        origin: "TURNKEY",
        from: owner,
        ...(row.to_address ? { to: row.to_address } : {}),
        fee: { amount: facts.fee ?? "0", caip19: native?.caip19 ?? "" },
        transfers,
        turnkey: turnkeyOf(row),
      };
    }),
  );
}

/** Mint and owner of each token account these transfers name, as the node holds them now (closed ones are absent). */
async function tokenAccounts(rpc: Rpc<SolanaRpcApi>, transfers: TokenTransfer[]): Promise<Map<string, { mint: string; owner: string }>> {
  const wanted = [...new Set(transfers.flatMap((t) => [t.source, t.destination]))];
  const found = new Map<string, { mint: string; owner: string }>();
  // getMultipleAccounts takes at most 100 addresses a call.
  for (let i = 0; i < wanted.length; i += 100) {
    const chunk = wanted.slice(i, i + 100);
    const answer = await rpc
      .getMultipleAccounts(
        chunk.map((a) => solanaAddress(a)),
        { encoding: "base64" },
      )
      .send()
      .catch(() => null);
    answer?.value.forEach((account, j) => {
      const held = account ? tokenAccountOf(Buffer.from(account.data[0], "base64")) : undefined;
      if (held) found.set(chunk[j]!, held);
    });
  }
  return found;
}

async function solanaItems(ctx: QueryContext, caip2: string, owner: string, rows: Row[]) {
  const { rpc } = await ctx.chains.solana(caip2);
  const native = nativeAsset(caip2, ctx.chains.assets);
  const listedTokens = new Map(
    chainAssets(caip2, ctx.chains.assets).flatMap((asset) => {
      const token = tokenReference(asset);
      return token?.kind === "token" ? [[token.address, asset] as const] : [];
    }),
  );
  const statuses = rows.length
    ? (
        await rpc
          .getSignatureStatuses(
            rows.map((r) => r.tx_hash as never),
            { searchTransactionHistory: true },
          )
          .send()
          .catch(() => null)
      )?.value
    : [];
  const transactions = rows.map((row) => fromWire(row.signed_transaction!));
  const tokenMoves = transactions.map(tokenTransfersOf);
  const held = await tokenAccounts(rpc, tokenMoves.flat());
  return rows.map((row, i) => {
    const transaction = transactions[i]!;
    const nativeTransfers = systemTransfersOf(transaction).flatMap((t) => [
      ...(t.from === owner ? [transfer("OUT", native, t.lamports, t.to)] : []),
      ...(t.to === owner ? [transfer("IN", native, t.lamports, t.from)] : []),
    ]);
    // A token account's owner is the party; where the node no longer has the account (closed since),
    // the signing authority stands for the source's owner and the account itself for the destination.
    const tokenTransfers = tokenMoves[i]!.flatMap((t) => {
      const [source, destination] = [held.get(t.source), held.get(t.destination)];
      const from = source?.owner ?? t.authority;
      const to = destination?.owner ?? t.destination;
      const asset = listedTokens.get(t.mint ?? source?.mint ?? destination?.mint ?? "");
      return [
        ...(from === owner ? [transfer("OUT", asset, t.amount, to)] : []),
        ...(to === owner ? [transfer("IN", asset, t.amount, from)] : []),
      ];
    });
    return {
      signature: row.tx_hash!,
      block: { number: String(row.block_number), hash: row.block_hash ?? "", timestamp: rfc3339(row.block_time) },
      status: statuses?.[i]?.confirmationStatus === "finalized" ? "FINALIZED" : "CONFIRMED",
      origin: "TURNKEY",
      feePayer: row.from_address,
      signers: signersOf(transaction),
      fee: { amount: row.fee ?? "0", caip19: native?.caip19 ?? "" },
      transfers: [...nativeTransfers, ...tokenTransfers],
      turnkey: turnkeyOf(row),
    };
  });
}

async function history(
  ctx: QueryContext,
  body: { address: string; caip2: string; paginationOptions?: Pagination },
  expected: "eip155" | "solana",
) {
  const caip2 = canonicalCaip2(body.caip2);
  if (namespaceOf(caip2) !== expected)
    throw serviceError("REQUEST_INVALID", `caip2 ${caip2} is not ${expected === "eip155" ? "an EVM chain" : "a Solana cluster"}`);
  supportedAssets(ctx.chains, caip2);
  const owner = await walletAccountOn(ctx.db, ctx.organizationId, body.address, caip2);
  const { rows, pageInfo } = await landedPage(ctx.db, ctx.organizationId, caip2, owner, body.paginationOptions);
  return {
    transactions: expected === "eip155" ? await ethereumItems(ctx, caip2, owner, rows) : await solanaItems(ctx, caip2, owner, rows),
    pageInfo,
  };
}

export const historyOperations = [
  defineQuery({
    name: "list_eth_transaction_history",
    summary:
      "The transactions this server sent from a wallet account on an EVM chain and that landed, newest first: block, fee, transfers, the sending activity. Transactions sent elsewhere are not listed (no indexer).",
    run: (ctx, body) => history(ctx, body, "eip155"),
  }),
  defineQuery({
    name: "list_sol_transaction_history",
    summary:
      "The transactions this server sent with a wallet account as fee payer on a Solana cluster and that landed, newest first: slot, fee, signers, SOL and SPL token transfers, the sending activity. Transactions sent elsewhere are not listed (no indexer).",
    run: (ctx, body) => history(ctx, body, "solana"),
  }),
];
