// sigil serve | keygen | bootstrap — thin: parse flags, call the library, print one result.
import { parseArgs } from "node:util";
import { loadConfig } from "../config.js";
import { startServer } from "../http/server.js";
import { openStore } from "../store/database.js";
import { generateP256KeyPair } from "../crypto/keys.js";
import { createOrganization } from "../operations/organizations.js";

const USAGE = `usage:
  sigil serve [--host H] [--port P] [--data-dir D]
  sigil keygen
  sigil bootstrap --org-name N --user-name U --api-public-key K [--user-email E] [--api-key-name X] [--data-dir D]

Set SIGIL_DATABASE_URL=postgres://… to keep state in PostgreSQL instead of SQLite.`;

async function serve(args: string[]) {
  const { values } = parseArgs({ args, options: { host: { type: "string" }, port: { type: "string" }, "data-dir": { type: "string" } } });
  const config = loadConfig(process.env, { host: values.host, port: values.port, dataDir: values["data-dir"] });
  const server = await startServer(config);
  const stop = async (signal: string) => {
    server.app.log.info({ signal }, "shutting down");
    await server.close();
    process.exit(0);
  };
  process.once("SIGINT", () => void stop("SIGINT"));
  process.once("SIGTERM", () => void stop("SIGTERM"));
}

async function bootstrap(args: string[]) {
  const { values } = parseArgs({
    args,
    options: {
      "data-dir": { type: "string" },
      "org-name": { type: "string" },
      "user-name": { type: "string" },
      "user-email": { type: "string" },
      "api-public-key": { type: "string" },
      "api-key-name": { type: "string" },
    },
  });
  for (const required of ["org-name", "user-name", "api-public-key"] as const) {
    if (!values[required]) throw new Error(`bootstrap needs --${required}\n\n${USAGE}`);
  }
  const config = loadConfig(process.env, { dataDir: values["data-dir"] });
  const store = await openStore(config);
  try {
    const created = await createOrganization(store.db, {
      organizationName: values["org-name"]!,
      userName: values["user-name"]!,
      userEmail: values["user-email"],
      apiPublicKey: values["api-public-key"]!,
      apiKeyName: values["api-key-name"] ?? "bootstrap",
    });
    process.stdout.write(JSON.stringify(created) + "\n");
  } finally {
    await store.close();
  }
}

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case "serve":
      return serve(rest);
    case "keygen":
      process.stdout.write(JSON.stringify(generateP256KeyPair()) + "\n");
      return;
    case "bootstrap":
      return bootstrap(rest);
    case undefined:
    case "help":
    case "--help":
      process.stdout.write(USAGE + "\n");
      return;
    default:
      throw new Error(`unknown command "${command}"\n\n${USAGE}`);
  }
}
