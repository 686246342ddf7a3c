// Wallet accounts added straight into the store, sealed like real ones (with random keys and
// addresses), so that reads at scale can be measured without deriving 100,000 keys through the API.
import crypto from "node:crypto";
import type { Keyring } from "../src/crypto/envelope.js";
import type { Db } from "../src/store/handles.js";

/** Adds accounts m/44'/60'/0'/0/(existing+1)… up to `target` in all to the wallet, 1,000 a transaction. */
export async function insertAccounts(
  db: Db,
  keyring: Keyring,
  organizationId: string,
  walletId: string,
  target: number,
  existing: number,
): Promise<void> {
  const now = Date.now();
  for (let start = existing; start < target; start += 1000) {
    const rows = Array.from({ length: Math.min(1000, target - start) }, (_, i) => {
      const id = crypto.randomUUID();
      return {
        id,
        organization_id: organizationId,
        wallet_id: walletId,
        curve: "CURVE_SECP256K1",
        path_format: "PATH_FORMAT_BIP32",
        path: `m/44'/60'/0'/0/${start + i + 1}`,
        address_format: "ADDRESS_FORMAT_ETHEREUM",
        address: `0x${crypto.randomBytes(20).toString("hex")}`,
        public_key: `02${crypto.randomBytes(32).toString("hex")}`,
        sealed_private_key: keyring.seal(crypto.randomBytes(32), { organizationId, kind: "wallet_account.private_key", resourceId: id }),
        name: null,
        created_at: now + start + i,
        updated_at: now + start + i,
      };
    });
    await db.transaction().execute((trx) => trx.insertInto("wallet_accounts").values(rows).execute());
  }
}
