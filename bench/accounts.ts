// Rows added straight into the store, sealed like real ones (with random keys and addresses), so that
// reads at scale can be measured without deriving 100,000 keys through the API: wallet accounts here,
// whole sub-organizations in bench/sub-organizations.ts, both through insertRows.
import crypto from "node:crypto";
import { CompiledQuery, PostgresAdapter } from "kysely";
import type { Keyring } from "../src/crypto/envelope.js";
import type { Db } from "../src/store/handles.js";

/** Parameters per statement: under SQLite's 32,766 and PostgreSQL's 65,535 bound parameters. */
const PARAMETERS_PER_STATEMENT = 30_000;

/** Inserts `rows` into `table` as multi-row INSERTs of as many rows as the parameter bound allows,
 * in the caller's transaction (big transactions: one commit, one fsync, per batch). The SQL text is
 * written here rather than by Kysely's builder, which spent more time building a statement of
 * thousands of values than the database spent running it. */
export async function insertRows(trx: Db, table: string, rows: Array<Record<string, unknown>>): Promise<void> {
  if (rows.length === 0) return;
  const columns = Object.keys(rows[0]!);
  const perStatement = Math.max(1, Math.floor(PARAMETERS_PER_STATEMENT / columns.length));
  const postgres = trx.getExecutor().adapter instanceof PostgresAdapter;
  for (let start = 0; start < rows.length; start += perStatement) {
    const chunk = rows.slice(start, start + perStatement);
    let n = 0;
    const tuples = chunk.map(() => `(${columns.map(() => (postgres ? `$${++n}` : "?")).join(", ")})`);
    const text = `insert into "${table}" (${columns.map((c) => `"${c}"`).join(", ")}) values ${tuples.join(", ")}`;
    await trx.executeQuery(
      CompiledQuery.raw(
        text,
        chunk.flatMap((row) => columns.map((c) => row[c])),
      ),
    );
  }
}

/** An Ethereum account's stored material: a random key sealed to its row, a random public key and
 * address of the real sizes (deriving them would measure derivation, not the store). */
export function randomAccountMaterial(keyring: Keyring, organizationId: string, id: string) {
  return {
    address: `0x${crypto.randomBytes(20).toString("hex")}`,
    public_key: `02${crypto.randomBytes(32).toString("hex")}`,
    sealed_private_key: keyring.seal(crypto.randomBytes(32), { organizationId, kind: "wallet_account.private_key", resourceId: id }),
  };
}

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
        ...randomAccountMaterial(keyring, organizationId, id),
        name: null,
        created_at: now + start + i,
        updated_at: now + start + i,
      };
    });
    await db.transaction().execute((trx) => insertRows(trx, "wallet_accounts", rows));
  }
}
