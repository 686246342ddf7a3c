// The store on its own: migrations are safe when several processes start on one fresh database.
import { migrations } from "../src/store/migrations.js";
import { describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { createTestDatabase } from "./helpers/backend.js";
import { openStore } from "../src/store/database.js";

const run = promisify(execFile);

/** A process that waits until `startAt` (ms since the epoch), then opens (and so migrates) the store. */
const OPEN_AT = `
const { openStore } = await import(${JSON.stringify(pathToFileURL(path.resolve("dist/store/database.js")).href)});
const [dataDir, databaseUrl, startAt] = process.argv.slice(1);
while (Date.now() < Number(startAt)) {}
const store = await openStore({ dataDir, databaseUrl: databaseUrl || null });
await store.close();
`;

describe("migrations", () => {
  it("succeed when several processes start on the same fresh database at the same moment", async () => {
    const database = await createTestDatabase();
    try {
      const startAt = Date.now() + 1500;
      const results = await Promise.allSettled(
        Array.from({ length: 6 }, () =>
          run(process.execPath, ["--input-type=module", "-e", OPEN_AT, database.dataDir, database.databaseUrl ?? "", String(startAt)]),
        ),
      );
      expect(results.map((r) => (r.status === "rejected" ? String((r.reason as { stderr?: string }).stderr ?? r.reason) : "ok"))).toEqual(
        Array(6).fill("ok"),
      );
      const store = await openStore(database);
      try {
        const applied = await store.db
          .selectFrom("sigil_migrations" as any)
          .select("name" as any)
          .orderBy("name" as any)
          .execute();
        // Each migration applied exactly once, whichever process won the race.
        expect(applied).toEqual(
          Object.keys(migrations)
            .sort()
            .map((name) => ({ name })),
        );
      } finally {
        await store.close();
      }
    } finally {
      await database.drop();
    }
  });
});

describe("PostgreSQL connection loss", () => {
  it("survives the database dropping every pooled connection, and reconnects", async () => {
    const { startHarness } = await import("./helpers/harness.js");
    const h = await startHarness();
    try {
      const org = await h.organization();
      const client = h.sdk(org, org.key);
      expect((await client.getWhoami({})).userId).toBe(org.userId);
      if (h.database.databaseUrl) {
        const pg = (await import("pg")).default;
        const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await admin.connect();
        const name = new URL(h.database.databaseUrl).pathname.slice(1);
        const killed = await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", [name]);
        await admin.end();
        expect(killed.rowCount).toBeGreaterThan(0);
        await new Promise((r) => setTimeout(r, 200));
        expect(h.logLines.some((line) => line.includes("database connection lost"))).toBe(true);
      }
      // The server is still up and serves requests on fresh connections.
      expect((await client.getWhoami({})).userId).toBe(org.userId);
    } finally {
      await h.close();
    }
  });
});
