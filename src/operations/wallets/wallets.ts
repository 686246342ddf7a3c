// HD wallets: a mnemonic sealed under the master key, and accounts derived from it (curve, BIP-32
// path, address format). The mnemonic is opened only inside the activity that needs it and never
// leaves the process in the clear.
import { serviceError } from "../../errors.js";
import type { Db, Tx } from "../../store/handles.js";
import type { WalletAccountsTable, WalletsTable } from "../../store/schema.js";
import {
  DerivationError,
  generateMnemonic,
  HdKeyTree,
  mnemonicToSeed,
  mnemonicToSeedAsync,
  bip39SeedAsync,
  type KeyPair,
  type MnemonicLanguage,
  type MnemonicLength,
} from "../../crypto/hd.js";
import { UnsupportedAddressError, address } from "../../crypto/addresses.js";
import type { SecretIdentity } from "../../crypto/envelope.js";
import {
  defineActivity,
  defineQuery,
  InMemoryOnly,
  type ActivityContext,
  type CommittedState,
  type OperationEnvironment,
  type ParametersOf,
} from "../../registry/registry.js";
import type { Keyring } from "../../crypto/envelope.js";
import { requireName } from "../identity/credentials.js";
import { distinct, MAX_ITEMS_PER_REQUEST, readPage, requireAtMost, timestamp } from "../resources.js";
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

/** An account's key pair and address, derived from its wallet's seed. */
interface DerivedAccount extends KeyPair {
  address: string;
}

/** Accounts derived ahead, by what identifies an account of a wallet (curve, path, address format). */
type DerivedAccounts = Map<string, DerivedAccount>;

const accountKey = (account: Pick<WalletAccountParams, "curve" | "path" | "addressFormat">) =>
  `${account.curve} ${account.path} ${account.addressFormat}`;

const nextTurnOfEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Derives `accounts` from `seed` before the organization's lock is taken (a precheck's work): deriving
 * is the long part of creating accounts (milliseconds each on the event loop), and on SQLite the lock
 * is the database's one write lock, which every organization's signatures need. Between accounts the
 * event loop serves others. An account that cannot be derived is left out: execute derives it again
 * and refuses it, naming the field.
 */
async function deriveAhead(seed: Uint8Array, accounts: WalletAccountParams[]): Promise<DerivedAccounts> {
  const derived: DerivedAccounts = new Map();
  const tree = new HdKeyTree(seed);
  for (const account of accounts) {
    if (account.pathFormat !== "PATH_FORMAT_BIP32" || derived.has(accountKey(account))) continue;
    try {
      const pair = tree.derive(account.curve, account.path);
      derived.set(accountKey(account), { ...pair, address: address(account.curve, account.addressFormat, pair.publicKey) });
    } catch {
      // execute derives it again and says what is wrong
    }
    await nextTurnOfEventLoop();
  }
  return derived;
}

/** Whether a request's accounts are worth deriving ahead: execute refuses an empty or too long list. */
const derivable = (accounts: unknown): accounts is WalletAccountParams[] =>
  Array.isArray(accounts) && accounts.length > 0 && accounts.length <= MAX_ITEMS_PER_REQUEST;

/**
 * Derives the accounts and, unless `persist` is false, stores those not stored yet. An account the
 * wallet already has (same curve, path and format) is returned as it is: derivation is deterministic.
 * Accounts derived ahead (`ahead`, from the same seed) are not derived again; the seed is made only
 * when one is missing.
 */
