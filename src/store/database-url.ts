// SIGIL_DATABASE_URL: which forms are accepted, how messages show it (never its password), and how an
// operator creates the PostgreSQL database it names when that does not exist yet.

const PROTOCOLS = ["postgres:", "postgresql:"];

/** Refuses anything but a postgres:// or postgresql:// URL, by name, without repeating a password. */
export function checkDatabaseUrl(raw: string, name = "SIGIL_DATABASE_URL"): void {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`${name} is not a URL: expected postgres://user@host:5432/database (leave it unset for SQLite in the data directory)`);
  }
  if (!PROTOCOLS.includes(url.protocol)) {
    throw new Error(
      `${name} must be a postgres:// or postgresql:// URL, not ${url.protocol}// (${displayDatabaseUrl(raw)}); ` +
        "for SQLite leave it unset and choose the directory with --data-dir or SIGIL_DATA_DIR",
    );
  }
}

/** User, host, port and database: what logs and messages show. The password is masked and the query
 * (which may carry password= or sslpassword=) is left out. */
export function displayDatabaseUrl(raw: string): string {
  try {
    const url = new URL(raw);
    const user = url.username ? `${url.username}${url.password ? ":***" : ""}@` : url.password ? ":***@" : "";
    return `${url.protocol}//${user}${url.host}${url.pathname}${url.search ? "?…" : ""}`;
  } catch {
    return "<SIGIL_DATABASE_URL, not a URL>";
  }
}

/** What the URL connects to, as libpq's tools take it: the defaults pg applies when a part is absent. */
function target(raw: string) {
  const url = new URL(raw);
  const user = decodeURIComponent(url.username);
  return {
    host: url.searchParams.get("host") ?? decodeURIComponent(url.hostname),
    port: url.port,
    user,
    // pg connects to the database named like the user when the URL names none.
    database: decodeURIComponent(url.pathname.replace(/^\//, "")) || user || process.env.USER || "postgres",
  };
}

// "=" and "," need no quoting after the command's name, where every word printed here stands.
const shellWord = (word: string) => (/^[A-Za-z0-9_./:@=,+-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`);

/** The name of the database the URL names, and the two usual ways to create it (with no password). */
export function missingDatabaseAdvice(raw: string): { database: string; advice: string } {
  const { host, port, user, database } = target(raw);
  const flags = [...(host ? ["-h", host] : []), ...(port ? ["-p", port] : []), ...(user ? ["-U", user] : [])];
  const createdb = ["createdb", ...flags, database].map(shellWord).join(" ");
  const statement = `CREATE DATABASE "${database.replaceAll('"', '""')}";`;
  return { database, advice: `create it first (\`${createdb}\`, or \`${statement}\` in psql), then run this again` };
}

/** Query parameters of a URL that libpq's tools read from the environment instead (the URL's
 * `host` is read by target()); `password` and `sslpassword` are never shown. */
const LIBPQ_ENVIRONMENT: Record<string, string> = {
  sslmode: "PGSSLMODE",
  sslrootcert: "PGSSLROOTCERT",
  sslcert: "PGSSLCERT",
  sslkey: "PGSSLKEY",
  sslcrl: "PGSSLCRL",
  options: "PGOPTIONS",
};

/**
 * The pg_dump, createdb and pg_restore commands that back up the database the URL names into `out`
 * and restore it into a new database beside it (`<name>_restored`), as shell command lines without the
 * password. `notCarried`: the query parameters left out (other than the password's).
 */
export function postgresBackupCommands(raw: string, out: string) {
  const { host, port, user, database } = target(raw);
  const url = new URL(raw);
  const environment: string[] = [];
  const notCarried: string[] = [];
  for (const [key, value] of url.searchParams) {
    if (key === "host" || key === "password" || key === "sslpassword") continue;
    if (LIBPQ_ENVIRONMENT[key]) environment.push(`${LIBPQ_ENVIRONMENT[key]}=${shellWord(value)}`);
    else notCarried.push(key);
  }
  const flags = [...(host ? ["-h", host] : []), ...(port ? ["-p", port] : []), ...(user ? ["-U", user] : [])];
  const restoredDatabase = `${database}_restored`;
  const line = (words: string[]) => [...environment, ...words.map(shellWord)].join(" ");
  return {
    location: displayDatabaseUrl(raw),
    database,
    restoredDatabase,
    dump: line(["pg_dump", "--format=custom", "--file", out, ...flags, database]),
    createdb: line(["createdb", ...flags, restoredDatabase]),
    restore: line(["pg_restore", "--exit-on-error", "--single-transaction", "--no-owner", ...flags, "--dbname", restoredDatabase, out]),
    notCarried,
  };
}
