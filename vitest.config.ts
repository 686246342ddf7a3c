// The whole suite runs on SQLite, and again on PostgreSQL when TEST_DATABASE_URL is set.
import { defineConfig } from "vitest/config";

const backends = ["sqlite", ...(process.env.TEST_DATABASE_URL ? ["postgres"] : [])];
// Suites that touch no database (the policy language on its own), or only SQLite (its shared write
// transactions), run once, in the first project. So does the web console's browser suite: the page
// is the same whatever database the server uses, and the server's backends are proven by the others.
const databaseFree = ["test/layers.test.ts", "test/query-plans.test.ts", "test/stamps.test.ts", "test/wal-flush.test.ts", "test/policy-language.test.ts", "test/policy-fuzz.test.ts", "test/policy-chain-keywords.test.ts", "test/crypto-wallets.test.ts", "test/group-commit.test.ts", "test/bench-floor.test.ts", "test/secp256k1.test.ts", "test/console.test.ts"];

export default defineConfig({
  test: {
    // Vitest's default on a 2-core machine is one worker (cores - 1), and each test file then waits
    // for the previous one's process start and module loading; files spend much of their time waiting
    // on sockets (nodes, SMTP, HTTP receivers, PostgreSQL), so three forks keep both cores busy.
    // Every file has its own database (test/helpers/backend.ts), so files cannot see each other.
    maxWorkers: 3,
    minWorkers: 1,
    projects: backends.map((backend, i) => ({
      test: {
        name: backend,
        include: ["test/**/*.test.ts"],
        exclude: i === 0 ? [] : databaseFree,
        env: { SIGIL_TEST_BACKEND: backend },
        testTimeout: 30_000,
        hookTimeout: 60_000,
        pool: "forks",
      },
    })),
  },
});
