// The store on its own: migrations are safe when several processes start on one fresh database.
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
        Array.from({ length: 6 }, () => run(process.execPath, ["--input-type=module", "-e", OPEN_AT, database.dataDir, database.databaseUrl ?? "", String(startAt)])),
      );
      expect(results.map((r) => (r.status === "rejected" ? String((r.reason as { stderr?: string }).stderr ?? r.reason) : "ok"))).toEqual(Array(6).fill("ok"));
      const store = await openStore(database);
      try {
        const applied = await store.db.selectFrom("sigil_migrations" as any).select("name" as any).execute();
        expect(applied).toEqual([{ name: "0001_initial" }]);
      } finally {
        await store.close();
      }
    } finally {
      await database.drop();
    }
  });
});
