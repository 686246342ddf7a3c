// HD wallets: a mnemonic sealed under the master key, and accounts derived from it (curve, BIP-32
// path, address format). The mnemonic is opened only inside the activity that needs it and never
// leaves the process in the clear.
import { serviceError } from "../../errors.js";
import type { Db, Tx } from "../../store/handles.js";
import type { WalletAccountsTable, WalletsTable } from "../../store/schema.js";
import { DerivationError, deriveKeyPair, generateMnemonic, mnemonicToSeed, type MnemonicLanguage } from "../../crypto/hd.js";
import { UnsupportedAddressError, address } from "../../crypto/addresses.js";
import type { SecretIdentity } from "../../crypto/envelope.js";
import { defineActivity, defineQuery, type ActivityContext, type ParametersOf } from "../../registry/registry.js";
import { requireName } from "../identity/credentials.js";
import { distinct, readPage, requireAtMost, timestamp } from "../resources.js";
import { newId } from "../../store/ids.js";

/** An account to derive, as create_wallet and create_wallet_accounts both send it. */
export type WalletAccountParams = ParametersOf<"create_wallet">["accounts"][number];

export const accountKeyIdentity = (account: Pick<WalletAccountsTable, "organization_id" | "id">): SecretIdentity => ({
  organizationId: account.organization_id,
  kind: "wallet_account.private_key",
  resourceId: account.id,
});

export const mnemonicIdentity = (wallet: Pick<WalletsTable, "organization_id" | "id">): SecretIdentity => ({
  organizationId: wallet.organization_id,
  kind: "wallet.mnemonic",
  resourceId: wallet.id,
});

export function renderWallet(row: WalletsTable) {
  return {
    walletId: row.id,
    walletName: row.name,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
    exported: row.exported === 1,
    imported: row.imported === 1,
  };
}

/** Every wallet of the organization, oldest first (names and flags; no secret, no account). */
export async function listWallets(db: Db | Tx, organizationId: string) {
  const rows = await db
    .selectFrom("wallets")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .orderBy("created_at")
    .orderBy("id")
    .execute();
  return rows.map(renderWallet);
}

export function renderWalletAccount(row: WalletAccountsTable, wallet?: WalletsTable) {
  return {
    walletAccountId: row.id,
    organizationId: row.organization_id,
    walletId: row.wallet_id,
    curve: row.curve,
    pathFormat: row.path_format,
    path: row.path,
    addressFormat: row.address_format,
    address: row.address,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
    publicKey: row.public_key,
    ...(row.name !== null ? { name: row.name } : {}),
    ...(wallet ? { walletDetails: renderWallet(wallet) } : {}),
  };
}

/** `wallet` / `wallets` of the policy language. */
export const walletKeyword = (row: Pick<WalletsTable, "id" | "imported" | "exported" | "name">) => ({
  id: row.id,
  imported: row.imported === 1,
  exported: row.exported === 1,
  label: row.name,
});

export async function walletContext(trx: Db | Tx, organizationId: string, walletId: string): Promise<Record<string, unknown>> {
  const row = await trx
    .selectFrom("wallets")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", walletId)
    .executeTakeFirst();
  return row ? { wallet: walletKeyword(row) } : {};
}

export async function requireWallet(db: Db | Tx, organizationId: string, walletId: string): Promise<WalletsTable> {
  const row = await db
    .selectFrom("wallets")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", walletId)
    .executeTakeFirst();
  if (!row) throw serviceError("WALLET_NOT_FOUND", `wallet ${walletId} not found`);
  return row;
}

async function requireUniqueWalletName(ctx: ActivityContext, name: string, exceptId?: string) {
  let query = ctx.trx.selectFrom("wallets").select("id").where("organization_id", "=", ctx.organizationId).where("name", "=", name);
  if (exceptId) query = query.where("id", "!=", exceptId);
  if (await query.executeTakeFirst()) throw serviceError("WALLET_ALREADY_EXISTS", `a wallet named "${name}" already exists`);
}

