// Export: a wallet's mnemonic, a private key, or one wallet account's key leaves the service only
// encrypted (HPKE) to the target public key the request names, inside a bundle signed by the
// deployment's bundle signer — the format `decryptExportBundle` of @turnkey/crypto opens. A
// successful export marks the wallet or key as exported (deletion rules depend on it).
import { serviceError } from "../../errors.js";
import { defineActivity } from "../../registry/registry.js";
import { exportBundle, policyTargetKey, targetKey } from "../secure-channel.js";
import { mnemonicIdentity, requireWallet, walletContext } from "./wallets.js";
import { privateKeyIdentity, privateKeyKeyword, requirePrivateKey, tagsOf } from "./private-keys.js";
import { findSigner, openSigner, signerKeywords } from "./signers.js";

export const exportOperations = [
  defineActivity({
    name: "export_wallet",
    summary: "Export a wallet's mnemonic, encrypted to the target public key (HPKE) in a signed bundle.",
    resource: "WALLET",
    action: "EXPORT",
    policyParameters: (p) => ({ target_public_key: policyTargetKey(p.targetPublicKey) }),
    policyContext: (trx, organizationId, p) => walletContext(trx, organizationId, p.walletId),
    async execute(ctx, p) {
      targetKey(p.targetPublicKey);
      const wallet = await requireWallet(ctx.trx, ctx.organizationId, p.walletId);
      // The same entropy spelled in another word list is another mnemonic, with other keys.
      if (p.language !== undefined && p.language !== wallet.mnemonic_language) {
        throw serviceError(
          "MNEMONIC_LANGUAGE_MISMATCH",
          `wallet ${wallet.id}'s mnemonic is in ${wallet.mnemonic_language}; spelling its entropy in ${p.language} would give a mnemonic that derives other keys`,
        );
      }
      const bundle = await exportBundle(ctx, p.targetPublicKey, ctx.env.keyring.open(wallet.sealed_mnemonic, mnemonicIdentity(wallet)));
      await ctx.trx.updateTable("wallets").set({ exported: 1, updated_at: ctx.now }).where("id", "=", wallet.id).execute();
      return { walletId: wallet.id, exportBundle: bundle };
    },
  }),

  defineActivity({
    name: "export_private_key",
    summary: "Export a private key (its 32 raw bytes), encrypted to the target public key (HPKE) in a signed bundle.",
    resource: "PRIVATE_KEY",
    action: "EXPORT",
    policyParameters: (p) => ({ target_public_key: policyTargetKey(p.targetPublicKey) }),
    async policyContext(trx, organizationId, p) {
      const row = await trx
        .selectFrom("private_keys")
        .selectAll()
        .where("organization_id", "=", organizationId)
        .where("id", "=", p.privateKeyId)
        .executeTakeFirst();
      return row ? { private_key: privateKeyKeyword(row, (await tagsOf(trx, [row.id])).get(row.id) ?? []) } : {};
    },
    async execute(ctx, p) {
      targetKey(p.targetPublicKey);
      const row = await requirePrivateKey(ctx.trx, ctx.organizationId, p.privateKeyId);
      const bundle = await exportBundle(ctx, p.targetPublicKey, ctx.env.keyring.open(row.sealed_private_key, privateKeyIdentity(row)));
      await ctx.trx.updateTable("private_keys").set({ exported: 1, updated_at: ctx.now }).where("id", "=", row.id).execute();
      return { privateKeyId: row.id, exportBundle: bundle };
    },
  }),

  defineActivity({
    name: "export_wallet_account",
    summary: "Export one wallet account's private key (32 raw bytes), encrypted to the target public key (HPKE) in a signed bundle.",
    resource: "WALLET",
    action: "EXPORT",
    policyParameters: (p) => ({ target_public_key: policyTargetKey(p.targetPublicKey) }),
    async policyContext(trx, organizationId, p) {
      try {
        const signer = await findSigner(trx, organizationId, p.address);
        return signer.kind === "wallet_account" ? signerKeywords(signer) : {};
      } catch {
        return {};
      }
    },
    async execute(ctx, p) {
      targetKey(p.targetPublicKey);
      const signer = await findSigner(ctx.trx, ctx.organizationId, p.address);
      if (signer.kind !== "wallet_account")
        throw serviceError(
          "WALLET_ACCOUNT_NOT_FOUND",
          `${p.address} is a private key's address, not a wallet account's: export it with export_private_key`,
        );
      // Only this account's key leaves, not the mnemonic: the wallet is not marked exported.
      const bundle = await exportBundle(ctx, p.targetPublicKey, openSigner(ctx.env.keyring, signer) as Buffer);
      return { address: signer.address, exportBundle: bundle };
    },
  }),
];
