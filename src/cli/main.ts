// sigil <command> [options]. Each command is declared once, as a value: its options and what it does.
// Parsing, the usage text, --help and the refusal of a bad command line all derive from that
// declaration. Commands stay thin: check the arguments, call the library, print one result. Each loads
// the part of the library it needs when it runs, so --help, --version and a refused command line
// answer at once, without loading the server, the chains and the database drivers.
import { parseArgs } from "node:util";
import path from "node:path";
import crypto from "node:crypto";
import fs from "node:fs";
import type { Config } from "../config.js";
import type { OpenMode, Store } from "../store/database.js";

export interface OptionSpec {
  /** The value's placeholder in the usage text; absent for a switch, which takes no value. */
  value?: string;
  summary: string;
  required?: boolean;
  /** The value must be a whole number in this range (written in decimal digits only). */
  range?: readonly [number, number];
  /** The value must be one of these (or, with `range`, a number in the range or one of these). */
  choices?: readonly string[];
}

type Values = Record<string, string | number | true | undefined>;

export interface CommandSpec {
  /** One line, for the list of commands. */
  summary: string;
  /** What --help adds below the usage line. */
  description: string;
  /**
   * What the command does with the master key, which --help says beside SIGIL_DATABASE_URL (where
   * --data-dir locates nothing else): uses it, reports it (info), or never reads it.
   */
  masterKey: "uses" | "reports" | "none";
  /** What --help says about SIGIL_DATABASE_URL instead of the note `masterKey` implies. */
  postgresNote?: string;
  options: Record<string, OptionSpec>;
  /** The one argument the command takes besides its options (a file), written in the usage as `value`;
   * it is required. The command reads it as values._ */
  argument?: { value: string; summary: string };
  run(values: Values): Promise<void>;
}

