// Sub-organizations added straight into the store, as an app's sign-ups leave them, so that the reads
// and writes of an app with a million end users can be measured without making a million sign-ups
// through the API (at ~100 a second, hours). One real sign-up (create_sub_organization with a root user
// holding an API key and an email, and a wallet with one Ethereum account) is the template: its rows
// in every table it wrote — the sub-organization, its user, API key, root quorum, login features,
// wallet and account, and the parent's activity record with its policy evaluation — are copied with
// new ids, a new email, API key, address and public key, and every id and value replaced inside the
// activity's intent and result too, so each copy has the real rows, the real indexes and the real
// sizes of a sign-up.
//
// Secrets are sealed like real ones (the server's Keyring, bound to each copy's own row): the wallet's
// mnemonic is the template's, opened once and sealed again for each copy, and the account's key is a
// random one (bench/accounts.ts, randomAccountMaterial) with a random address and public key of the
// real sizes. So the mnemonic does not derive the account: deriving costs 1.3–1.7 ms a sign-up (PBKDF2
// 1.1–1.5 ms and BIP-32 on libsecp256k1 ~0.2 ms; docs/benchmarks.md#sign-up-cost), about half an hour
// of one core for a million, and would measure the derivation, not the store. Sealing costs a few microseconds and is done for every row.
import crypto from "node:crypto";
import type { Kysely } from "kysely";
import type { Keyring } from "../src/crypto/envelope.js";
import type { Db } from "../src/store/handles.js";
import { SECRET_COLUMNS } from "../src/services/sealed-secrets.js";
import { newId } from "../src/store/ids.js";
import { insertRows, randomAccountMaterial } from "./accounts.js";

type Row = Record<string, unknown>;

/** The tables a sign-up writes in the new sub-organization (by organization_id; `organizations` by id). */
export const SUB_ORGANIZATION_TABLES = [
  "organizations",
  "users",
  "api_keys",
  "root_quorum_members",
  "organization_features",
  "wallets",
  "wallet_accounts",
] as const;

/** Columns holding unique values (besides the ids): each copy gets its own. */
const UNIQUE_COLUMNS: Record<string, string[]> = {
  api_keys: ["public_key"],
  wallet_accounts: ["address", "public_key"],
  activities: ["fingerprint", "request_id"],
  policy_evaluations: ["vote_id"],
};

const TIME_COLUMNS = new Set(["created_at", "updated_at", "timestamp_ms"]);

/** A copy's times are when it is made (never before the copy made before it): copies list after
 * everything made before them, in the order they are written, as an app's sign-ups arrive. (Written
 * in any other order, an index ordered by time takes each key short of its group's end, where
 * PostgreSQL's B-trees split pages half and half; at its end, they fill a page before splitting it.) */
let lastCopyTime = 0;
const copyTime = () => (lastCopyTime = Math.max(Date.now(), lastCopyTime));

/** An app's sign-up as the official client sends it: a root user with an email and an API key, a
 * wallet with one Ethereum account (the bench's million scenario and test/sub-organization-plans.test.ts). */
export const signUpParameters = (name: string, email: string, publicKey: string) => ({
  subOrganizationName: name,
  rootQuorumThreshold: 1,
  rootUsers: [
    {
      userName: "owner",
      userEmail: email,
      apiKeys: [{ apiKeyName: "device", publicKey, curveType: "API_KEY_CURVE_P256" as const }],
      authenticators: [],
      oauthProviders: [],
    },
  ],
  wallet: {
    walletName: "default",
    accounts: [
      {
        curve: "CURVE_SECP256K1" as const,
        pathFormat: "PATH_FORMAT_BIP32" as const,
        path: "m/44'/60'/0'/0/0",
        addressFormat: "ADDRESS_FORMAT_ETHEREUM" as const,
      },
    ],
  },
});

/** The email of the root user of copy `i`, which list_suborgs (filterType EMAIL) finds it by. */
export const fillerEmail = (i: number) => `end-user-${i}@example.com`;

export interface SignUpTemplate {
  parentId: string;
  subOrganizationId: string;
  /** Rows by table: the sub-organization's, then the parent's activity and its policy evaluation. */
  rows: Record<string, Row[]>;
  /** The template's sealed secrets, opened once, by table and row index. */
  opened: Map<string, Buffer>;
  /** Template value (lower case) → what each copy makes of it. */
  replaced: Map<string, (copy: Copy) => string>;
  pattern: RegExp;
}

interface Copy {
  index: number;
  organizationId: string;
  ids: Map<string, string>;
  values: Map<string, string>;
}

