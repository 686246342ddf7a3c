// Every sealed secret the service stores, and re-sealing them all under a new master key.
import { sql, type Kysely, type Transaction } from "kysely";
import type { Db } from "../store/handles.js";
import type { Database } from "../store/schema.js";
import { Keyring, type SecretIdentity } from "../crypto/envelope.js";
import { wrongMasterKeyMessage, type DataDirOrigin, type MasterKeyConfig } from "../crypto/master-key.js";

/** A column holding sealed secrets, and the identity each row's secret is bound to. */
export interface SecretColumn {
  table:
    | "wallets"
    | "wallet_accounts"
    | "private_keys"
    | "service_keys"
    | "import_targets"
    | "outbound_messages"
    | "otps"
    | "secrets"
    | "oauth2_credentials";
  column: "sealed_mnemonic" | "sealed_private_key" | "sealed_message" | "sealed_target_key" | "sealed_secret" | "sealed_client_secret";
  kind: string;
}

export const SECRET_COLUMNS: SecretColumn[] = [
  { table: "wallets", column: "sealed_mnemonic", kind: "wallet.mnemonic" },
  { table: "wallet_accounts", column: "sealed_private_key", kind: "wallet_account.private_key" },
  { table: "private_keys", column: "sealed_private_key", kind: "private_key" },
  { table: "service_keys", column: "sealed_private_key", kind: "service_key" },
  { table: "import_targets", column: "sealed_private_key", kind: "import_target" },
  // Emails and SMS carrying one-time passwords, until sent (then the column is emptied).
  { table: "outbound_messages", column: "sealed_message", kind: "outbound_message" },
  // The one-use keys verify_otp's encrypted codes are sealed to (init_otp V2 and later).
  { table: "otps", column: "sealed_target_key", kind: "otp_target" },
  // Secrets clients imported (import_secrets).
  { table: "secrets", column: "sealed_secret", kind: "secret" },
  // OAuth 2.0 client secrets (create_oauth2_credential), opened to exchange authorization codes.
  { table: "oauth2_credentials", column: "sealed_client_secret", kind: "oauth2_client_secret" },
];

export interface RotationReport {
  resealed: number;
  /** How many secrets each key id sealed before the rotation. */
  before: Record<string, number>;
}

/**
 * Re-seals every stored secret under `to`, in one transaction: either every secret moves to the new
 * key or none does. `from` must hold every key a stored secret names. The token's wrapped data key is
 * not a sealed secret (the token wraps it, not a master key): `alsoInTransaction` replaces or drops it.
 */
export async function resealAll(
  db: Db,
  from: Keyring,
  to: Keyring,
  /** What else the rotation changes, in the same transaction (the token's wrapped data key). */
  alsoInTransaction?: (trx: Transaction<Database>) => Promise<void>,
): Promise<RotationReport> {
  const report: RotationReport = { resealed: 0, before: {} };
  await db.transaction().execute(async (trx) => {
    // biome-ignore lint/suspicious/noExplicitAny: the tables holding secrets are named at run time from SECRET_COLUMNS
    const dynamic = trx as unknown as Kysely<any>;
    for (const { table, column, kind } of SECRET_COLUMNS) {
      const rows: { id: string; organization_id: string; sealed: string }[] = await dynamic
        .selectFrom(table)
        .select(["id", "organization_id", `${column} as sealed`])
        .where(column, "is not", null)
        .execute();
      for (const row of rows) {
        const keyId = Keyring.keyIdOf(row.sealed) ?? "unknown";
        report.before[keyId] = (report.before[keyId] ?? 0) + 1;
        const identity: SecretIdentity = { organizationId: row.organization_id, kind, resourceId: row.id };
        const resealed = to.seal(from.open(row.sealed, identity), identity);
        await dynamic
          .updateTable(table)
          .set({ [column]: resealed })
          .where("id", "=", row.id)
          .execute();
        report.resealed += 1;
      }
    }
    await alsoInTransaction?.(trx);
  });
  return report;
}

/** The deployment's own keys (service_keys): a handful of rows, sealed under the current master key. */
export const SERVICE_KEY_COLUMNS = SECRET_COLUMNS.filter((c) => c.table === "service_keys");

/** The master key ids the stored secrets (of `columns`: all by default) are sealed under ("v1.<key id>.<…>"). */
export async function keyIdsInUse(db: Db, columns: readonly SecretColumn[] = SECRET_COLUMNS): Promise<string[]> {
  // biome-ignore lint/suspicious/noExplicitAny: the tables holding secrets are named at run time from SECRET_COLUMNS
  const dynamic = db as unknown as Kysely<any>;
  const ids = new Set<string>();
  for (const { table, column } of columns) {
    const rows: { keyId: string }[] = await dynamic
      .selectFrom(table)
      .select(sql<string>`substr(${sql.ref(column)}, 4, 16)`.as("keyId"))
      .where(column, "is not", null)
      .distinct()
      .execute();
    for (const row of rows) ids.add(row.keyId);
  }
  return [...ids];
}

/**
 * Refuses to serve with a keyring that cannot open what the database holds — typically a master
 * key file that is missing (a wrong data directory, an unmounted volume) and was just created anew.
 * Serving would fail every signature and seal new secrets under a key nobody backed up.
 */
export async function assertKeyringOpensStore(
  db: Db,
  keyring: Keyring,
  given?: { masterKey: MasterKeyConfig; dataDirOrigin: DataDirOrigin; created: boolean },
): Promise<void> {
  const missing = (await keyIdsInUse(db)).filter((id) => !keyring.holds(id));
  if (missing.length && given) {
    throw new Error(
      wrongMasterKeyMessage(given.masterKey, given.dataDirOrigin, { missing, keyId: keyring.currentKeyId, created: given.created }),
    );
  }
  if (missing.length) {
    throw new Error(
      `the database holds secrets sealed under master key ${missing.join(", ")}, which this server was not given (its key is ${keyring.currentKeyId}). ` +
        "Point SIGIL_MASTER_KEY / SIGIL_MASTER_KEY_FILE / --data-dir at the right key, or add the old one to SIGIL_MASTER_KEY_PREVIOUS.",
    );
  }
}
