// `signWith`: the key a signing request names — a wallet account's address, a private key's id, or one
// of a private key's addresses, as in the product. Finding it reads no secret (policies see the
// result before anything is decided); opening it is a separate step, inside the allowed activity.
import { sql } from "kysely";
import { getAddress, isAddress } from "viem";
import { serviceError } from "../../errors.js";
import type { Db, Tx } from "../../store/handles.js";
import { prepare, readOf, type Read, type Slots } from "../../store/prepared.js";
import type { PrivateKeysTable, WalletAccountsTable, WalletsTable } from "../../store/schema.js";
import type { Curve } from "../../crypto/hd.js";
import type { Keyring } from "../../crypto/envelope.js";
import { accountKeyIdentity, walletKeyword } from "./wallets.js";
import { privateKeyIdentity, privateKeyKeyword } from "./private-keys.js";
import { EthereumAddress } from "../../policy/types.js";

export type FoundSigner =
  | { kind: "wallet_account"; curve: Curve; publicKey: string; address: string; account: WalletAccountsTable; wallet: SignerWallet }
  | {
      kind: "private_key";
      curve: Curve;
      publicKey: string;
      address?: string;
      addressFormat?: string;
      privateKey: PrivateKeysTable;
      tags: string[];
    };

/** Ethereum addresses match whatever their letter case: the account is stored checksummed (EIP-55). */
const normalized = (signWith: string) => (isAddress(signWith, { strict: false }) ? getAddress(signWith) : signWith);

/** What signing and policies need of the wallet an account belongs to (not its sealed mnemonic). */
export type SignerWallet = Pick<WalletsTable, "id" | "name" | "imported" | "exported">;

// The account with its wallet in one query: signing is the hot path, a round trip costs.
const accountWithWallet = prepare((db, slot: Slots<{ organizationId: string; address: string }>) =>
  db
    .selectFrom("wallet_accounts")
    .innerJoin("wallets", "wallets.id", "wallet_accounts.wallet_id")
    .selectAll("wallet_accounts")
    .select(["wallets.name as wallet_name", "wallets.imported as wallet_imported", "wallets.exported as wallet_exported"])
    .where("wallet_accounts.organization_id", "=", slot("organizationId"))
    .where("wallet_accounts.address", "=", slot("address"))
    .orderBy("wallet_accounts.created_at")
    // A literal, not a bound value: SQLite prepares a statement whose LIMIT is a parameter anew each
    // time that parameter is bound — every run, about three times the cost of the lookup itself.
    .limit(sql.lit(1)),
);

/** The name a signing request gives its key, as looked up (an Ethereum address checksummed); none when unusable. */
const wantedSigner = (signWith: unknown): string | undefined =>
  typeof signWith === "string" && signWith.trim() !== "" ? normalized(signWith.trim()) : undefined;

/** The account findSigner looks for first, as a read the pipeline sends ahead (none for an unusable name). */
export function signerReadsAhead(organizationId: string, signWith: unknown): Read[] {
  const wanted = wantedSigner(signWith);
  return wanted === undefined ? [] : [readOf(accountWithWallet, { organizationId, address: wanted })];
}

export async function findSigner(db: Db | Tx, organizationId: string, signWith: string): Promise<FoundSigner> {
  const wanted = wantedSigner(signWith);
  if (wanted === undefined)
    throw serviceError("REQUEST_INVALID", "signWith must name a wallet account address, a private key id or a private key address");
  const found = await accountWithWallet.first(db, { organizationId, address: wanted });
  if (found) {
    const { wallet_name, wallet_imported, wallet_exported, ...account } = found;
    const wallet = { id: account.wallet_id, name: wallet_name, imported: wallet_imported, exported: wallet_exported };
    return {
      kind: "wallet_account",
      curve: account.curve as Curve,
      publicKey: account.public_key,
      address: account.address,
      account,
      wallet,
    };
  }
  let privateKey = await db
    .selectFrom("private_keys")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", wanted)
    .executeTakeFirst();
  let address: string | undefined;
  let addressFormat: string | undefined;
  if (!privateKey) {
    const byAddress = await db
      .selectFrom("private_key_addresses")
      .select(["private_key_id", "address", "format"])
      .where("organization_id", "=", organizationId)
      .where("address", "=", wanted)
      .executeTakeFirst();
    if (byAddress) {
      privateKey = await db.selectFrom("private_keys").selectAll().where("id", "=", byAddress.private_key_id).executeTakeFirst();
      address = byAddress.address;
      addressFormat = byAddress.format;
    }
  }
  if (!privateKey)
    throw serviceError(
      "SIGNER_NOT_FOUND",
      `signWith ${signWith} is neither a wallet account address, a private key id nor a private key address of this organization`,
    );
  const tags = await db
    .selectFrom("private_key_tag_members")
    .select("tag_id")
    .where("private_key_id", "=", privateKey.id)
    .orderBy("tag_id")
    .execute();
  return {
    kind: "private_key",
    curve: privateKey.curve as Curve,
    publicKey: privateKey.public_key,
    ...(address ? { address, addressFormat } : {}),
    privateKey,
    tags: tags.map((t) => t.tag_id),
  };
}

/** `wallet`, `wallet_account` or `private_key` of the policy language, for the key a request names. */
export function signerKeywords(signer: FoundSigner): Record<string, unknown> {
  if (signer.kind === "wallet_account") {
    // An Ethereum account's address is an address to policies (compared in any letter case); the
    // other chains' addresses are case-sensitive text.
    const address = signer.account.address_format === "ADDRESS_FORMAT_ETHEREUM" ? new EthereumAddress(signer.address) : signer.address;
    return { wallet: walletKeyword(signer.wallet), wallet_account: { address } };
  }
  return { private_key: privateKeyKeyword(signer.privateKey, signer.tags) };
}

/** The private key, opened from its sealed form, for the moment of signing. */
export function openSigner(keyring: Keyring, signer: FoundSigner): Uint8Array {
  return signer.kind === "wallet_account"
    ? keyring.open(signer.account.sealed_private_key, accountKeyIdentity(signer.account))
    : keyring.open(signer.privateKey.sealed_private_key, privateKeyIdentity(signer.privateKey));
}

/** The (format, address) pairs the request's signWith stands for: the one named, or, for a key named
 * by id, every address it has. */
export function signerAddresses(signer: FoundSigner): { format: string; address: string }[] {
  if (signer.kind === "wallet_account") return [{ format: signer.account.address_format, address: signer.address }];
  if (signer.address && signer.addressFormat) return [{ format: signer.addressFormat, address: signer.address }];
  return JSON.parse(signer.privateKey.addresses) as { format: string; address: string }[];
}