async function deriveAccounts(
  ctx: ActivityContext,
  wallet: WalletsTable,
  seed: () => Uint8Array,
  accounts: WalletAccountParams[],
  persist: boolean,
  ahead?: DerivedAccounts,
  newWallet = false,
): Promise<string[]> {
  const addresses: string[] = [];
  let tree: HdKeyTree | undefined;
  // A wallet created in this activity has only the accounts stored below: they are known without a statement.
  const stored = new Set<string>();
  for (const [i, account] of accounts.entries()) {
    const where = `accounts[${i}]`;
    if (account.pathFormat !== "PATH_FORMAT_BIP32") throw serviceError("REQUEST_INVALID", `${where}.pathFormat must be PATH_FORMAT_BIP32`);
    const derived =
      ahead?.get(accountKey(account)) ??
      asInvalidArgument(where, () => {
        const pair = (tree ??= new HdKeyTree(seed())).derive(account.curve, account.path);
        return { ...pair, address: address(account.curve, account.addressFormat, pair.publicKey) };
      });
    const { publicKey, privateKey, address: accountAddress } = derived;
    addresses.push(accountAddress);
    if (!persist) continue;
    if (stored.has(accountKey(account))) continue;
    stored.add(accountKey(account));
    const existing =
      !newWallet &&
      (await ctx.trx
        .selectFrom("wallet_accounts")
        .select("id")
        .where("wallet_id", "=", wallet.id)
        .where("curve", "=", account.curve)
        .where("path", "=", account.path)
        .where("address_format", "=", account.addressFormat)
        .executeTakeFirst());
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

function walletSeed(keyring: Keyring, wallet: WalletsTable): Uint8Array {
  return mnemonicToSeed(keyring.open(wallet.sealed_mnemonic, mnemonicIdentity(wallet)).toString("utf8"));
}

/** What create_wallet_accounts derives before the lock: the accounts of the wallet named, as committed. */
interface AccountsAhead {
  walletId: string;
  accounts: DerivedAccounts;
}

/** create_wallet_accounts' precheck: the wallet's accounts derived ahead, when the wallet exists; an
 * account derived ahead is used only for the wallet it was derived from (ids are never reused). */
async function accountsAhead(
  p: ParametersOf<"create_wallet_accounts">,
  env: OperationEnvironment,
  committed: CommittedState,
): Promise<{ derived?: InMemoryOnly<AccountsAhead> }> {
  if (!derivable(p.accounts)) return {};
  const wallet = await committed.db
    .selectFrom("wallets")
    .selectAll()
    .where("organization_id", "=", committed.organizationId)
    .where("id", "=", String(p.walletId))
    .executeTakeFirst();
  if (!wallet) return {};
  let seed: Uint8Array;
  try {
    seed = await mnemonicToSeedAsync(env.keyring.open(wallet.sealed_mnemonic, mnemonicIdentity(wallet)).toString("utf8"));
  } catch {
    return {}; // execute opens it again and fails as it should
  }
  return { derived: new InMemoryOnly({ walletId: wallet.id, accounts: await deriveAhead(seed, p.accounts) }) };
}

/** What create_wallet (and a sub-organization's first wallet) makes before the lock: the mnemonic and its accounts. */
export interface WalletAhead {
  mnemonic: string;
  accounts: DerivedAccounts;
}

/** A new wallet's mnemonic made, and its accounts derived, before the lock; nothing when the request
 * would be refused anyway (execute refuses it). */
export async function walletAhead(p: Partial<NewWalletParams> | undefined): Promise<InMemoryOnly<WalletAhead> | undefined> {
  const words = p?.mnemonicLength ?? 12;
  if (!p || !derivable(p.accounts) || !MNEMONIC_LENGTHS.includes(words)) return undefined;
  const mnemonic = generateMnemonic(words as MnemonicLength);
  // Just generated: valid and normalized, so its seed is hashed without checking it again.
  return new InMemoryOnly({ mnemonic, accounts: await deriveAhead(await bip39SeedAsync(mnemonic), p.accounts) });
}

/** An imported wallet's accounts derived before the lock, from the mnemonic an import's precheck
 * opened (imports.ts); execute uses them only for the same mnemonic. */
export async function importedWalletAhead(mnemonic: string, accounts: unknown): Promise<InMemoryOnly<WalletAhead> | undefined> {
  if (!derivable(accounts)) return undefined;
  return new InMemoryOnly({ mnemonic, accounts: await deriveAhead(await mnemonicToSeedAsync(mnemonic), accounts) });
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
  ahead?: WalletAhead,
  inNewOrganization = false,
): Promise<{ walletId: string; addresses: string[] }> {
  const name = requireName(p.walletName, `${field}walletName`);
  requireAtMost(p.accounts, `${field}accounts`);
  const words = p.mnemonicLength ?? 12;
  if (!imported && !MNEMONIC_LENGTHS.includes(words))
    throw serviceError("REQUEST_INVALID", `${field}mnemonicLength must be one of ${MNEMONIC_LENGTHS.join(", ")}, got ${words}`);
  // An organization created in this very activity has no wallet yet to share the name.
  if (!inNewOrganization) await requireUniqueWalletName(ctx, name);
  const language: MnemonicLanguage = imported?.language ?? "MNEMONIC_LANGUAGE_ENGLISH";
  // A mnemonic made ahead (walletAhead) is English and of the length asked, like one made here; one
  // opened ahead (an import's precheck) is used only when it is the very one execute opened.
  const fresh = imported
    ? ahead?.mnemonic === imported.mnemonic
      ? ahead
      : undefined
    : ahead?.mnemonic.split(" ").length === words
      ? ahead
      : undefined;
  const mnemonic = imported?.mnemonic ?? fresh?.mnemonic ?? generateMnemonic(words as MnemonicLength, language);
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
  const addresses = await deriveAccounts(ctx, row, () => mnemonicToSeed(mnemonic), p.accounts, true, fresh?.accounts, true);
  return { walletId: id, addresses };
}

export const walletOperations = [
  defineActivity({
    name: "create_wallet",
    summary: "Create an HD wallet (a new BIP-39 mnemonic, sealed at rest) and derive its first accounts.",
    resource: "WALLET",
    action: "CREATE",
    precheck: async (p) => ({ wallet: await walletAhead(p) }),
    execute: (ctx, p, _type, prepared) => createWallet(ctx, p, "", undefined, prepared.wallet?.value),
  }),

  defineActivity({
    name: "create_wallet_accounts",
    summary: "Derive more accounts of a wallet (persist: false derives the addresses without storing them).",
    resource: "WALLET",
    action: "CREATE",
    policyParameters: (p) => ({ wallet_id: p.walletId }),
    policyContext: (trx, organizationId, p) => walletContext(trx, organizationId, p.walletId),
    precheck: (p, env, _type, committed) => accountsAhead(p, env, committed),
    async execute(ctx, p, _type, prepared) {
      const wallet = await requireWallet(ctx.trx, ctx.organizationId, p.walletId);
      if (p.accounts.length === 0) throw serviceError("REQUEST_INVALID", "accounts must list at least one account");
      requireAtMost(p.accounts, "accounts");
      const ahead = prepared.derived?.value;
      const derived = ahead?.walletId === wallet.id ? ahead.accounts : undefined;
      const seed = () => walletSeed(ctx.env.keyring, wallet);
      const addresses = await deriveAccounts(ctx, wallet, seed, p.accounts, p.persist !== false, derived);
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