const literally = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Reads the rows one real sign-up of `parentId` wrote for `subOrganizationId`, and opens its secrets. */
export async function readSignUpTemplate(db: Db, keyring: Keyring, parentId: string, subOrganizationId: string): Promise<SignUpTemplate> {
  const dynamic = db as unknown as Kysely<any>;
  const rows: Record<string, Row[]> = {};
  for (const table of SUB_ORGANIZATION_TABLES)
    rows[table] = await dynamic
      .selectFrom(table)
      .selectAll()
      .where(table === "organizations" ? "id" : "organization_id", "=", subOrganizationId)
      .execute();
  rows.activities = await dynamic
    .selectFrom("activities")
    .selectAll()
    .where("organization_id", "=", parentId)
    .where("type", "like", "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION%")
    .where("result", "like", `%${subOrganizationId}%`)
    .execute();
  if (rows.activities.length !== 1) throw new Error(`no single create_sub_organization activity of ${parentId} made ${subOrganizationId}`);
  rows.policy_evaluations = await dynamic
    .selectFrom("policy_evaluations")
    .selectAll()
    .where("activity_id", "=", rows.activities[0]!.id)
    .execute();
  const users = rows.users!;
  if (users.length !== 1 || !users[0]!.email) throw new Error("the template sign-up must have one root user, with an email");

  const opened = new Map<string, Buffer>();
  for (const { table, column, kind } of SECRET_COLUMNS)
    for (const [i, row] of (rows[table] ?? []).entries())
      if (row[column] && table !== "wallet_accounts")
        opened.set(
          `${table}.${i}.${column}`,
          keyring.open(row[column] as string, { organizationId: subOrganizationId, kind, resourceId: row.id as string }),
        );

  // Every id the sign-up made becomes a new id; every unique value a new one of the same shape.
  const replaced = new Map<string, (copy: Copy) => string>();
  for (const [table, list] of Object.entries(rows))
    for (const row of list) {
      if (typeof row.id === "string") replaced.set(row.id.toLowerCase(), (c) => c.ids.get(row.id as string)!);
      for (const column of UNIQUE_COLUMNS[table] ?? []) {
        const value = row[column];
        if (typeof value !== "string" || !value) continue;
        replaced.set(value.toLowerCase(), (c) => {
          let made = c.values.get(value);
          if (!made) c.values.set(value, (made = column === "vote_id" ? crypto.randomUUID() : randomLike(value)));
          return made;
        });
      }
    }
  replaced.set(subOrganizationId.toLowerCase(), (c) => c.organizationId);
  replaced.set((users[0]!.email as string).toLowerCase(), (c) => fillerEmail(c.index));
  replaced.set((rows.organizations![0]!.name as string).toLowerCase(), (c) => `end user ${c.index}`);
  // Longest first, so that no value is replaced inside a longer one.
  const keys = [...replaced.keys()].sort((a, b) => b.length - a.length);
  return { parentId, subOrganizationId, rows, opened, replaced, pattern: new RegExp(keys.map(literally).join("|"), "gi") };
}

/** A random value shaped like `value`: the same prefix ("0x", "02") and length, hex. */
function randomLike(value: string): string {
  const prefix = /^(0x|0[234])/.exec(value)?.[0] ?? "";
  const length = value.length - prefix.length;
  return (
    prefix +
    crypto
      .randomBytes(Math.ceil(length / 2))
      .toString("hex")
      .slice(0, length)
  );
}

/** The rows of copy `index`, by table. */
function copyOf(template: SignUpTemplate, keyring: Keyring, index: number): Record<string, Row[]> {
  const madeAt = copyTime();
  const ids = new Map<string, string>();
  for (const list of Object.values(template.rows)) for (const row of list) if (typeof row.id === "string") ids.set(row.id, newId());
  const organizationId = ids.get(template.subOrganizationId)!;
  const copy: Copy = { index, organizationId, ids, values: new Map() };
  // The account's material first: its address and public key are what the activity's result names.
  const accounts = template.rows.wallet_accounts!.map((row) => {
    const material = randomAccountMaterial(keyring, organizationId, ids.get(row.id as string)!);
    copy.values.set(row.address as string, material.address);
    copy.values.set(row.public_key as string, material.public_key);
    return material;
  });
  const replace = (text: string) => text.replace(template.pattern, (match) => template.replaced.get(match.toLowerCase())!(copy));
  const out: Record<string, Row[]> = {};
  for (const [table, list] of Object.entries(template.rows))
    out[table] = list.map((row, i) => {
      const made: Row = {};
      for (const [column, value] of Object.entries(row)) {
        if (TIME_COLUMNS.has(column) && value !== null) made[column] = madeAt;
        else made[column] = typeof value === "string" ? replace(value) : value;
      }
      for (const { table: t, column, kind } of SECRET_COLUMNS) {
        if (t !== table || !row[column]) continue;
        made[column] =
          table === "wallet_accounts"
            ? accounts[i]!.sealed_private_key
            : keyring.seal(template.opened.get(`${table}.${i}.${column}`)!, { organizationId, kind, resourceId: made.id as string });
      }
      return made;
    });
  return out;
}

/**
 * Adds copies `existing` … `target - 1` of the template sign-up: `perTransaction` sub-organizations
 * (about 12 rows each) a transaction, each table's rows as multi-row INSERTs. Copy `i` is named
 * `end user i`, its root user's email is fillerEmail(i), and its times are when it is made (copyTime).
 */
export async function insertSubOrganizations(
  db: Db,
  keyring: Keyring,
  template: SignUpTemplate,
  target: number,
  existing: number,
  perTransaction = 2000,
): Promise<void> {
  for (let start = existing; start < target; start += perTransaction) {
    const byTable: Record<string, Row[]> = {};
    for (let index = start; index < Math.min(target, start + perTransaction); index++)
      for (const [table, rows] of Object.entries(copyOf(template, keyring, index))) (byTable[table] ??= []).push(...rows);
    await db.transaction().execute(async (trx) => {
      // Parents before children (the foreign keys): the template's tables are listed in that order.
      for (const [table, rows] of Object.entries(byTable)) await insertRows(trx, table, rows);
    });
  }
}
