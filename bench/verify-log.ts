// `sigil audit verify`'s check of a kept database's large logs, timed: seconds, and the CPU of this
// process (the verifying thread and its threads) per entry (docs/benchmarks.md#the-transparency-log).
// Each log on one snapshot, as the command checks it.
//   BENCH_DATA_DIR=D [BENCH_DATABASE_URL=postgres://…] [BENCH_VERIFY_THREADS=N] node --import tsx bench/verify-log.ts
import os from "node:os";
import { openStore } from "../src/store/database.js";
import { verifyStoredLog } from "../src/services/log-audit.js";
import type { Tx } from "../src/store/handles.js";

const store = await openStore({ dataDir: process.env.BENCH_DATA_DIR ?? "data", databaseUrl: process.env.BENCH_DATABASE_URL ?? null });
try {
  const logs = await store.reader
    .selectFrom("transparency_log_heads")
    .select(["organization_id", "size"])
    .where("size", ">=", 1_000)
    .execute();
  const snapshot = <T>(work: (trx: Tx) => Promise<T>) =>
    store.dialect === "postgres" ? store.readSnapshot(work) : store.reader.transaction().execute(work);
  const threads = process.env.BENCH_VERIFY_THREADS === undefined ? {} : { threads: Number(process.env.BENCH_VERIFY_THREADS) };
  for (const log of logs) {
    const started = performance.now();
    const cpu = process.cpuUsage();
    const verified = await snapshot((trx) => verifyStoredLog(trx, log.organization_id, null, Date.now(), threads));
    const used = process.cpuUsage(cpu);
    const seconds = (performance.now() - started) / 1000;
    console.log(
      JSON.stringify({
        organizationId: log.organization_id,
        size: verified.size,
        problem: verified.problem,
        ...threads,
        seconds: Math.round(seconds * 10) / 10,
        cpuMicrosecondsPerEntry: Math.round(((used.user + used.system) / verified.size) * 10) / 10,
        loadAverage: os.loadavg(),
      }),
    );
  }
} finally {
  await store.close();
}
