// Every sealed secret the service stores, and re-sealing them all under a new master key.
import type { Kysely } from "kysely";
import type { Db } from "../store/database.js";
import { Keyring, type SecretIdentity } from "../crypto/envelope.js";

/** A column holding sealed secrets, and the identity each row's secret is bound to. */
interface SecretColumn {
  table: "wallets" | "wallet_accounts" | "private_keys";
  column: "sealed_mnemonic" | "sealed_private_key";
  kind: string;
}

export const SECRET_COLUMNS: SecretColumn[] = [
  { table: "wallets", column: "sealed_mnemonic", kind: "wallet.mnemonic" },
  { table: "wallet_accounts", column: "sealed_private_key", kind: "wallet_account.private_key" },
  { table: "private_keys", column: "sealed_private_key", kind: "private_key" },
];

export interface RotationReport {
  resealed: number;
  /** How many secrets each key id sealed before the rotation. */
  before: Record<string, number>;
}

/**
 * Re-seals every stored secret under `to`, in one transaction: either every secret moves to the new
 * key or none does. `from` must hold every key a stored secret names.
 */
export async function resealAll(db: Db, from: Keyring, to: Keyring): Promise<RotationReport> {
  const report: RotationReport = { resealed: 0, before: {} };
  await db.transaction().execute(async (trx) => {
    const dynamic = trx as unknown as Kysely<any>;
    for (const { table, column, kind } of SECRET_COLUMNS) {
      const rows: { id: string; organization_id: string; sealed: string }[] = await dynamic.selectFrom(table).select(["id", "organization_id", `${column} as sealed`]).execute();
      for (const row of rows) {
        const keyId = Keyring.keyIdOf(row.sealed) ?? "unknown";
        report.before[keyId] = (report.before[keyId] ?? 0) + 1;
        const identity: SecretIdentity = { organizationId: row.organization_id, kind, resourceId: row.id };
        const resealed = to.seal(from.open(row.sealed, identity), identity);
        await dynamic.updateTable(table).set({ [column]: resealed }).where("id", "=", row.id).execute();
        report.resealed += 1;
      }
    }
  });
  return report;
}
