// Every row written to any table, as the database itself records it: a trigger on each table appends
// the old and the new row (an insert has no old row, a delete no new one) to a journal table, and a
// test reads and empties the journal after each request. Reading what changed costs what changed,
// where reading every row of every table after each request costs the whole database each time.
//
// The journal is a test fixture only: the server never reads it, and the triggers write nothing but
// the journal. A row is written in the form the whole-table snapshots use (row_to_json on PostgreSQL,
// the JSON of the row as better-sqlite3 returns it on SQLite), so the two can be checked against each
// other: `ChangeModel` applies the journal to a snapshot and compares the result with a later one.
import { sql } from "kysely";
import type { Store } from "../../src/store/database.js";
import type { Db, Tx } from "../../src/store/handles.js";

export const JOURNAL_TABLE = "sigil_test_journal";

/** One row change. A TRUNCATE (PostgreSQL) has neither an old nor a new row: it removed them all. */
export interface Change {
  table: string;
  old: string | null;
  new: string | null;
}

/** Per table, the rows a set of changes brought in and took out (as sets, like a snapshot diff). */
export type TableChanges = Record<string, { added: string[]; removed: string[] }>;

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`;
const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;

export class ChangeJournal {
  private constructor(private readonly store: Store) {}

  /** Creates the journal table and a trigger on each of `tables` (their columns as they are now). */
  static async install(store: Store, tables: string[]): Promise<ChangeJournal> {
    const db = store.db;
    const run = (statement: string) => sql.raw(statement).execute(db);
    if (store.dialect === "postgres") {
      await run(`CREATE TABLE ${JOURNAL_TABLE} (seq bigserial PRIMARY KEY, tbl text NOT NULL, old text, new text)`);
      // OLD is NULL in an INSERT trigger and NEW in a DELETE one (PostgreSQL 11 and later).
      await run(`CREATE FUNCTION ${JOURNAL_TABLE}_row() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO ${JOURNAL_TABLE} (tbl, old, new) VALUES (TG_TABLE_NAME,
            CASE WHEN TG_OP <> 'INSERT' THEN row_to_json(OLD)::text END,
            CASE WHEN TG_OP <> 'DELETE' THEN row_to_json(NEW)::text END);
          RETURN NULL;
        END $$`);
      await run(`CREATE FUNCTION ${JOURNAL_TABLE}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO ${JOURNAL_TABLE} (tbl, old, new) VALUES (TG_TABLE_NAME, NULL, NULL);
          RETURN NULL;
        END $$`);
      for (const table of tables) {
        await run(
          `CREATE TRIGGER ${JOURNAL_TABLE}_row AFTER INSERT OR UPDATE OR DELETE ON ${quoted(table)} FOR EACH ROW EXECUTE FUNCTION ${JOURNAL_TABLE}_row()`,
        );
        await run(
          `CREATE TRIGGER ${JOURNAL_TABLE}_truncate AFTER TRUNCATE ON ${quoted(table)} FOR EACH STATEMENT EXECUTE FUNCTION ${JOURNAL_TABLE}_truncate()`,
        );
      }
    } else {
      await run(`CREATE TABLE ${JOURNAL_TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, old TEXT, new TEXT)`);
      // A REPLACE that deletes a conflicting row runs delete triggers only with recursive triggers on
      // (the server issues none, but then the journal would not miss it). No trigger of the server's.
      await run("PRAGMA recursive_triggers = ON");
      for (const table of tables) {
        const { rows } = await sql<{ name: string }>`SELECT name FROM pragma_table_info(${table}) ORDER BY cid`.execute(db);
        // json_object cannot hold a BLOB: one is written as text that no snapshot shows, so the
        // comparison with the next snapshot fails loudly instead of the server's write failing.
        const image = (row: "OLD" | "NEW") =>
          `json_object(${rows
            .map(({ name }) => {
              const column = `${row}.${quoted(name)}`;
              return `${literal(name)}, CASE WHEN typeof(${column}) = 'blob' THEN 'BLOB ' || hex(${column}) ELSE ${column} END`;
            })
            .join(", ")})`;
        const trigger = (event: string, old: string, now: string) =>
          run(
            `CREATE TRIGGER ${quoted(`${JOURNAL_TABLE}_${event}_${table}`)} AFTER ${event} ON ${quoted(table)} BEGIN ` +
              `INSERT INTO ${JOURNAL_TABLE} (tbl, old, new) VALUES (${literal(table)}, ${old}, ${now}); END`,
          );
        await trigger("INSERT", "NULL", image("NEW"));
        await trigger("UPDATE", image("OLD"), image("NEW"));
        await trigger("DELETE", image("OLD"), "NULL");
      }
    }
    return new ChangeJournal(store);
  }

  /** The changes committed since the last call, in the order they were made; the journal is emptied.
   * In `db`, a transaction, it takes the changes that transaction sees. */
  async take(db: Db | Tx = this.store.db): Promise<Change[]> {
    const { rows } = await sql<{ seq: number | string; tbl: string; old: string | null; new: string | null }>`
      DELETE FROM ${sql.table(JOURNAL_TABLE)} RETURNING seq, tbl, old, new`.execute(db);
    rows.sort((a, b) => Number(a.seq) - Number(b.seq));
    // SQLite's json_object and JSON.stringify write the same values differently (spacing, numbers):
    // read back, a row is written the way the snapshots write it.
    const sqlite = this.store.dialect === "sqlite";
    const same = (row: string | null) => (row === null || !sqlite ? row : JSON.stringify(JSON.parse(row)));
    return rows.map((r) => ({ table: r.tbl, old: same(r.old), new: same(r.new) }));
  }
}

/** What the changes did, table by table: rows that arrived and were not there before, rows that left. */
export function journalDiff(changes: Change[]): TableChanges {
  const before: Record<string, string[]> = {};
  const after: Record<string, string[]> = {};
  for (const change of changes) {
    // A TRUNCATE removed rows the journal cannot name: it shows as a removal all the same.
    const old = change.old ?? (change.new === null ? `(every row: TRUNCATE ${change.table})` : null);
    if (old !== null) (before[change.table] ??= []).push(old);
    if (change.new !== null) (after[change.table] ??= []).push(change.new);
  }
  return snapshotDiff(before, after);
}

/** Two snapshots (every row of every table, as JSON text), compared table by table as sets of rows. */
export function snapshotDiff(before: Record<string, string[]>, after: Record<string, string[]>): TableChanges {
  const out: TableChanges = {};
  for (const table of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const was = new Set(before[table] ?? []);
    const is = new Set(after[table] ?? []);
    const added = [...is].filter((r) => !was.has(r));
    const removed = [...was].filter((r) => !is.has(r));
    if (added.length || removed.length) out[table] = { added, removed };
  }
  return out;
}

/**
 * The database as the tests believe it is: a snapshot, with every journaled change since applied.
 * Compared with a fresh snapshot, it proves the journal recorded every change in between: a write
 * the triggers had missed would leave the belief and the database apart.
 */
export class ChangeModel {
  private readonly tables = new Map<string, Map<string, number>>();
  private readonly problems: string[] = [];

  constructor(snapshot: Record<string, string[]>) {
    for (const [table, rows] of Object.entries(snapshot)) {
      const counts = new Map<string, number>();
      for (const row of rows) counts.set(row, (counts.get(row) ?? 0) + 1);
      this.tables.set(table, counts);
    }
  }

  /** Applies one batch of changes: its new rows, then the removal of its old ones (so the order of
   * changes made by concurrent transactions inside a batch does not matter). */
  apply(changes: Change[]): void {
    for (const { table, new: row } of changes) {
      if (row === null) continue;
      const counts = this.tables.get(table) ?? this.tables.set(table, new Map()).get(table)!;
      counts.set(row, (counts.get(row) ?? 0) + 1);
    }
    for (const { table, old: row, new: now } of changes) {
      const counts = this.tables.get(table) ?? this.tables.set(table, new Map()).get(table)!;
      if (row === null && now === null) counts.clear();
      if (row === null) continue;
      const count = counts.get(row) ?? 0;
      if (count === 0) this.problems.push(`the journal removed a row ${table} did not hold: ${row.slice(0, 300)}`);
      else if (count === 1) counts.delete(row);
      else counts.set(row, count - 1);
    }
  }

  /** The first way `snapshot` differs from the belief, or undefined when they agree row for row. */
  differenceFrom(snapshot: Record<string, string[]>): string | undefined {
    if (this.problems.length) return this.problems[0];
    const actual = new ChangeModel(snapshot).tables;
    for (const table of new Set([...this.tables.keys(), ...actual.keys()])) {
      const believed = this.tables.get(table) ?? new Map<string, number>();
      const is = actual.get(table) ?? new Map<string, number>();
      for (const [row, count] of is)
        if (believed.get(row) !== count) return `${table} holds a row the journal did not record: ${row.slice(0, 300)}`;
      for (const [row, count] of believed)
        if (is.get(row) !== count) return `${table} lost a row the journal did not record leaving: ${row.slice(0, 300)}`;
    }
    return undefined;
  }
}
