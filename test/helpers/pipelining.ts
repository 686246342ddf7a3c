// For tests of statements pipelined on one PostgreSQL connection (src/store/pipelined-*.ts): a
// statement slow enough on either database that another is asked for while it runs, and a plugin
// that notes when a statement has its answer.
import { sql, type KyselyPlugin } from "kysely";
import { backend } from "./backend.js";

/** Runs for about half a second on PostgreSQL, and long enough on SQLite. */
export const slowStatement = () =>
  backend === "postgres"
    ? sql`select pg_sleep(0.5)`
    : sql`with recursive n(i) as (select 1 union all select i + 1 from n where i < 3000000) select count(*) from n`;

/** A plugin whose `answered` turns true as soon as a statement run through it has its result, before its caller resumes. */
export function answerWatch(): { plugin: KyselyPlugin; readonly answered: boolean } {
  let answered = false;
  return {
    plugin: {
      transformQuery: ({ node }) => node,
      transformResult: async ({ result }) => {
        answered = true;
        return result;
      },
    },
    get answered() {
      return answered;
    },
  };
}
