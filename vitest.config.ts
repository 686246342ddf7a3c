// The whole suite runs on SQLite, and again on PostgreSQL when TEST_DATABASE_URL is set.
import { defineConfig } from "vitest/config";

const backends = ["sqlite", ...(process.env.TEST_DATABASE_URL ? ["postgres"] : [])];

export default defineConfig({
  test: {
    projects: backends.map((backend) => ({
      test: {
        name: backend,
        include: ["test/**/*.test.ts"],
        env: { SIGIL_TEST_BACKEND: backend },
        testTimeout: 30_000,
        hookTimeout: 60_000,
        pool: "forks",
      },
    })),
  },
});
