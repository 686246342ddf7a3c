// What PostgreSQL's client backends of the bench's databases (`sigil_bench_…`) are doing while a load
// runs beside it: `pg_stat_activity` sampled every 20 ms for BENCH_SAMPLE_SECONDS (60), counted over
// the samples in which some backend is busy (in a statement or a transaction), with how many pooled
// connections sat idle meanwhile (docs/benchmarks.md#postgresql-signing, "Where the tail comes from").
// Start it once the load has begun, from another shell:
//   BENCH_DATABASE_URL=postgres://…/postgres [BENCH_SAMPLE_SECONDS=60] node --import tsx bench/pg-waits.ts
import pg from "pg";

const url = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
if (!url) throw new Error("BENCH_DATABASE_URL names the PostgreSQL server the bench runs on");
const seconds = Number(process.env.BENCH_SAMPLE_SECONDS ?? 60);

const client = new pg.Client({ connectionString: url });
await client.connect();
const states = new Map<string, number>();
const idleBeside = new Map<number, number>();
let busySamples = 0;
let busyBackends = 0;
try {
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    const { rows } = await client.query<{ state: string; wait: string }>(
      `select coalesce(state, '-') as state, coalesce(wait_event_type || ' ' || wait_event, 'CPU') as wait
         from pg_stat_activity
        where backend_type = 'client backend' and datname like 'sigil\\_bench\\_%' and pid <> pg_backend_pid()`,
    );
    const busy = rows.filter((r) => r.state !== "idle");
    if (busy.length > 0) {
      busySamples++;
      busyBackends += busy.length;
      const idle = rows.length - busy.length;
      idleBeside.set(idle, (idleBeside.get(idle) ?? 0) + 1);
      for (const r of busy) states.set(`${r.state}, ${r.wait}`, (states.get(`${r.state}, ${r.wait}`) ?? 0) + 1);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
} finally {
  await client.end();
}
const share = (n: number) => `${((100 * n) / Math.max(1, busyBackends)).toFixed(1)} %`;
console.log(
  JSON.stringify(
    {
      busySamples,
      busyBackendsPerSample: busySamples ? Number((busyBackends / busySamples).toFixed(2)) : 0,
      samplesByIdleConnections: Object.fromEntries([...idleBeside].sort((a, b) => a[0] - b[0])),
      busyBackendsBy: Object.fromEntries([...states].sort((a, b) => b[1] - a[1]).map(([what, n]) => [what, `${n} (${share(n)})`])),
    },
    null,
    2,
  ),
);