/** Derivation and address errors are the caller's: they name the account and what to change. */
function asInvalidArgument<T>(where: string, f: () => T): T {
  try {
    return f();
  } catch (error) {
    if (error instanceof DerivationError || error instanceof UnsupportedAddressError)
      throw serviceError(
        error instanceof DerivationError ? "INVALID_DERIVATION_PATH" : "UNSUPPORTED_ADDRESS_FORMAT",
        `${where}: ${error.message}`,
      );
    throw error;
  }
}

/**
 * Derives the accounts and, unless `persist` is false, stores those not stored yet. An account the
 * wallet already has (same curve, path and format) is returned as it is: derivation is deterministic.
 */
async function deriveAccounts(
  ctx: ActivityContext,
  wallet: WalletsTable,
  seed: Uint8Array,
  accounts: WalletAccountParams[],
  persist: boolean,
): Promise<string[]> {
  const addresses: string[] = [];
  for (const [i, account] of accounts.entries()) {
    const where = `accounts[${i}]`;
    if (account.pathFormat !== "PATH_FORMAT_BIP32") throw serviceError("REQUEST_INVALID", `${where}.pathFormat must be PATH_FORMAT_BIP32`);
    const { publicKey, privateKey } = asInvalidArgument(where, () => deriveKeyPair(seed, account.curve, account.path));
    const accountAddress = asInvalidArgument(where, () => address(account.curve, account.addressFormat, publicKey));
    addresses.push(accountAddress);
    if (!persist) continue;
    const existing = await ctx.trx
      .selectFrom("wallet_accounts")
      .select("id")
      .where("wallet_id", "=", wallet.id)
      .where("curve", "=", account.curve)
      .where("path", "=", account.path)
      .where("address_format", "=", account.addressFormat)
      .executeTakeFirst();
    if (existing) continue;
    const id = newId();
    await ctx.trx
      .insertInto("wallet_accounts")
      .values({
        id,
        organization_id: ctx.organizationId,
        wallet_id: wallet.id,
        curve: account.curve,
        path_format: account.pathFormat,
        path: account.path,
        address_format: account.addressFormat,
        address: accountAddress,
        public_key: Buffer.from(publicKey).toString("hex"),
        sealed_private_key: ctx.env.keyring.seal(privateKey, accountKeyIdentity({ organization_id: ctx.organizationId, id })),
        name: account.name ?? null,
        created_at: ctx.now,
        updated_at: ctx.now,
      })
      .execute();
  }
  return addresses;
}

function walletSeed(ctx: ActivityContext, wallet: WalletsTable): Uint8Array {
  return mnemonicToSeed(ctx.env.keyring.open(wallet.sealed_mnemonic, mnemonicIdentity(wallet)).toString("utf8"));
}

const MNEMONIC_LENGTHS = [12, 15, 18, 21, 24];

/** A wallet whose keys would be lost for good must have been exported, unless the caller says otherwise. */
function requireExportedOrForced(wallet: WalletsTable, force: boolean | undefined, what: string) {
  if (wallet.exported !== 1 && force !== true) {
    throw serviceError(
      "WALLET_NOT_EXPORTED",
      `${what} of wallet ${wallet.id}, which has never been exported: its keys would be lost for good. Export it first, or pass deleteWithoutExport: true`,
    );
  }
}

/** A new wallet as create_wallet, or create_sub_organization (V4 and later) for the sub-organization's first, sends it. */
export type NewWalletParams = ParametersOf<"create_wallet"> | NonNullable<ParametersOf<"create_sub_organization">["wallet"]>;