/** A command line that names no command, an unknown option, a missing value, an extra argument, a bad number: exit 2. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message);
  }
}

const dataDirOption: OptionSpec = {
  value: "D",
  summary: "directory of the SQLite database (sigil.db) and the master key file (default: SIGIL_DATA_DIR, else ./data)",
};
const databaseNote: Record<CommandSpec["masterKey"], string> = {
  uses: "With SIGIL_DATABASE_URL=postgres://… set, the database is that PostgreSQL database; --data-dir then only locates the master key.",
  reports:
    "With SIGIL_DATABASE_URL=postgres://… set, the database is that PostgreSQL database; --data-dir then only locates the master key, " +
    "which this command reports (masterKey) but does not need.",
  none:
    "With SIGIL_DATABASE_URL=postgres://… set, the database is that PostgreSQL database; this command reads no master key, so " +
    "--data-dir then plays no part.",
};
const readOnlyNote =
  "It only reads: it never creates, migrates or changes a database, and fails (naming the file or URL) where there is no Sigil database.";

const text = (values: Values, name: string) => values[name] as string | undefined;

// Exported for test/cli.test.ts, which sends a bad value to every option declared with a range or choices.
export const commands: Record<string, CommandSpec> = {
  serve: {
    masterKey: "uses",
    summary: "runs the server; creates the database and the master key on first start",
    description:
      "Runs the server until SIGINT or SIGTERM. The first start makes the data directory, the database (or Sigil's tables in the " +
      "PostgreSQL database, which must exist) and the master key; later starts bring the schema up to date. With --workers N " +
      "(PostgreSQL only) a primary process does that once, then runs N server processes on the one port, replaces one that dies " +
      "and stops them all on SIGINT or SIGTERM (docs/running.md).",
    options: {
      host: { value: "H", summary: "address to listen on (default: SIGIL_HOST, else 127.0.0.1)" },
      port: { value: "P", summary: "port to listen on, 1 to 65535 (default: SIGIL_PORT, else 8080)", range: [1, 65_535] },
      "data-dir": dataDirOption,
      workers: {
        value: "N",
        summary:
          "server processes sharing the port and the database (PostgreSQL only), 1 to 64, or auto: one per core " +
          "(default: SIGIL_WORKERS, else 1)",
        // 64: MAX_WORKERS in config.ts, which SIGIL_WORKERS is checked against.
        range: [1, 64],
        choices: ["auto"],
      },
    },
    run: serve,
  },
  keygen: {
    masterKey: "none",
    summary: "makes a P-256 API key pair: written to a new file (mode 0600), or printed",
    description:
      'Makes a P-256 API key pair, {"publicKey":"02…","privateKey":"…"} (hex). With --out the pair is written to a new file ' +
      'readable by its owner only (mode 0600) and {"publicKey","file"} is printed; an existing file is never overwritten. ' +
      "Without --out the pair is printed as one JSON line.",
    options: { out: { value: "FILE", summary: "write the key pair to FILE, which must not exist yet" } },
    run: keygen,
  },
  bootstrap: {
    masterKey: "none",
    summary: "creates an organization whose root user holds the given API key",
    description:
      "Creates an organization with one root user (root quorum threshold 1) holding the API public key, and prints " +
      '{"organizationId","userId","apiKeyId","database"}. It may run while servers use the same database. Where there is no Sigil ' +
      "database yet it refuses, creating nothing, unless --create is given. It writes no secret: it needs no master key and " +
      "makes none (the first `sigil serve` does).",
    options: {
      "org-name": { value: "N", summary: "the organization's name", required: true },
      "user-name": { value: "U", summary: "the root user's name", required: true },
      "api-public-key": {
        value: "K",
        summary: "the root user's API public key: compressed P-256, hex (from `sigil keygen`)",
        required: true,
      },
      "user-email": { value: "E", summary: "the root user's email" },
      "api-key-name": { value: "X", summary: 'the API key\'s name (default "bootstrap")' },
      "data-dir": dataDirOption,
      create: { summary: "create the database (SQLite file, or Sigil's tables in PostgreSQL) if there is none" },
    },
    run: bootstrap,
  },
  "rotate-master-key": {
    masterKey: "uses",
    summary: "re-seals every stored secret under a new master key, in a key file or a PKCS#11 token (see docs/secrets.md, docs/hsm.md)",
    description:
      "Re-seals every stored secret under a new master key, in one transaction, opening them with every key at hand (the key " +
      "file, SIGIL_MASTER_KEY_PREVIOUS, the data key a PKCS#11 token wraps). --to token moves them under a new data key wrapped " +
      "by the token SIGIL_PKCS11_MODULE and the other token settings name; --to file, under a key file (docs/hsm.md). With the default key file the " +
      "new key is made into master.key.next, and becomes master.key afterwards (the old one is kept as " +
      "master.key.previous-<key id>). With SIGIL_MASTER_KEY set, the new key is read from --new-key-file. Refuses, creating " +
      "nothing, where there is no database or no master key.",
    options: {
      "data-dir": dataDirOption,
      to: {
        value: "K",
        summary:
          "where the new master key is: file (a key file) or token (a new data key wrapped by the PKCS#11 token the token settings name); " +
          "default: where it is now",
        choices: ["file", "token"],
      },
      "new-key-file": { value: "F", summary: "with --to file: file holding the new 32-byte key (64 hex digits or base64)" },
    },
    run: rotateMasterKey,
  },
  info: {
    masterKey: "reports",
    summary: "prints the deployment's public keys as one JSON line",
    description:
      "Prints the database's location and the deployment's public keys as one JSON line: signerPublicKey (what clients " +
      "pass as dangerouslyOverrideSignerPublicKey), the webhook signing key, the session signing key and the verifier key of " +
      "the organizations' transparency log checkpoints (transparencyLogVerifierKey, docs/audit-log.md). It also says which " +
      "master key this configuration names (masterKey: where it is, its key id, whether it opens the database's secrets; null, " +
      "with the reason on stderr, where there is none) and the key ids the database's secrets are sealed under " +
      "(databaseKeyIds): the servers need a key holding those. It reads the key but needs none, and never makes one. " +
      readOnlyNote,
    options: { "data-dir": dataDirOption },
    run: info,
  },
  outbox: {
    masterKey: "uses",
    summary: "prints the emails and SMS waiting in the local outbox",
    description:
      "Prints the emails and SMS kept in the local outbox (no SIGIL_SMTP_URL / SIGIL_SMS_URL) whose codes are still valid, " +
      "oldest first, one JSON line each. They are sealed: the master key the servers use must be at hand. " +
      readOnlyNote,
    options: {
      organization: { value: "ID", summary: "only this organization's messages" },
      "data-dir": dataDirOption,
    },
    run: outbox,
  },
  "remove-ip-allowlist": {
    masterKey: "none",
    summary: "removes an organization's (or one API key's) IP allowlist: the way back for a locked-out organization",
    description:
      "Removes the IP allowlist of the organization, or with --api-key that of one of its API keys, directly in the database, and " +
      'prints {"organizationId","apiKeyId","removed":true}. For an operator whose organization locked its own API keys out ' +
      "(docs/ip-allowlists.md); servers sharing the database apply the change to their next request. It records no activity: the " +
      "operator's log line on stderr and this command's output are the record. Refuses, changing nothing, where there is no such " +
      "organization or list, and where there is no database.",
    options: {
      organization: { value: "ID", summary: "the organization whose allowlist goes", required: true },
      "api-key": { value: "ID", summary: "the API key (its id) whose own allowlist goes, instead of the organization's" },
      "data-dir": dataDirOption,
    },
    run: removeIpAllowlistCommand,
  },
  webhooks: {
    masterKey: "none",
    summary: "prints the webhook delivery log, newest first",
    description:
      "Prints the webhook delivery log, newest first, one JSON line per delivery (event id, activity, URL, status, attempts, " +
      "last HTTP status or error; never the body). " +
      readOnlyNote,
    options: {
      status: { value: "S", summary: "only deliveries in this state", choices: ["pending", "delivered", "failed", "cancelled"] },
      organization: { value: "ID", summary: "only deliveries of this organization (as subscriber or as the activity's organization)" },
      limit: { value: "N", summary: "at most N deliveries, 1 to 10000 (default 50)", range: [1, 10_000] },
      "data-dir": dataDirOption,
    },
    run: webhooks,
  },
  "audit export": {
    masterKey: "uses",
    summary: "writes an organization's transparency log, with its checkpoints, as JSON lines (docs/audit-log.md)",
    description:
      "Writes the organization's transparency log as JSON lines: a header, its signed checkpoints (one signed now for the " +
      "whole log, which needs the servers' master key), and one line per entry, in order. To standard output, or with --out " +
      "to a new file (never overwritten). `sigil audit verify --file` checks the file with no database (docs/audit-log.md).",
    options: {
      organization: { value: "ID", summary: "the organization whose log is written", required: true },
      out: { value: "F", summary: "write to F, which must not exist yet, instead of standard output" },
      "data-dir": dataDirOption,
    },
    run: auditExport,
  },
  "audit verify": {
    masterKey: "none",
    summary: "checks a transparency log: an exported file offline, or the live database; exit 0 when intact",
    description:
      "With --file, checks a file of `sigil audit export` offline, with no database: every entry against its leaf hash and " +
      "place, the tree against every checkpoint, each checkpoint's signature against --public-key (the verifier key, " +
      "transparencyLogVerifierKey). Without --file, checks the live database: every entry against the activity it records, " +
      "the stored tree, every stored checkpoint, and that every final activity is logged (or waits for the sequencer for less " +
      "than the maximum merge delay, 60 s: counted as pending); one organization's log, or every " +
      "organization's. Prints one JSON line per log; exits 0 when intact, and 1 naming the first broken entry (its leaf " +
      "index, its activity, what does not match). " +
      readOnlyNote,
    options: {
      file: { value: "F", summary: "an exported log to check offline (needs --public-key)" },
      "public-key": { value: "K", summary: "the verifier key the checkpoints must be signed with (signed-note form)" },
      organization: { value: "ID", summary: "the live database: only this organization's log (default: every organization's)" },
      threads: {
        value: "N",
        summary:
          "the live database: check the entries on N threads as they are read, 0 to 64 (default: one per core, at most 8; none under 4096 entries)",
        range: [0, 64],
      },
      "data-dir": dataDirOption,
    },
    run: auditVerify,
  },
  backup: {
    masterKey: "none",
    summary: "copies the SQLite database while servers run to a new, checksummed file (PostgreSQL: prints the pg_dump commands)",
    description:
      "Copies the SQLite database while servers may be running and writing: the copy is the database as of one instant " +
      "(SQLite's VACUUM INTO, in one read transaction; the servers go on writing). It is written to a new file, readable by " +
      "its owner only, with a manifest and a SHA-256 checksum that `sigil restore` verifies, and prints " +
      '{"file","bytes","sha256","createdAt","masterKeyIds"}. An existing file is never overwritten. The master key is not ' +
      "in the backup: keep it apart (docs/backups.md). It only reads the database, and refuses, writing nothing, where there is none.",
    postgresNote:
      "With SIGIL_DATABASE_URL=postgres://… set, it writes nothing: it prints the pg_dump and pg_restore commands for that " +
      "database (without its password) and how to get point-in-time recovery, and exits with status 3.",
    options: {
      out: { value: "FILE", summary: "the backup file to write, which must not exist yet", required: true },
      "data-dir": { value: "D", summary: "directory of the SQLite database (sigil.db) to copy (default: SIGIL_DATA_DIR, else ./data)" },
    },
    run: backup,
  },
  restore: {
    masterKey: "none",
    summary: "restores a backup made by `sigil backup` into an empty data directory",
    description:
      "Checks the backup whole (its format, its length and its SHA-256 checksum) and writes its database as sigil.db into the " +
      'data directory, which must be empty or absent (it is made, mode 0700), then prints {"database","createdAt","masterKeyIds"}. ' +
      "A truncated or altered file, a non-empty directory or a backup of a newer Sigil's database is refused, writing " +
      "nothing. The master key is not in the backup: start `sigil serve` on the directory with the deployment's key " +
      "(master.key copied there, SIGIL_MASTER_KEY_FILE or SIGIL_MASTER_KEY); any other key is refused at start.",
    postgresNote:
      "It restores SQLite backups only: with SIGIL_DATABASE_URL set it refuses (PostgreSQL is restored with pg_restore; " +
      "`sigil backup` prints the commands).",
    options: {
      from: { value: "FILE", summary: "the backup file, as `sigil backup` wrote it", required: true },
      "data-dir": { value: "D", summary: "the data directory to restore into: empty, or absent", required: true },
    },
    run: restore,
  },
  "policy test": {
    masterKey: "none",
    summary: "decides test cases offline against a set of policies; exits 1 when a case fails (see docs/policy-testing.md)",
    description:
      "Runs the cases of CASES_FILE (JSON, comments allowed): each a would-be request (activity type and parameters), its acting " +
      "user and the outcome expected (ALLOW, DENY, NEEDS_CONSENSUS or NEEDS_ROOT_QUORUM), decided against the policies of " +
      '--policies, else of the cases file\'s own "policies", by the code a submit is decided with. It needs no server and no ' +
      "database: the organization the cases describe (users, tags, root quorum, wallets) lives in a temporary SQLite database " +
      "for the run. It prints one line per case with the policy that decided it, what each failure was, and the count, and " +
      "exits 0 when every case passes, 1 when one fails, 2 when a file cannot be used (its file:line:column is named, a " +
      "policy that does not compile at the character that does not).",
    argument: { value: "CASES_FILE", summary: "the test cases (docs/policy-testing.md describes the format)" },
    options: {
      policies: { value: "FILE", summary: 'the policies to test (a list, or {"policies": [...]}, as create_policy takes them)' },
    },
    run: policyTest,
  },
  "policy replay": {
    masterKey: "none",
    summary: "judges an organization's recorded activities on proposed policies and reports what would change",
    description:
      "Decides the newest --last activities of the organization again as they were submitted (their stored intents, their " +
      "requester, at the time they were recorded, with the policy context a submit builds), once on the organization's " +
      "policies as they stand and once on the policies of --policies, and prints every activity whose answer differs " +
      "(allowed to denied, denied to allowed, now needs consensus, …) with the proposed policy that decided it, then a " +
      "summary count. What cannot be rebuilt from the record (a wallet or key since deleted, a requester since removed) is " +
      "named with the activity. With --json it prints the report as one JSON object instead. " +
      readOnlyNote,
    options: {
      organization: { value: "ID", summary: "the organization whose activities are replayed", required: true },
      policies: { value: "FILE", summary: 'the proposed policies (a list, or {"policies": [...]})', required: true },
      last: { value: "N", summary: "the newest N activities, 1 to 1000000 (default 10000)", range: [1, 1_000_000] },
      json: { summary: "print the report as one JSON object" },
      "data-dir": dataDirOption,
    },
    run: policyReplay,
  },
};

// ---- the usage text ----------------------------------------------------------------------------

function usageLine(name: string): string {
  const argument = commands[name]!.argument;
  const parts = Object.entries(commands[name]!.options).map(([option, spec]) => {
    const placeholder = spec.choices ? [...(spec.range ? [spec.value] : []), ...spec.choices].join("|") : spec.value;
    const written = spec.value ? `--${option} ${placeholder}` : `--${option}`;
    return spec.required ? written : `[${written}]`;
  });
  return ["sigil", name, ...(argument ? [argument.value] : []), ...parts].join(" ");
}

function overallUsage(): string {
  const lines = ["usage:"];
  for (const [name, spec] of Object.entries(commands)) lines.push(`  ${usageLine(name)}`, `      ${spec.summary}`);
  lines.push(
    "  sigil help <command>, sigil <command> --help",
    "      describes one command",
    "  sigil -v, --version",
    "      prints the version",
    "",
    "SIGIL_DATABASE_URL=postgres://… keeps state in PostgreSQL instead of SQLite in the data directory.",
  );
  return lines.join("\n");
}

function commandHelp(name: string): string {
  const spec = commands[name]!;
  const options: [string, string][] = Object.entries(spec.options).map(([option, o]) => [
    `--${option}${o.value ? ` ${o.value}` : ""}`,
    o.choices && !o.range ? `${o.summary}: ${o.choices.join(", ")}` : o.summary,
  ]);
  options.push(["-h, --help", "print this help"]);
  if (spec.argument) options.unshift([spec.argument.value, spec.argument.summary]);
  const width = Math.max(...options.map(([left]) => left.length)) + 2;
  return [
    `usage: ${usageLine(name)}`,
    "",
    ...wrap(spec.description),
    ...(Object.hasOwn(spec.options, "data-dir") ? wrap(spec.postgresNote ?? databaseNote[spec.masterKey]) : []),
    "",
    "options:",
    ...options.map(([left, summary]) => `  ${left.padEnd(width)}${summary}`),
  ].join("\n");
}

/** Lines of at most 100 characters, broken between words. */
function wrap(paragraph: string): string[] {
  const lines: string[] = [];
  for (const word of paragraph.split(" ")) {
    const last = lines.length - 1;
    if (last >= 0 && lines[last]!.length + 1 + word.length <= 100) lines[last] += ` ${word}`;
    else lines.push(word);
  }
  return lines;
}

