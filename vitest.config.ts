// The whole suite runs on SQLite, and again on PostgreSQL when TEST_DATABASE_URL is set.
import { defineConfig } from "vitest/config";

const backends = ["sqlite", ...(process.env.TEST_DATABASE_URL ? ["postgres"] : [])];
// Suites that touch no database (the policy language on its own), or only SQLite (its shared write
// transactions), run once, in the first project.
const databaseFree = ["test/layers.test.ts", "test/policy-language.test.ts", "test/policy-fuzz.test.ts", "test/policy-chain-keywords.test.ts", "test/crypto-wallets.test.ts", "test/group-commit.test.ts"];

export default defineConfig({
  test: {
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
