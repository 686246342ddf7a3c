// Import: a mnemonic or a private key enters the service only encrypted (HPKE) to a one-use target
// key that init_import_wallet / init_import_private_key made for the requesting user and handed out
// in a signed bundle (the format @turnkey/crypto's encryptWalletToBundle / encryptPrivateKeyToBundle
// read). import_wallet / import_private_key open the client's encryptedBundle with that key, check
// the secret (BIP-39 checksum; a valid scalar for the curve), store it sealed, and discard the
// target. An import always targets the requesting user (the product's rule).
import { serviceError } from "../../errors.js";
import { detectMnemonicLanguage, keyPairFromPrivateKey, DerivationError } from "../../crypto/hd.js";
import {
  defineActivity,
  type ActivityContext,
  type CommittedState,
  type OperationEnvironment,
  type ParametersOf,
} from "../../registry/registry.js";
import {
  discardImportTargets,
  issueImportTargets,
  openAheadWithImportTarget,
  openWithImportTarget,
  parseEncryptedPayload,
  requireLiveTarget,
} from "../secure-channel.js";
import { createWallet, importedWalletAhead } from "./wallets.js";
import { createPrivateKeys, type PrivateKeyParams } from "./private-keys.js";

type TargetKind = "wallet" | "private_key";

function requireOwnUser(ctx: ActivityContext, userId: string): void {
  if (userId !== ctx.principal.userId) {
    throw serviceError("IMPORT_USER_MISMATCH", `an import must target the requesting user (${ctx.principal.userId}), not ${userId}`);
  }
}

/** The requester's target of `kind` is used up by a failed import too (one attempt per target). */
async function discardTarget(ctx: ActivityContext, userId: string, kind: TargetKind): Promise<void> {
  if (userId !== ctx.principal.userId) return;
  await discardImportTargets(ctx, userId, kind);
}

/** A fresh target key for the user; earlier unused ones of the same kind stop working. */
async function initImport(ctx: ActivityContext, userId: string, kind: TargetKind): Promise<string> {
  requireOwnUser(ctx, userId);
  const [bundle] = await issueImportTargets(ctx, userId, kind, 1);
  return bundle!;
}

/** Opens the client's bundle with the user's live target key, and discards the key (one use). */
async function openImport(ctx: ActivityContext, userId: string, kind: TargetKind, encryptedBundle: string): Promise<Buffer> {
  requireOwnUser(ctx, userId);
  const sealed = parseEncryptedPayload(encryptedBundle, "encryptedBundle", "encryptWalletToBundle / encryptPrivateKeyToBundle");
  const target = await ctx.trx
    .selectFrom("import_targets")
    .selectAll()
    .where("organization_id", "=", ctx.organizationId)
    .where("user_id", "=", userId)
    .where("kind", "=", kind)
    .executeTakeFirst();
  const init = kind === "wallet" ? "init_import_wallet" : "init_import_private_key";
  const live = requireLiveTarget(
    target,
    ctx.now,
    `no import target for user ${userId}: call ${init} first (a target serves one import)`,
    init,
  );
  return openWithImportTarget(ctx, live, sealed, "encryptedBundle");
}

/** The mnemonic of an import bundle: BIP-39 valid in one of the word lists, no passphrase. */
function importedMnemonic(plaintext: Buffer) {
  const text = plaintext.toString("utf8");
  plaintext.fill(0);
  if (text.includes("\n--PASS--\n"))
    throw serviceError(
      "MNEMONIC_PASSPHRASE_UNSUPPORTED",
      "mnemonics with a BIP-39 passphrase cannot be imported yet: import the mnemonic alone",
    );
  const mnemonic = text.trim().normalize("NFKD").split(/\s+/u).join(" ");
  const language = detectMnemonicLanguage(mnemonic);
  // The message names no word: the mnemonic is the secret.
  if (!language)
    throw serviceError(
      "INVALID_MNEMONIC",
      "the imported mnemonic is not a valid BIP-39 phrase (a word outside the word lists, or a failed checksum)",
    );
  return { mnemonic, language };
}

/**
 * import_wallet's precheck: the bundle opened with the user's committed target (not used up: execute
 * opens it again under the lock and uses the target up) and the accounts derived from it, before the
 * organization's lock is taken; only in memory (InMemoryOnly), and only used when execute opens the
 * same mnemonic. Whatever goes wrong here is left for execute to find and answer: nothing.
 */