const shortUsage = (name: string) => `usage: ${usageLine(name)}\n(\`sigil ${name} --help\` describes it)`;

// ---- parsing -----------------------------------------------------------------------------------

/**
 * The one of `candidates` that a mistyped `word` most likely meant, if any is close: a unique start of
 * it (`rotate` for rotate-master-key), or within a few typing slips of it (`serv`, `sevre`, `--prot`),
 * counted as the restricted Damerau-Levenshtein distance (insertions, deletions, substitutions and
 * swaps of neighbours). A word nothing is close to gets no suggestion rather than a far-fetched one.
 */
function closest(word: string, candidates: readonly string[]): string | undefined {
  const typed = word.toLowerCase();
  const starts = candidates.filter((c) => typed.length >= 3 && c.startsWith(typed));
  if (starts.length === 1) return starts[0];
  let best: { candidate: string; distance: number } | undefined;
  for (const candidate of candidates) {
    const distance = slips(typed, candidate);
    // One slip in three letters at most (so `info` admits one, `bootstrap` three).
    if (distance <= Math.max(1, Math.floor(candidate.length / 3)) && (!best || distance < best.distance)) best = { candidate, distance };
  }
  return best?.candidate;
}

/** The restricted Damerau-Levenshtein (optimal string alignment) distance between a and b. */
function slips(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/** "; did you mean X?" when a candidate is close to what was typed, else nothing. */
function suggestion(word: string, candidates: readonly string[], prefix = ""): string {
  const near = closest(word, candidates);
  return near === undefined ? "" : `; did you mean ${prefix}${near}?`;
}

const unknownOption = (rawName: string, names: readonly string[]) =>
  // A short option (-x) is one letter: any other letter is as close as the next, so none is suggested.
  `unknown option ${rawName}${rawName.startsWith("--") ? suggestion(rawName.slice(2), names, "--") : ""}`;

/**
 * node's parseArgs splits the command line into tokens; the rules are applied here, so that each refusal
 * names the option and says what is wrong: no unknown option, no option twice, no argument besides
 * options, a value for each option that takes one (an option-like next word is not taken as the value:
 * `--org-name --user-name u` is a forgotten value), none for a switch, and numbers and choices checked.
 */
function parseCommandLine(name: string, args: string[]): Values | "help" {
  const spec = commands[name]!;
  const refuse = (message: string) => new UsageError(`sigil ${name}: ${message}`, shortUsage(name));
  const declared = Object.fromEntries(
    Object.entries(spec.options).map(([option, o]) => [option, { type: o.value ? "string" : "boolean" } as const]),
  );
  const { tokens } = parseArgs({
    args,
    options: { ...declared, help: { type: "boolean", short: "h" } },
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  const values: Values = {};
  let help = false;
  for (const token of tokens) {
    if (token.kind === "option-terminator") continue;
    if (token.kind === "positional") {
      if (spec.argument && values._ === undefined) {
        values._ = token.value;
        continue;
      }
      throw refuse(`unexpected argument "${token.value}" (every value follows its option)`);
    }
    if (token.name === "help") {
      if (token.value !== undefined) throw refuse(`${token.rawName} takes no value`);
      help = true;
      continue;
    }
    const option = Object.hasOwn(spec.options, token.name) ? spec.options[token.name]! : undefined;
    if (!option) throw refuse(unknownOption(token.rawName, [...Object.keys(spec.options), "help"]));
    if (token.name in values) throw refuse(`--${token.name} is given twice`);
    if (!option.value) {
      if (token.value !== undefined) throw refuse(`--${token.name} takes no value`);
      values[token.name] = true;
      continue;
    }
    const value = token.value;
    if (value === undefined || (!token.inlineValue && value.startsWith("-") && !/^-\d/.test(value))) {
      throw refuse(`--${token.name} needs a value (${option.value})`);
    }
    if (value === "") throw refuse(`--${token.name} must not be empty`);
    if (option.range && option.choices?.includes(value)) {
      values[token.name] = value;
    } else if (option.range) {
      const [min, max] = option.range;
      const number = /^\d{1,15}$/.test(value) ? Number(value) : NaN;
      if (!(number >= min && number <= max)) {
        const or = option.choices ? `, or ${option.choices.join(", ")}` : "";
        const near = option.choices ? suggestion(value, option.choices) : "";
        throw refuse(`--${token.name} must be a whole number from ${min} to ${max}${or}, got "${value}"${near}`);
      }
      values[token.name] = number;
    } else if (option.choices && !option.choices.includes(value)) {
      throw refuse(`--${token.name} must be one of ${option.choices.join(", ")}, got "${value}"${suggestion(value, option.choices)}`);
    } else {
      values[token.name] = value;
    }
  }
  if (help) return "help";
  if (spec.argument && values._ === undefined) throw refuse(`${spec.argument.value} is required`);
  const missing = Object.entries(spec.options)
    .filter(([option, o]) => o.required && values[option] === undefined)
    .map(([option]) => `--${option}`);
  if (missing.length > 0) throw refuse(`${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} required`);
  return values;
}

function version(): string {
  // dist/cli/main.js and src/cli/main.ts both sit two levels below package.json.
  return (JSON.parse(fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version;
}

/** `policy test …` is the command "policy test": a group's name and its command's name, read as one. */
function grouped(argv: string[]): string[] {
  const [first, second, ...rest] = argv;
  if (first !== undefined && second !== undefined && Object.hasOwn(commands, `${first} ${second}`)) return [`${first} ${second}`, ...rest];
  return argv;
}

async function dispatch(argv: string[]): Promise<void> {
  const [first, ...rest] = grouped(argv);
  const refuse = (message: string) => new UsageError(`sigil: ${message}`, overallUsage());
  if (first === undefined) throw refuse("no command given");
  const unknownCommand = (name: string) => `unknown command "${name}"${suggestion(name, Object.keys(commands))}`;
  if (first === "--help" || first === "-h" || first === "help") {
    if (rest.length === 0) return void process.stdout.write(overallUsage() + "\n");
    const [name, ...extra] = grouped(rest) as [string, ...string[]];
    if (first !== "help") throw refuse(`unexpected argument "${name}"`);
    if (!Object.hasOwn(commands, name)) throw refuse(unknownCommand(name));
    if (extra.length > 0) throw refuse(`unexpected argument "${extra[0]}"`);
    return void process.stdout.write(commandHelp(name) + "\n");
  }
  if (first === "--version" || first === "-v") {
    if (rest.length > 0) throw refuse(`unexpected argument "${rest[0]}"`);
    return void process.stdout.write(version() + "\n");
  }
  const group = Object.keys(commands).filter((name) => name.startsWith(`${first} `));
  if (group.length > 0 && !Object.hasOwn(commands, first)) {
    const named = rest[0] !== undefined && !rest[0].startsWith("-") ? `${first} ${rest[0]}` : first;
    throw refuse(`unknown command "${named}": the ${first} commands are ${group.map((g) => `"${g}"`).join(", ")}`);
  }
  if (!Object.hasOwn(commands, first))
    throw refuse(first.startsWith("-") ? unknownOption(first, ["help", "version"]) : unknownCommand(first));
  const values = parseCommandLine(first, rest);
  if (values === "help") return void process.stdout.write(commandHelp(first) + "\n");
  await commands[first]!.run(values);
}

export async function main(argv: string[]): Promise<void> {
  try {
    await dispatch(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${error.message}\n\n${error.usage}\n`);
    process.exitCode = 2;
  }
}

// ---- the commands ------------------------------------------------------------------------------

/** Opens the database the configuration names; where there is none, says so (with `advice`) having created nothing. */
async function openDatabase(config: Config, mode: OpenMode, advice: string): Promise<Store> {
  const { openStore, MissingDatabaseError } = await import("../store/database.js");
  try {
    return await openStore({ ...config, mode });
  } catch (error) {
    if (error instanceof MissingDatabaseError) throw new Error(`${error.message}: nothing was created. ${advice}`);
    throw error;
  }
}

const readOnlyAdvice =
  "Check --data-dir / SIGIL_DATA_DIR (SQLite) or SIGIL_DATABASE_URL; the database is made when `sigil serve` first starts.";

async function serve(values: Values) {
  const { loadConfig } = await import("../config.js");
  const config = loadConfig(process.env, {
    host: text(values, "host"),
    port: values.port as number | undefined,
    dataDir: text(values, "data-dir"),
    workers: values.workers as number | string | undefined,
  });
  if (config.workers > 1 && !config.databaseUrl) {
    // Measured in docs/running.md#sqlite: slower than one process, with stalls of seconds.
    throw new Error(
      `sigil serve: ${config.workers} workers need PostgreSQL (SIGIL_DATABASE_URL); nothing was started. On SQLite every write ` +
        "holds the one file's lock, so more processes add no write capacity: they lose the sharing of commits one process " +
        "does, and each waits for the others' writes with its event loop blocked. Run one process (--workers 1), or see docs/running.md#sqlite.",
    );
  }
  const { default: cluster } = await import("node:cluster");
  if (cluster.isWorker) {
    // A worker of `serve --workers N` (cluster runs this command line again): the primary prepared the deployment.
    const { runWorker } = await import("./cluster.js");
    return runWorker(async () => {
      const { createLogger, startServer } = await import("../http/server.js");
      const logger = createLogger(config).child({ worker: cluster.worker!.id, pid: process.pid });
      return { server: await startServer(config, logger, { prepared: true }), logger };
    });
  }
  const { createLogger, prepareDeployment, startServer } = await import("../http/server.js");
  if (config.workers === 1) {
    const server = await startServer(config);
    const stop = async (signal: string) => {
      server.app.log.info({ signal }, "shutting down");
      await server.close();
      process.exit(0);
    };
    process.once("SIGINT", () => void stop("SIGINT"));
    process.once("SIGTERM", () => void stop("SIGTERM"));
    return;
  }
  const { runPrimary } = await import("./cluster.js");
  const logger = createLogger(config).child({ role: "primary", pid: process.pid });
  const { location } = await prepareDeployment(config, logger);
  process.exitCode = await runPrimary(config, logger, location);
}

async function keygen(values: Values) {
  const { generateP256KeyPair } = await import("../crypto/keys.js");
  const pair = generateP256KeyPair();
  const out = text(values, "out");
  if (!out) return void process.stdout.write(JSON.stringify(pair) + "\n");
  const file = path.resolve(out);
  let fd: number;
  try {
    // "wx": never replace a file (it may hold a key pair still in use), nor follow a link planted there.
    fd = fs.openSync(file, "wx", 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST")
      throw new Error(`${file} already exists: keygen never overwrites a file; choose another name`);
    throw new Error(`cannot create ${file}: ${(error as Error).message}`);
  }
  try {
    fs.writeSync(fd, JSON.stringify(pair) + "\n");
    fs.fsyncSync(fd);
    fs.closeSync(fd);
  } catch (error) {
    fs.closeSync(fd);
    fs.rmSync(file, { force: true });
    throw error;
  }
  process.stdout.write(JSON.stringify({ publicKey: pair.publicKey, file }) + "\n");
}

/** The bootstrap option each of the new organization's values comes from. */
const BOOTSTRAP_OPTIONS = { apiPublicKey: "api-public-key", organizationName: "org-name", userName: "user-name" } as const;

async function bootstrap(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { createOrganization, newOrganizationProblem } = await import("../operations/organizations/organizations.js");
  const input = {
    organizationName: text(values, "org-name")!,
    userName: text(values, "user-name")!,
    userEmail: text(values, "user-email"),
    apiPublicKey: text(values, "api-public-key")!,
    apiKeyName: text(values, "api-key-name") ?? "bootstrap",
  };
  // A value the organization cannot take is a usage error, found before any database is opened or made.
  const wrong = newOrganizationProblem(input);
  if (wrong) throw new UsageError(`sigil bootstrap: --${BOOTSTRAP_OPTIONS[wrong.field]}: ${wrong.problem}`, shortUsage("bootstrap"));
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const store = await openDatabase(
    config,
    values.create ? "create" : "existing",
    "Point --data-dir / SIGIL_DATABASE_URL at the servers' database, or pass --create to make a new one there.",
  );
  try {
    const created = await createOrganization(store.db, input);
    if (store.created) process.stderr.write(`created a new Sigil database at ${store.location}\n`);
    process.stdout.write(JSON.stringify({ ...created, database: store.location }) + "\n");
  } finally {
    await store.close();
  }
}

/**
 * Re-seals every stored secret under a new master key, in one transaction, with every key at hand
 * opening them (the key file's, SIGIL_MASTER_KEY_PREVIOUS, and the data key the token wraps). The
 * new key is a file key (`--to file`) or a new data key wrapped by the token (`--to token`); by
 * default, of the kind the deployment has now. With the default key file the new key is generated
 * into master.key.next first, so a crash at any point leaves every secret readable (the keyring loads
 * master.key, master.key.next and master.key.previous-*), and running the command again finishes the
 * job. With SIGIL_MASTER_KEY the new key comes from --new-key-file.
 */
async function rotateMasterKey(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { resealAll } = await import("../services/sealed-secrets.js");
  const { Keyring, MASTER_KEY_BYTES } = await import("../crypto/envelope.js");
  const { loadKeyring, nextKeyFile, parseMasterKey, syncDirectory, writeKeyFile } = await import("../crypto/master-key.js");
  const { describeToken } = await import("../crypto/master-key.js");
  const { checkToken, newWrappedDataKey, readDataKeyRow, unwrapDataKey } = await import("../services/token-keyring.js");
  // A key file beside the token is what a move between the two needs.
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") }, { fileKeyBesideToken: true });
  const { token } = config.masterKey;
  const newKeyFile = text(values, "new-key-file");
  const fileKeyNamed = config.masterKey.key !== null || !config.masterKey.fileIsDefault;
  const refuse = (message: string) => new UsageError(`sigil rotate-master-key: ${message}`, shortUsage("rotate-master-key"));
  let to = text(values, "to") as "file" | "token" | undefined;
  if (!to) {
    if (token && fileKeyNamed)
      throw refuse(
        `both a token (SIGIL_PKCS11_MODULE) and a key ${config.masterKey.key ? "(SIGIL_MASTER_KEY)" : "file (SIGIL_MASTER_KEY_FILE)"} are set: ` +
          "say where the secrets move to, with --to token or --to file",
      );
    to = token ? "token" : "file";
  }
  if (to === "token" && !token)
    throw refuse(
      "--to token needs the token: set SIGIL_PKCS11_MODULE, SIGIL_PKCS11_TOKEN_LABEL, SIGIL_PKCS11_KEY_LABEL and SIGIL_PKCS11_PIN or SIGIL_PKCS11_PIN_FILE",
    );
  if (to === "token" && newKeyFile) throw refuse("--new-key-file is for --to file: the token's new data key is made by the rotation");
  if (to === "file" && config.masterKey.key && !newKeyFile) throw refuse("SIGIL_MASTER_KEY is set: give the new key with --new-key-file F");
  // The token first: a wrong PIN or label stops the rotation before the database is opened.
  if (token) checkToken(token);
  const keyFileExists = config.masterKey.key !== null || fs.existsSync(config.masterKey.file);
  // Loading the keyring would make a fresh default key file: a rotation starts from the existing one.
  if (!token && !keyFileExists) {
    throw new Error(`no master key at ${config.masterKey.file}: nothing to rotate (check --data-dir / SIGIL_MASTER_KEY_FILE)`);
  }
  const fileKeys = keyFileExists ? loadKeyring(config.masterKey).keyring : null;
  const store = await openDatabase(config, "existing", "Check --data-dir / SIGIL_DATA_DIR (SQLite) or SIGIL_DATABASE_URL.");
  const fileBased = to === "file" && !newKeyFile;
  let report;
  let from: InstanceType<typeof Keyring>;
  try {
    const row = token ? await readDataKeyRow(store.db) : undefined;
    const wrappedKeys = row ? new Keyring(unwrapDataKey(token!, row)) : null;
    // What the secrets move away from comes first: its key id is the report's `from`.
    const moving = to === "token" ? [fileKeys, wrappedKeys] : [wrappedKeys, fileKeys];
    const [first, second] = moving.filter((keyring) => keyring !== null);
    if (!first)
      throw new Error(
        `there is no master key to rotate from: the database has no data key wrapped by ${describeToken(token!)}, and there is no key file at ${config.masterKey.file}`,
      );
    from = second ? first.including(second) : first;
    let target: InstanceType<typeof Keyring>;
    let alsoInTransaction: Parameters<typeof resealAll>[3];
    if (to === "token") {
      const { dataKey, row: wrapped } = newWrappedDataKey(token!, Date.now());
      target = new Keyring(dataKey);
      dataKey.fill(0);
      alsoInTransaction = async (trx) => {
        await trx.deleteFrom("token_data_keys").execute();
        await trx.insertInto("token_data_keys").values(wrapped).execute();
      };
    } else {
      let newKey: Buffer;
      if (newKeyFile) {
        newKey = parseMasterKey(fs.readFileSync(newKeyFile, "utf8"), newKeyFile);
      } else {
        const next = nextKeyFile(config.masterKey.file);
        if (!fs.existsSync(next)) writeKeyFile(next, crypto.randomBytes(MASTER_KEY_BYTES));
        newKey = parseMasterKey(fs.readFileSync(next, "utf8"), next);
      }
      target = new Keyring(newKey);
      // The token wraps no data key once nothing is sealed under it.
      alsoInTransaction = async (trx) => void (await trx.deleteFrom("token_data_keys").execute());
    }
    // One rotation at a time: a second one would re-seal under yet another key mid-way. (A deployment
    // with no data directory, on PostgreSQL with the key in a token, has nowhere to put the lock.)
    const lock = `${config.masterKey.file}.rotating`;
    let lockFd: number | null = null;
    if (fs.existsSync(path.dirname(lock))) {
      try {
        lockFd = fs.openSync(lock, "wx", 0o600);
      } catch {
        throw new Error(`another rotation holds ${lock}; if none is running (a crash), remove the file and run again`);
      }
    }
    try {
      report = { ...(await resealAll(store.db, from, target, alsoInTransaction)), to: target.currentKeyId };
    } finally {
      if (lockFd !== null) {
        fs.closeSync(lockFd);
        fs.rmSync(lock, { force: true });
      }
    }
  } finally {
    await store.close();
  }
  if (fileBased) {
    // Link, then rename over: master.key exists at every instant, holding the old key or the new.
    const file = config.masterKey.file;
    const previous = `${file}.previous-${fileKeys?.currentKeyId}`;
    if (fileKeys && fs.existsSync(file) && !fs.existsSync(previous)) fs.linkSync(file, previous);
    fs.renameSync(nextKeyFile(file), file);
    syncDirectory(path.dirname(file));
  }
  process.stdout.write(
    JSON.stringify({ resealed: report.resealed, sealedBefore: report.before, from: from.currentKeyId, to: report.to, toKind: to }) + "\n",
  );
  const fileSettings = config.masterKey.key ? "SIGIL_MASTER_KEY" : "SIGIL_MASTER_KEY_FILE";
  const after =
    to === "token"
      ? `The secrets are sealed under data key ${report.to}, wrapped by ${describeToken(token!)}. ` +
        (fileKeyNamed
          ? `Unset ${fileSettings} and restart every server with the token settings (SIGIL_PKCS11_MODULE and the others).`
          : "Restart every server with the token settings (SIGIL_PKCS11_MODULE and the others).") +
        (keyFileExists && !config.masterKey.key ? ` The key file ${config.masterKey.file} opens nothing now.` : "")
      : fileBased
        ? `The new key is ${config.masterKey.file}${fileKeys ? `; the old one was kept as ${config.masterKey.file}.previous-${fileKeys.currentKeyId}` : ""}. ` +
          (token ? "Unset the token settings (SIGIL_PKCS11_MODULE and the others) and restart every server." : "Restart every server.")
        : token
          ? `Now unset the token settings (SIGIL_PKCS11_MODULE and the others), set SIGIL_MASTER_KEY_FILE (or SIGIL_MASTER_KEY) to the new key and restart every server.`
          : `Now set SIGIL_MASTER_KEY (or the key file) to the new key and keep the old one in SIGIL_MASTER_KEY_PREVIOUS until every server has restarted.`;
  process.stderr.write(after + "\n");
}

/** The deployment's public keys (made by the first `sigil serve`), as /.well-known/sigil.json shows them. */
async function info(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { BUNDLE_SIGNER, SESSION_SIGNER, TLS_FETCHER_ENCRYPT, TRANSPARENCY_LOG_SIGNING, WEBHOOK_SIGNING } = await import(
    "../services/service-keys.js"
  );
  const { selectSecp256k1 } = await import("../crypto/secp256k1.js");
  const { signatureLibraries } = await import("../crypto/sign.js");
  const { keyIdsInUse } = await import("../services/sealed-secrets.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  // The libraries `sigil serve` would sign with here, chosen as it chooses them.
  let signatures: Record<string, unknown>;
  try {
    const { fallbacks } = selectSecp256k1(config.secp256k1);
    signatures = { ...signatureLibraries(), ...(fallbacks.length > 0 ? { secp256k1NotLoaded: fallbacks } : {}) };
  } catch (error) {
    signatures = { secp256k1: `SIGIL_SECP256K1 is ${config.secp256k1}, but ${(error as Error).message}` };
  }
  const store = await openDatabase(config, "read-only", readOnlyAdvice);
  try {
    const keys = await store.reader.selectFrom("service_keys").select(["purpose", "public_key"]).execute();
    const of = (purpose: string) => keys.find((k) => k.purpose === purpose)?.public_key ?? null;
    if (!of(BUNDLE_SIGNER)) process.stderr.write("no service keys yet: they are made when `sigil serve` first starts\n");
    const databaseKeyIds = (await keyIdsInUse(store.reader)).sort();
    const line = {
      database: store.location,
      masterKey: await masterKeyAtHand(config, databaseKeyIds, store),
      databaseKeyIds,
      signerPublicKey: of(BUNDLE_SIGNER),
      webhookSigningPublicKey: of(WEBHOOK_SIGNING),
      sessionSigningPublicKey: of(SESSION_SIGNER),
      // What clients pass to encryptOauth2ClientSecret (create_oauth2_credential).
      tlsFetcherEncryptPublicKey: of(TLS_FETCHER_ENCRYPT),
      transparencyLogVerifierKey: await logVerifierKey(config, of(TRANSPARENCY_LOG_SIGNING)),
      signatures,
    };
    process.stdout.write(JSON.stringify(line) + "\n");
  } finally {
    await store.close();
  }
}

/** The transparency logs' verifier key (signed-note text form) as the servers publish it; null before the first start. */
async function logVerifierKey(config: Config, publicKeyHex: string | null): Promise<string | null> {
  if (!publicKeyHex) return null;
  const { defaultLogName, verifierKeyOf } = await import("../services/log-checkpoints.js");
  const publicKey = Buffer.from(publicKeyHex, "hex");
  return verifierKeyOf(config.transparencyLog.name ?? defaultLogName(publicKey), publicKey);
}

/**
 * The master key this configuration names, for `info`: where it is, its key id and whether it holds
 * every key the database's secrets are sealed under (as a server checks before it serves). It is read,
 * never made: where there is none (or it cannot be read) the answer is null and stderr says why, so an
 * operator sees which file the servers would use and whether it is the deployment's key.
 */
async function masterKeyAtHand(config: Config, databaseKeyIds: string[], store: Store) {
  const { loadKeyring } = await import("../crypto/master-key.js");
  if (config.masterKey.token) {
    const { describeToken } = await import("../crypto/master-key.js");
    const where = describeToken(config.masterKey.token);
    let keyring;
    try {
      ({ keyring } = await tokenKeyringAtHand(config, store));
    } catch (error) {
      process.stderr.write(`the master key in ${where} cannot be used: ${(error as Error).message}\n`);
      return null;
    }
    const opensDatabase = databaseKeyIds.every((id) => keyring.holds(id));
    if (!opensDatabase)
      process.stderr.write(
        `the data key ${keyring.currentKeyId} wrapped by ${where} does not open this database: a server given it would refuse to start\n`,
      );
    return { source: where, keyId: keyring.currentKeyId, opensDatabase };
  }
  const { file, key, fileIsDefault } = config.masterKey;
  const origin = !fileIsDefault
    ? "SIGIL_MASTER_KEY_FILE"
    : config.dataDirFrom === "default"
      ? "the default data directory ./data: no --data-dir, no SIGIL_DATA_DIR"
      : config.dataDirFrom;
  const where = key ? "SIGIL_MASTER_KEY" : `${file} (${origin})`;
  const needed = databaseKeyIds.length > 0 ? `the key the database's secrets are sealed under (${databaseKeyIds.join(", ")})` : "a key";
  // loadKeyring would make a default key file where there is none: info never makes one.
  if (!key && !fs.existsSync(file)) {
    process.stderr.write(`no master key at ${where}: info needs none, but the servers need ${needed}\n`);
    return null;
  }
  let keyring;
  try {
    ({ keyring } = loadKeyring(config.masterKey));
  } catch (error) {
    process.stderr.write(`the master key at ${where} cannot be read: ${(error as Error).message}\n`);
    return null;
  }
  const opensDatabase = databaseKeyIds.every((id) => keyring.holds(id));
  if (!opensDatabase)
    process.stderr.write(
      `the master key at ${where}, key id ${keyring.currentKeyId}, does not open this database: a server given it would refuse to start; it needs ${needed}\n`,
    );
  return { source: key ? "SIGIL_MASTER_KEY" : file, keyId: keyring.currentKeyId, opensDatabase };
}

/** The keyring of a deployment whose master key is in the token, for a command that reads: the token
 * checked, then the database's data key unwrapped; never made (the first `sigil serve` makes it). */
async function tokenKeyringAtHand(config: Config, store: Store) {
  const { checkToken, tokenKeyring } = await import("../services/token-keyring.js");
  checkToken(config.masterKey.token!);
  return tokenKeyring(store, config.masterKey, false);
}

/** Removes an IP allowlist outside the API: the way back for an organization whose lists refuse every
 * address its keys can reach the server from. */
async function removeIpAllowlistCommand(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { removeIpAllowlist } = await import("../operations/organizations/ip-allowlists.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const organizationId = text(values, "organization")!;
  const apiKeyId = text(values, "api-key") ?? "";
  const store = await openDatabase(config, "existing", readOnlyAdvice);
  try {
    await store.transact("exclusive", async (trx) => {
      const organization = await trx.selectFrom("organizations").select("id").where("id", "=", organizationId).executeTakeFirst();
      if (!organization) throw new Error(`no organization ${organizationId} in ${store.location}: nothing was changed`);
      if (!(await removeIpAllowlist(trx, organizationId, apiKeyId)))
        throw new Error(
          `${apiKeyId ? `API key ${apiKeyId} of organization ${organizationId}` : `organization ${organizationId}`} has no IP allowlist: nothing was changed`,
        );
    });
    process.stderr.write(
      `removed the IP allowlist of ${apiKeyId ? `API key ${apiKeyId} of ` : ""}organization ${organizationId} (${store.location})\n`,
    );
    process.stdout.write(JSON.stringify({ organizationId, apiKeyId: apiKeyId || null, removed: true }) + "\n");
  } finally {
    await store.close();
  }
}

/** The webhook delivery log, newest first, one JSON line per delivery (bodies are not printed). */
async function webhooks(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { renderDelivery } = await import("../operations/webhooks/webhooks.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const status = text(values, "status");
  const organization = text(values, "organization");
  const store = await openDatabase(config, "read-only", readOnlyAdvice);
  try {
    let query = store.reader.selectFrom("webhook_deliveries").selectAll();
    if (status) query = query.where("status", "=", status);
    if (organization)
      query = query.where((eb) => eb.or([eb("organization_id", "=", organization), eb("event_organization_id", "=", organization)]));
    const rows = await query
      .orderBy("created_at", "desc")
      .orderBy("id", "desc")
      .limit((values.limit as number | undefined) ?? 50)
      .execute();
    for (const row of rows) process.stdout.write(JSON.stringify(renderDelivery(row)) + "\n");
  } finally {
    await store.close();
  }
}

/** Emails and SMS kept in the local outbox (no SMTP relay / SMS endpoint configured) whose codes are
 * still valid, oldest first, one JSON line each: what the operator hands to the user. */
async function outbox(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { readOutbox } = await import("../services/message-courier.js");
  const { loadKeyring } = await import("../crypto/master-key.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const organization = text(values, "organization");
  const store = await openDatabase(config, "read-only", readOnlyAdvice);
  try {
    // Loading the keyring would make a fresh default key file, which opens nothing: the servers' key is needed.
    if (!config.masterKey.token && !config.masterKey.key && !fs.existsSync(config.masterKey.file)) {
      throw new Error(
        `no master key at ${config.masterKey.file}: the outbox is sealed under the servers' key (SIGIL_MASTER_KEY or SIGIL_MASTER_KEY_FILE)`,
      );
    }
    const { keyring } = config.masterKey.token ? await tokenKeyringAtHand(config, store) : loadKeyring(config.masterKey);
    const messages = await readOutbox(store, keyring, Date.now());
    for (const message of messages) {
      if (organization && message.organizationId !== organization) continue;
      process.stdout.write(JSON.stringify(message) + "\n");
    }
    if (messages.length === 0)
      process.stderr.write("the outbox is empty (messages go out through SIGIL_SMTP_URL / SIGIL_SMS_URL when set)\n");
  } finally {
    await store.close();
  }
}

/** A copy of the SQLite database taken while servers run; on PostgreSQL, the commands that do it there (exit 3). */
async function backup(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { postgresBackupAdvice, writeBackup } = await import("../services/backups.js");
  const { MissingDatabaseError } = await import("../store/database.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const out = text(values, "out")!;
  if (config.databaseUrl) {
    process.stdout.write(postgresBackupAdvice(config.databaseUrl, out) + "\n");
    process.stderr.write(
      "sigil backup: SIGIL_DATABASE_URL is set: nothing was written (exit status 3); back up with the pg_dump command printed on stdout\n",
    );
    process.exitCode = 3;
    return;
  }
  let written;
  try {
    written = await writeBackup({ dataDir: config.dataDir, out, sigilVersion: version() });
  } catch (error) {
    if (error instanceof MissingDatabaseError) throw new Error(`${error.message}: nothing was written. ${readOnlyAdvice}`);
    throw new Error(`sigil backup: ${(error as Error).message}; nothing was written`);
  }
  const { file, bytes, sha256, manifest } = written;
  process.stdout.write(JSON.stringify({ file, bytes, sha256, createdAt: manifest.createdAt, masterKeyIds: manifest.masterKeyIds }) + "\n");
}

/** Restores a backup of `sigil backup` into an empty data directory, having checked it whole. */
async function restore(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { restoreBackup } = await import("../services/backups.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  if (config.databaseUrl)
    throw new Error(
      "sigil restore: SIGIL_DATABASE_URL is set, and restore writes SQLite backups into a data directory: nothing was restored. " +
        "Unset it to restore an SQLite backup; a PostgreSQL database is restored with pg_restore (`sigil backup` prints the commands, docs/backups.md).",
    );
  let restored;
  try {
    restored = await restoreBackup({ from: text(values, "from")!, dataDir: config.dataDir });
  } catch (error) {
    throw new Error(`sigil restore: ${(error as Error).message}; nothing was restored`);
  }
  const { database, manifest } = restored;
  process.stdout.write(JSON.stringify({ database, createdAt: manifest.createdAt, masterKeyIds: manifest.masterKeyIds }) + "\n");
  const keys = manifest.masterKeyIds?.length
    ? `the master key it was sealed with (key id ${manifest.masterKeyIds.join(", ")})`
    : "the deployment's master key";
  process.stderr.write(
    `restored the database of ${manifest.createdAt} into ${database}. The master key is not in a backup: start \`sigil serve --data-dir ${path.dirname(database)}\` ` +
      `with ${keys}: copy its master.key into that directory, or name it with SIGIL_MASTER_KEY_FILE or SIGIL_MASTER_KEY\n`,
  );
}

// ---- sigil audit -------------------------------------------------------------------------------

/** The deployment's log verifier, as the servers publish it: from the stored key and SIGIL_LOG_NAME. */
async function deploymentLogVerifier(config: Config, store: Store) {
  const { TRANSPARENCY_LOG_SIGNING } = await import("../services/service-keys.js");
  const row = await store.reader
    .selectFrom("service_keys")
    .select("public_key")
    .where("purpose", "=", TRANSPARENCY_LOG_SIGNING)
    .executeTakeFirst();
  if (!row) throw new Error("no transparency log key yet: it is made when `sigil serve` first starts");
  return logVerifierKey(config, row.public_key) as Promise<string>;
}

/** Writes an organization's log as JSON lines, with a checkpoint of the whole log signed now. */
async function auditExport(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { loadKeyring } = await import("../crypto/master-key.js");
  const { logSigner, checkpointNow } = await import("../services/log-checkpoints.js");
  const { exportLog } = await import("../services/log-audit.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const organizationId = text(values, "organization")!;
  const out = text(values, "out");
  if (!config.masterKey.key && !fs.existsSync(config.masterKey.file))
    throw new Error(
      `no master key at ${config.masterKey.file}: the export signs a checkpoint with the servers' key (SIGIL_MASTER_KEY or SIGIL_MASTER_KEY_FILE)`,
    );
  const store = await openDatabase(config, "existing", readOnlyAdvice);
  let file: fs.WriteStream | undefined;
  try {
    const { keyring } = loadKeyring(config.masterKey);
    const signer = await logSigner(store, keyring, config.transparencyLog.name);
    if (!(await store.reader.selectFrom("organizations").select("id").where("id", "=", organizationId).executeTakeFirst()))
      throw new Error(`no organization ${organizationId} in ${store.location}: nothing was written`);
    await checkpointNow(store, signer, organizationId, Date.now());
    if (out) file = fs.createWriteStream(out, { flags: "wx", mode: 0o600 });
    const sink = file;
    const written = await exportLog(
      store.reader,
      organizationId,
      signer,
      (line) =>
        new Promise<void>((resolve, reject) => (sink ?? process.stdout).write(`${line}\n`, (error) => (error ? reject(error) : resolve()))),
    );
    process.stderr.write(
      `exported ${written.entries} entries and ${written.checkpoints} checkpoints of organization ${organizationId}'s log${out ? ` to ${out}` : ""}\n`,
    );
  } finally {
    await new Promise((resolve) => (file ? file.end(resolve) : resolve(undefined)));
    await store.close();
  }
}

/** Checks a log: an exported file offline, or the live database's logs. Exit 1 at the first broken entry. */
async function auditVerify(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { parseVerifierKey } = await import("../services/log-checkpoints.js");
  const { verifyExport, verifyStoredLog } = await import("../services/log-audit.js");
  const file = text(values, "file");
  const publicKey = text(values, "public-key");
  const report = (verification: { problem: unknown }) => {
    process.stdout.write(JSON.stringify({ ...verification, intact: verification.problem === null }) + "\n");
    if (verification.problem) process.exitCode = 1;
  };
  if (file) {
    if (!publicKey) throw new Error("sigil audit verify --file needs --public-key: the verifier key the checkpoints are signed with");
    if (text(values, "organization"))
      throw new Error("sigil audit verify --file checks the file's one log: --organization is for the live database");
    if (values.threads !== undefined)
      throw new Error("sigil audit verify --file reads the file on one thread: --threads is for the live database");
    const { createInterface } = await import("node:readline");
    const verifier = parseVerifierKey(publicKey);
    const input = fs.createReadStream(file);
    try {
      report(await verifyExport(createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY }), verifier));
    } finally {
      input.close();
    }
    return;
  }
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const store = await openDatabase(config, "read-only", readOnlyAdvice);
  try {
    const verifier = parseVerifierKey(publicKey ?? (await deploymentLogVerifier(config, store)));
    const organization = text(values, "organization");
    // Every organization: one whose log was never sequenced has final activities to account for too.
    const organizations = (
      await store.reader
        .selectFrom("organizations")
        .select("id")
        .$if(organization !== undefined, (q) => q.where("id", "=", organization!))
        .orderBy("id")
        .execute()
    ).map((r) => r.id);
    if (organization && organizations.length === 0) throw new Error(`no organization ${organization} in ${store.location}`);
    // Each log read on one snapshot, so that servers appending meanwhile do not make it look broken.
    const snapshot = <T>(work: (trx: Parameters<Parameters<Store["readSnapshot"]>[0]>[0]) => Promise<T>) =>
      store.dialect === "postgres" ? store.readSnapshot(work) : store.reader.transaction().execute(work);
    const threads = values.threads as number | undefined;
    for (const id of organizations)
      report(await snapshot((trx) => verifyStoredLog(trx, id, verifier, Date.now(), threads === undefined ? {} : { threads })));
  } finally {
    await store.close();
  }
}

/** `sigil policy test`: the cases decided, a table printed; exit 1 on a failed case, 2 on an unusable file. */
async function policyTest(values: Values) {
  const { runPolicyTests, renderResults } = await import("./policy-testing.js");
  const { PolicyFileError } = await import("./policy-files.js");
  try {
    const results = await runPolicyTests(text(values, "_")!, text(values, "policies"));
    process.stdout.write(renderResults(results) + "\n");
    if (results.some((r) => !r.passed)) process.exitCode = 1;
  } catch (error) {
    if (!(error instanceof PolicyFileError)) throw error;
    process.stderr.write(`sigil policy test: ${error.message}\n`);
    process.exitCode = 2;
  }
}

/** `sigil policy replay`: the organization's recorded activities judged on proposed policies. */
async function policyReplay(values: Values) {
  const { loadConfig } = await import("../config.js");
  const { readPolicies, SourceFile } = await import("./policy-files.js");
  const { replayActivities } = await import("../activities/policy-replay.js");
  const { renderReplay } = await import("./policy-testing.js");
  const config = loadConfig(process.env, { dataDir: text(values, "data-dir") });
  const organizationId = text(values, "organization")!;
  // The file first: a mistake in it is named before any database is opened.
  const proposed = readPolicies(SourceFile.read(text(values, "policies")!));
  const store = await openDatabase(config, "read-only", readOnlyAdvice);
  try {
    const organization = await store.reader.selectFrom("organizations").select("id").where("id", "=", organizationId).executeTakeFirst();
    if (!organization) throw new Error(`no organization ${organizationId} in ${store.location}`);
    const report = await replayActivities(
      store.reader,
      organizationId,
      { policies: proposed, names: new Map(proposed.map((p) => [p.id, p.name])) },
      (values.last as number | undefined) ?? 10_000,
      store.dialect === "postgres" ? 32 : 1,
    );
    process.stdout.write((values.json ? JSON.stringify(report) : renderReplay(report)) + "\n");
  } finally {
    await store.close();
  }
}