/** A new HD wallet of `ctx.organizationId` (a fresh mnemonic, sealed) with its first accounts. */
export async function createWallet(
  ctx: ActivityContext,
  p: NewWalletParams,
  field = "",
  imported?: { mnemonic: string; language: MnemonicLanguage },
): Promise<{ walletId: string; addresses: string[] }> {
  const name = requireName(p.walletName, `${field}walletName`);
  requireAtMost(p.accounts, `${field}accounts`);
  const words = p.mnemonicLength ?? 12;
  if (!imported && !MNEMONIC_LENGTHS.includes(words))
    throw serviceError("REQUEST_INVALID", `${field}mnemonicLength must be one of ${MNEMONIC_LENGTHS.join(", ")}, got ${words}`);
  await requireUniqueWalletName(ctx, name);
  const language: MnemonicLanguage = imported?.language ?? "MNEMONIC_LANGUAGE_ENGLISH";
  const mnemonic = imported?.mnemonic ?? generateMnemonic(words as 12, language);
  const id = newId();
  const row: WalletsTable = {
    id,
    organization_id: ctx.organizationId,
    name,
    sealed_mnemonic: ctx.env.keyring.seal(mnemonic, { organizationId: ctx.organizationId, kind: "wallet.mnemonic", resourceId: id }),
    mnemonic_language: language,
    imported: imported ? 1 : 0,
    exported: 0,
    created_at: ctx.now,
    updated_at: ctx.now,
  };
  await ctx.trx.insertInto("wallets").values(row).execute();
  const addresses = await deriveAccounts(ctx, row, mnemonicToSeed(mnemonic), p.accounts, true);
  return { walletId: id, addresses };
}