async function importAhead(p: ParametersOf<"import_wallet">, env: OperationEnvironment, committed: CommittedState) {
  try {
    const sealed = parseEncryptedPayload(p.encryptedBundle, "encryptedBundle", "encryptWalletToBundle");
    const target = await committed.db
      .selectFrom("import_targets")
      .selectAll()
      .where("organization_id", "=", committed.organizationId)
      .where("user_id", "=", String(p.userId))
      .where("kind", "=", "wallet")
      .executeTakeFirst();
    if (!target) return {};
    const { mnemonic } = importedMnemonic(await openAheadWithImportTarget(env.keyring, target, sealed));
    return { wallet: await importedWalletAhead(mnemonic, p.accounts) };
  } catch {
    return {};
  }
}

export const importOperations = [
  defineActivity({
    name: "init_import_wallet",
    summary: "Start a wallet import: a one-use target key for the requesting user, in a signed importBundle.",
    resource: "WALLET",
    action: "IMPORT",
    async execute(ctx, p) {
      return { importBundle: await initImport(ctx, p.userId, "wallet") };
    },
  }),

  defineActivity({
    name: "import_wallet",
    summary: "Import a mnemonic encrypted to the target from init_import_wallet; derive the requested accounts.",
    resource: "WALLET",
    action: "IMPORT",
    // The bundle is not kept in the audit log, so the activity cannot wait for approvals.
    secretParameters: ["encryptedBundle"],
    afterFailure: (ctx, p) => discardTarget(ctx, p.userId, "wallet"),
    precheck: (p, env, _type, committed) => importAhead(p, env, committed),
    async execute(ctx, p, _type, prepared) {
      const { mnemonic, language } = importedMnemonic(await openImport(ctx, p.userId, "wallet", p.encryptedBundle));
      // The same mnemonic imported twice makes two wallets over the same keys (as in the product,
      // which says nothing against it): mnemonics are sealed with random nonces and not compared.
      return createWallet(
        ctx,
        { walletName: p.walletName, accounts: p.accounts ?? [] },
        "",
        { mnemonic, language },
        prepared.wallet?.value,
      );
    },
  }),

  defineActivity({
    name: "init_import_private_key",
    summary: "Start a private key import: a one-use target key for the requesting user, in a signed importBundle.",
    resource: "PRIVATE_KEY",
    action: "IMPORT",
    async execute(ctx, p) {
      return { importBundle: await initImport(ctx, p.userId, "private_key") };
    },
  }),

  defineActivity({
    name: "import_private_key",
    summary: "Import a private key encrypted to the target from init_import_private_key.",
    resource: "PRIVATE_KEY",
    action: "IMPORT",
    secretParameters: ["encryptedBundle"],
    afterFailure: (ctx, p) => discardTarget(ctx, p.userId, "private_key"),
    async execute(ctx, p) {
      const plaintext = await openImport(ctx, p.userId, "private_key", p.encryptedBundle);
      let pair;
      try {
        pair = keyPairFromPrivateKey(p.curve, plaintext);
      } catch (error) {
        if (error instanceof DerivationError) throw serviceError("INVALID_PRIVATE_KEY", `the imported key: ${error.message}`);
        throw error;
      } finally {
        plaintext.fill(0);
      }
      const taken = await ctx.trx
        .selectFrom("private_keys")
        .select("id")
        .where("organization_id", "=", ctx.organizationId)
        .where("curve", "=", p.curve)
        .where("public_key", "=", Buffer.from(pair.publicKey).toString("hex"))
        .executeTakeFirst();
      if (taken) throw serviceError("PRIVATE_KEY_ALREADY_EXISTS", `this key is already private key ${taken.id} of the organization`);
      const [created] = await createPrivateKeys(
        ctx,
        [
          {
            privateKeyName: p.privateKeyName,
            curve: p.curve,
            privateKeyTags: [],
            addressFormats: (p.addressFormats ?? []) as PrivateKeyParams["addressFormats"],
          },
        ],
        pair,
      );
      return { privateKeyId: created!.privateKeyId, addresses: created!.addresses };
    },
  }),
];
