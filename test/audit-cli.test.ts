// `sigil audit export` and `sigil audit verify` (docs/audit-log.md) as an auditor runs them, on the real
// database file or PostgreSQL database a running server uses: an intact log verifies (exit 0), and
// each of four tamperings — a row changed, deleted, inserted, or rows reordered — of the live database
// and of an exported file is found, naming the broken entry (exit 1).
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
let h: Harness;
let verifierKey: string;

beforeAll(async () => {
  h = await startHarness();
  verifierKey = ((await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as { transparencyLogVerifierKey: string })
    .transparencyLogVerifierKey;
});
afterAll(() => h.close());

/** `sigil <args>` on the harness's database: exit code, stdout, stderr. */
async function sigil(args: string[]) {
  const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_LOG_LEVEL: "warn" };
  delete env.SIGIL_DATABASE_URL;
  delete env.SIGIL_MASTER_KEY;
  if (h.database.databaseUrl) env.SIGIL_DATABASE_URL = h.database.databaseUrl;
  return run(process.execPath, [CLI, ...args, "--data-dir", h.database.dataDir], { env }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
  );
}

/** An organization whose log has six entries (the users' creation and five more), appended by the
 * server's sequencer (flushed: it runs in the background). */
async function organizationWithLog() {
  const { org, root } = await organizationWith(h, ["a"]);
  for (let i = 0; i < 5; i++)
    await root.createUsers({ users: [{ userName: `u${i}`, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] });
  await h.server.logSequencer.flush();
  const leaves = await h.server.store.db
    .selectFrom("transparency_log_leaves")
    .selectAll()
    .where("organization_id", "=", org.organizationId)
    .orderBy("leaf_index")
    .execute();
  expect(leaves).toHaveLength(6);
  return { organizationId: org.organizationId, leaves };
}

const verdict = (stdout: string) => JSON.parse(stdout.trim().split("\n").at(-1)!);

describe("sigil audit verify of the live database", () => {
  it("finds an intact log intact, and names the entry a changed, deleted, inserted or reordered row breaks", async () => {
    const intact = await organizationWithLog();
    const ok = await sigil(["audit", "verify", "--organization", intact.organizationId]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(verdict(ok.stdout)).toMatchObject({ organizationId: intact.organizationId, size: 6, intact: true, problem: null });

    const db = h.server.store.db;
    // Changed: an activity's status rewritten after it was logged.
    const changed = await organizationWithLog();
    await db.updateTable("activities").set({ status: "ACTIVITY_STATUS_FAILED" }).where("id", "=", changed.leaves[3]!.activity_id).execute();
    // Deleted: an entry of the log removed.
    const deleted = await organizationWithLog();
    await db.deleteFrom("transparency_log_leaves").where("activity_id", "=", deleted.leaves[2]!.activity_id).execute();
    // Inserted: an activity written into the database without its entry, as a copy of entry 1's
    // activity, and not left waiting for one (its pending row, which the database writes with it,
    // deleted in the same transaction: the server's sequencer never sees it).
    const inserted = await organizationWithLog();
    const copy = await db.selectFrom("activities").selectAll().where("id", "=", inserted.leaves[1]!.activity_id).executeTakeFirstOrThrow();
    await db.transaction().execute(async (trx) => {
      await trx
        .insertInto("activities")
        .values({ ...copy, id: "forged-activity", fingerprint: "forged" })
        .execute();
      await trx.deleteFrom("transparency_log_pending").where("activity_id", "=", "forged-activity").execute();
    });
    // Reordered: two entries swapped.
    const reordered = await organizationWithLog();
    const [four, five] = [reordered.leaves[4]!, reordered.leaves[5]!];
    await db
      .deleteFrom("transparency_log_leaves")
      .where("organization_id", "=", reordered.organizationId)
      .where("leaf_index", ">=", 4)
      .execute();
    await db
      .insertInto("transparency_log_leaves")
      .values([
        { ...four, leaf_index: 5 },
        { ...five, leaf_index: 4 },
      ])
      .execute();

    const cases = [
      [changed, 3, changed.leaves[3]!.activity_id, "does not hash to the leaf hash of entry 3"],
      [deleted, 2, null, "entry 2 is missing from the log"],
      [inserted, null, "forged-activity", "(ACTIVITY_STATUS_COMPLETED) is final but neither an entry of the log nor waiting for one"],
      [reordered, 4, five.activity_id, "does not hash to the leaf hash of entry 4"],
    ] as const;
    for (const [target, leafIndex, activityId, problem] of cases) {
      // Checked on this thread (a log this small is by default), and on two worker threads.
      for (const threads of [[], ["--threads", "2"]]) {
        const broken = await sigil(["audit", "verify", "--organization", target.organizationId, ...threads]);
        expect(broken.code, problem).toBe(1);
        expect(verdict(broken.stdout)).toMatchObject({
          intact: false,
          problem: { leafIndex, activityId, problem: expect.stringContaining(problem) },
        });
      }
    }
    const onThreads = await sigil(["audit", "verify", "--organization", intact.organizationId, "--threads", "2"]);
    expect(onThreads.code, onThreads.stderr).toBe(0);
    expect(verdict(onThreads.stdout)).toEqual(verdict(ok.stdout));
    // A thread count out of range, or not a number, or for a file: refused (exit 2), nothing checked.
    for (const [args, reason] of [
      [["--threads", "65"], '--threads must be a whole number from 0 to 64, got "65"'],
      [["--threads", "two"], '--threads must be a whole number from 0 to 64, got "two"'],
      [["--file", "x.jsonl", "--public-key", verifierKey, "--threads", "2"], "--threads is for the live database"],
    ] as const) {
      const refused = await sigil(["audit", "verify", ...args]);
      expect(refused.code, reason).not.toBe(0);
      expect(refused.stdout).toBe("");
      expect(refused.stderr).toContain(reason);
    }
    // Every organization at once: one line each, exit 1 since some are broken.
    const all = await sigil(["audit", "verify"]);
    expect(all.code).toBe(1);
    const lines = all.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.find((l) => l.organizationId === intact.organizationId)).toMatchObject({ intact: true });
    expect(lines.find((l) => l.organizationId === changed.organizationId)).toMatchObject({ intact: false });
    // Fifteen processes of the command, some starting threads: on a loaded 2-core machine, a minute or more.
  }, 180_000);
});

describe("sigil audit export, then verify --file offline", () => {
  it("exports a log that verifies with the published key, and names the entry a changed, deleted, inserted or reordered line breaks", async () => {
    const { organizationId, leaves } = await organizationWithLog();
    const out = path.join(h.database.dataDir, `export-${organizationId}.jsonl`);
    const exported = await sigil(["audit", "export", "--organization", organizationId, "--out", out]);
    expect(exported.code, exported.stderr).toBe(0);
    const lines = fs.readFileSync(out, "utf8").trim().split("\n");
    expect(JSON.parse(lines[0]!)).toMatchObject({ type: "header", organizationId, treeSize: 6, verifierKey });
    // The checkpoint signed at export covers the whole log.
    expect(lines.filter((l) => JSON.parse(l).type === "checkpoint").map((l) => JSON.parse(l).treeSize)).toContain(6);
    const entries = lines.map((l, i) => [i, JSON.parse(l)] as const).filter(([, l]) => l.type === "entry");
    expect(entries.map(([, l]) => l.activityId)).toEqual(leaves.map((l) => l.activity_id));
    // An existing file is never overwritten.
    expect((await sigil(["audit", "export", "--organization", organizationId, "--out", out])).code).toBe(1);

    const check = async (text: string) => {
      const file = path.join(h.database.dataDir, `tampered-${Math.random()}.jsonl`);
      fs.writeFileSync(file, text);
      return sigil(["audit", "verify", "--file", file, "--public-key", verifierKey]);
    };
    const ok = await check(lines.join("\n") + "\n");
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(verdict(ok.stdout)).toMatchObject({ organizationId, size: 6, intact: true });

    const at = (entry: number) => entries[entry]![0];
    const edit = (change: (copy: string[]) => void) => {
      const copy = [...lines];
      change(copy);
      return copy.join("\n") + "\n";
    };
    const forged = (entry: number) => {
      const line = JSON.parse(lines[at(entry)]!);
      return JSON.stringify({
        ...line,
        entry: line.entry.replace('"status":"ACTIVITY_STATUS_COMPLETED"', '"status":"ACTIVITY_STATUS_FAILED"'),
      });
    };
    const cases: [string, string, number, string][] = [
      ["changed", edit((c) => (c[at(3)] = forged(3))), 3, "entry 3 does not hash to its leaf hash"],
      ["deleted", edit((c) => c.splice(at(2), 1)), 2, "entry 2 is missing here"],
      ["inserted", edit((c) => c.splice(at(4), 0, c[at(1)]!)), 4, "entry 1 where entry 4 belongs"],
      [
        "reordered",
        edit((c) => {
          [c[at(4)], c[at(5)]] = [c[at(5)]!, c[at(4)]!];
        }),
        4,
        "entry 4 is missing here (the next line is entry 5): it was removed, or the lines reordered",
      ],
    ];
    for (const [what, text, leafIndex, problem] of cases) {
      const broken = await check(text);
      expect(broken.code, what).toBe(1);
      expect(verdict(broken.stdout), what).toMatchObject({
        intact: false,
        problem: { leafIndex, problem: expect.stringContaining(problem) },
      });
    }
    // A file checked with another key: its checkpoints are not that key's.
    const otherKey = `other-log+${verifierKey.split("+")[1]}+${verifierKey.split("+").slice(2).join("+")}`;
    const wrongKey = await sigil(["audit", "verify", "--file", out, "--public-key", otherKey]);
    expect(wrongKey.code).not.toBe(0);
  });
});