export const walletOperations = [
  defineActivity({
    name: "create_wallet",
    summary: "Create an HD wallet (a new BIP-39 mnemonic, sealed at rest) and derive its first accounts.",
    resource: "WALLET",
    action: "CREATE",
    execute: (ctx, p) => createWallet(ctx, p),
  }),

  defineActivity({
    name: "create_wallet_accounts",
    summary: "Derive more accounts of a wallet (persist: false derives the addresses without storing them).",
    resource: "WALLET",
    action: "CREATE",
    policyParameters: (p) => ({ wallet_id: p.walletId }),
    policyContext: (trx, organizationId, p) => walletContext(trx, organizationId, p.walletId),
    async execute(ctx, p) {
      const wallet = await requireWallet(ctx.trx, ctx.organizationId, p.walletId);
      if (p.accounts.length === 0) throw serviceError("REQUEST_INVALID", "accounts must list at least one account");
      requireAtMost(p.accounts, "accounts");
      const addresses = await deriveAccounts(ctx, wallet, walletSeed(ctx, wallet), p.accounts, p.persist !== false);
      return { addresses };
    },
  }),

  defineActivity({
    name: "update_wallet",
    summary: "Rename a wallet.",
    resource: "WALLET",
    action: "UPDATE",
    policyParameters: (p) => ({ wallet_id: p.walletId }),
    policyContext: (trx, organizationId, p) => walletContext(trx, organizationId, p.walletId),
    async execute(ctx, p) {
      const wallet = await requireWallet(ctx.trx, ctx.organizationId, p.walletId);
      if (p.walletName !== undefined) {
        const name = requireName(p.walletName, "walletName");
        await requireUniqueWalletName(ctx, name, wallet.id);
        await ctx.trx.updateTable("wallets").set({ name, updated_at: ctx.now }).where("id", "=", wallet.id).execute();
      }
      return { walletId: wallet.id };
    },
  }),

  defineActivity({
    name: "delete_wallets",
    summary: "Delete wallets and their accounts; a wallet never exported needs deleteWithoutExport.",
    resource: "WALLET",
    action: "DELETE",
    async policyContext(trx, organizationId, p) {
      const ids = Array.isArray(p.walletIds) ? p.walletIds : [];
      const rows = ids.length
        ? await trx.selectFrom("wallets").selectAll().where("organization_id", "=", organizationId).where("id", "in", ids).execute()
        : [];
      return { wallets: rows.map(walletKeyword) };
    },
    async execute(ctx, p) {
      const ids = distinct(p.walletIds, "walletIds");
      if (ids.length === 0) throw serviceError("REQUEST_INVALID", "walletIds must list at least one wallet");
      for (const id of ids)
        requireExportedOrForced(await requireWallet(ctx.trx, ctx.organizationId, id), p.deleteWithoutExport, "deletion");
      await ctx.trx.deleteFrom("wallet_accounts").where("wallet_id", "in", ids).execute();
      await ctx.trx.deleteFrom("wallets").where("id", "in", ids).execute();
      return { walletIds: ids };
    },
  }),

  defineActivity({
    name: "delete_wallet_accounts",
    summary: "Delete wallet accounts; an account of a wallet never exported needs deleteWithoutExport.",
    resource: "WALLET",
    action: "DELETE",
    async execute(ctx, p) {
      const ids = distinct(p.walletAccountIds, "walletAccountIds");
      if (ids.length === 0) throw serviceError("REQUEST_INVALID", "walletAccountIds must list at least one account");
      const rows = await ctx.trx
        .selectFrom("wallet_accounts")
        .select(["id", "wallet_id"])
        .where("organization_id", "=", ctx.organizationId)
        .where("id", "in", ids)
        .execute();
      const missing = ids.find((id) => !rows.some((r) => r.id === id));
      if (missing !== undefined) throw serviceError("WALLET_ACCOUNT_NOT_FOUND", `wallet account ${missing} not found`);
      for (const walletId of new Set(rows.map((r) => r.wallet_id))) {
        requireExportedOrForced(await requireWallet(ctx.trx, ctx.organizationId, walletId), p.deleteWithoutExport, "deleting accounts");
      }
      await ctx.trx.deleteFrom("wallet_accounts").where("id", "in", ids).execute();
      return { walletAccountIds: ids };
    },
  }),

  defineQuery({
    name: "get_wallet",
    summary: "One wallet.",
    async run(ctx, body) {
      return { wallet: renderWallet(await requireWallet(ctx.db, ctx.organizationId, body.walletId)) };
    },
  }),

  defineQuery({
    name: "list_wallets",
    summary: "Every wallet of the organization, oldest first.",
    async run(ctx) {
      return { wallets: await listWallets(ctx.db, ctx.organizationId) };
    },
  }),

  defineQuery({
    name: "get_wallet_account",
    summary: "One account of a wallet, by address or by path.",
    async run(ctx, body) {
      await requireWallet(ctx.db, ctx.organizationId, body.walletId);
      if (!body.address === !body.path)
        throw serviceError("REQUEST_INVALID", "get_wallet_account takes an address or a path (one of them)");
      let query = ctx.db.selectFrom("wallet_accounts").selectAll().where("wallet_id", "=", body.walletId);
      query = body.address ? query.where("address", "=", body.address) : query.where("path", "=", body.path!);
      const row = await query.orderBy("created_at").orderBy("id").executeTakeFirst();
      if (!row)
        throw serviceError(
          "WALLET_ACCOUNT_NOT_FOUND",
          `wallet ${body.walletId} has no account with ${body.address ? `address ${body.address}` : `path ${body.path}`}`,
        );
      return { account: renderWalletAccount(row) };
    },
  }),

  defineQuery({
    name: "list_wallet_accounts",
    summary: "Accounts of a wallet (or of every wallet), oldest first; `after`/`before` page by account id.",
    async run(ctx, body) {
      if (body.walletId) await requireWallet(ctx.db, ctx.organizationId, body.walletId);
      // With a wallet (already checked to be this organization's) the query follows the
      // (wallet_id, created_at, id) index alone, so a page costs the same at any wallet size.
      const query = body.walletId
        ? ctx.db.selectFrom("wallet_accounts").selectAll().where("wallet_id", "=", body.walletId)
        : ctx.db.selectFrom("wallet_accounts").selectAll().where("organization_id", "=", ctx.organizationId);
      const rows = await readPage(ctx.db, query, body.paginationOptions, {
        newestFirst: false,
        table: "wallet_accounts",
        scope: "organization_id",
        owner: ctx.organizationId,
        cursorIs: "a wallet account of this organization",
      });
      const wallets = new Map<string, WalletsTable>();
      if (body.includeWalletDetails && rows.length) {
        for (const w of await ctx.db
          .selectFrom("wallets")
          .selectAll()
          .where("id", "in", [...new Set(rows.map((r) => r.wallet_id))])
          .execute())
          wallets.set(w.id, w);
      }
      return { accounts: rows.map((r) => renderWalletAccount(r, wallets.get(r.wallet_id))) };
    },
  }),
];
