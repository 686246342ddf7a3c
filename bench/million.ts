// million: an app's end users at scale (docs/benchmarks.md#a-million-end-users). Two servers, each on a
// database of its own, each with one parent organization (bootstrapped by the caller) that signs up one
// end user through the API — the template — which bench/sub-organizations.ts copies straight into the
// store: to 1,000 sub-organizations on the small side, to BENCH_SUB_ORGANIZATIONS (1,000,000) on the
// large (through 1,000, where its bytes are read once). Then, through @turnkey/sdk-server, one request
// at a time, the two sides in turn: a sign-up, the end user's sign_raw_payload, whoami and get_wallets
// in its own sub-organization, list_suborgs a page deep in the parent's list (after a cursor halfway),
// list_suborgs filtered by an end user's email, and an OTP login (init_otp to an end user's email, the
// code read from the local outbox, verify_otp, otp_login; the time is the three requests'), once each
// fill's writes are on disk (settle). Then the large database's bytes per sub-organization (after
// VACUUM or a WAL checkpoint), by table and index, and the time a restarted server takes to answer
// /ready with 200 on it.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { sql } from "kysely";
import { Turnkey } from "@turnkey/sdk-server";
import { ApiKeyStamper, SignatureFormat } from "@turnkey/api-key-stamper";
import { encryptOtpCodeToBundle, generateP256KeyPair as clientKeyPair } from "@turnkey/crypto";
import { getClientSignatureMessageForLogin } from "@turnkey/core/dist/utils.js";
import { loadConfig } from "../src/config.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { generateP256KeyPair } from "../src/crypto/keys.js";
import { openStore, SQLITE_FILE_NAME, type Store } from "../src/store/database.js";
import { fillerEmail, insertSubOrganizations, readSignUpTemplate, signUpParameters } from "./sub-organizations.js";

/** BENCH_SUB_ORGANIZATIONS=1000000 (the default): the large size, against 1,000. */
export const SUB_ORGANIZATIONS = Number(process.env.BENCH_SUB_ORGANIZATIONS ?? 1_000_000);
const SMALL = 1_000;
/** Requests of each operation at each size (the OTP login's three requests: a fifth of these). */
const ITERATIONS = Number(process.env.BENCH_MILLION_ITERATIONS ?? 100);

/** What the server needs for this scenario: OTP emails kept in the local outbox (no SMTP relay), the
 * OTP budgets of one parent sending many codes out of reach. */
export const MILLION_ENV = {
  SIGIL_EMAIL_ALLOWED_DOMAINS: "example.com",
  SIGIL_OTP_PER_ORGANIZATION_LIMIT: "1000000",
  SIGIL_OTP_PER_CREDENTIAL_LIMIT: "1000000",
};

const round = (n: number, places = 2) => Math.round(n * 10 ** places) / 10 ** places;
const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1]!;
};

interface Parent {
  organizationId: string;
  key: { publicKey: string; privateKey: string };
}

type Sdk = ReturnType<Turnkey["apiClient"]>;
const sdkFor = (url: string, organizationId: string, key: Parent["key"]): Sdk =>
  new Turnkey({
    apiBaseUrl: url,
    apiPublicKey: key.publicKey,
    apiPrivateKey: key.privateKey,
    defaultOrganizationId: organizationId,
  }).apiClient();

let signUps = 0;
const signUp = (parent: Sdk, email: string, publicKey: string) =>
  parent.createSubOrganization(signUpParameters(`bench sign-up ${signUps++}`, email, publicKey));

/** Checkpoints the database (PostgreSQL's CHECKPOINT; SQLite's write-ahead log copied into the file
 * and emptied) and has the operating system write out every dirty page (sync). */
async function settle(store: Store): Promise<void> {
  if (store.dialect === "postgres") await sql`checkpoint`.execute(store.db);
  else await sql`pragma wal_checkpoint(TRUNCATE)`.execute(store.db);
  spawnSync("sync");
}

/** The database's bytes, in all and by table (its rows and its indexes), after VACUUM (PostgreSQL) or a
 * checkpoint that empties the write-ahead log (SQLite). */
async function sizes(store: Store, dataDir: string) {
  const byTable: Record<string, { tableBytes: number; indexBytes: number }> = {};
  let total: number;
  if (store.dialect === "postgres") {
    await sql`vacuum`.execute(store.db);
    const { rows } = await sql<{ name: string; table_bytes: string; index_bytes: string }>`
      select relname as name, pg_table_size(oid) as table_bytes, pg_indexes_size(oid) as index_bytes
      from pg_class where relkind = 'r' and relnamespace = 'public'::regnamespace`.execute(store.db);
    for (const r of rows) byTable[r.name] = { tableBytes: Number(r.table_bytes), indexBytes: Number(r.index_bytes) };
    const { rows: db } = await sql<{ bytes: string }>`select pg_database_size(current_database()) as bytes`.execute(store.db);
    total = Number(db[0]!.bytes);
  } else {
    await sql`pragma wal_checkpoint(TRUNCATE)`.execute(store.db);
    const file = path.join(dataDir, SQLITE_FILE_NAME);
    total = fs.statSync(file).size + (fs.existsSync(`${file}-wal`) ? fs.statSync(`${file}-wal`).size : 0);
    try {
      const { rows } = await sql<{ name: string; tbl_name: string; type: string; bytes: number }>`
        select s.name, m.tbl_name, m.type, sum(s.pgsize) as bytes from dbstat s
        left join sqlite_schema m on m.name = s.name group by s.name`.execute(store.db);
      for (const r of rows) {
        const entry = (byTable[r.tbl_name ?? r.name] ??= { tableBytes: 0, indexBytes: 0 });
        if (r.type === "index") entry.indexBytes += Number(r.bytes);
        else entry.tableBytes += Number(r.bytes);
      }
    } catch {
      // SQLite built without the dbstat table: the total only.
    }
  }
  return { totalBytes: total, byTable };
}

/** A server and its database, with the parent organization whose end users are measured. */
export interface MillionSide {
  url: string;
  parent: Parent;
  env: NodeJS.ProcessEnv;
  dataDir: string;
}

export interface MillionOptions {
  /** The server whose database grows to SUB_ORGANIZATIONS. */
  large: MillionSide;
  /** Another server on a database of its own, with 1,000 sub-organizations, measured beside the large. */
  small: MillionSide;
  /** Stops the large side's server, starts it again on the same database, and resolves with its new
   * URL and the milliseconds from the start until /ready answered 200. */
  restart: () => Promise<{ url: string; readyMs: number }>;
}

/** One timed request: resolves with its own milliseconds when only part of it counts (the OTP login). */
type Timed = (i: number) => Promise<number | undefined>;

/**
 * The median milliseconds of `small` and of `large`, `times` requests each, sent in turn (which side
 * goes first alternates), after a tenth as many (at least five) of each not counted. In turn, so that
 * whatever the machine does meanwhile falls on both sides alike: the ratio is the sizes', not the
 * minute's (one after the other, the same request's p50 moved by ±25 % between runs on this machine).
 */
async function timedBeside(times: number, small: Timed, large: Timed): Promise<{ small: number; large: number }> {
  for (let i = 0; i < Math.max(5, times / 10); i++) {
    await small(-1 - i);
    await large(-1 - i);
  }
  const ms = { small: [] as number[], large: [] as number[] };
  const once = async (request: Timed, into: number[], i: number) => {
    const start = performance.now();
    const own = await request(i);
    into.push(own ?? performance.now() - start);
  };
  for (let i = 0; i < times; i++) {
    if (i % 2 === 0) {
      await once(small, ms.small, i);
      await once(large, ms.large, i);
    } else {
      await once(large, ms.large, i);
      await once(small, ms.small, i);
    }
  }
  return { small: round(median(ms.small), 3), large: round(median(ms.large), 3) };
}

/** A side opened for the scenario: its store (for the fill and the outbox), its parent's client, and
 * one end user signed up through the API, whose sign-up is the template of the copies. */
async function openSide(side: MillionSide) {
  const config = loadConfig(side.env, { dataDir: side.dataDir });
  const { keyring } = loadKeyring(config.masterKey);
  const store = await openStore(config);
  try {
    return await sideOn(store, keyring, side);
  } catch (error) {
    await store.close().catch(() => undefined);
    throw error;
  }
}

/** openSide's work once its store is open. */
async function sideOn(store: Store, keyring: ReturnType<typeof loadKeyring>["keyring"], { url, parent, dataDir }: MillionSide) {
  const parentSdk = sdkFor(url, parent.organizationId, parent.key);
  await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
  const endUserKey = generateP256KeyPair();
  const made = await signUp(parentSdk, "bench.end.user@example.com", endUserKey.publicKey);
  const endUser = sdkFor(url, made.subOrganizationId, endUserKey);
  const signWith = made.wallet!.addresses[0]!;
  const template = await readSignUpTemplate(store.db, keyring, parent.organizationId, made.subOrganizationId);
  const signerPublicKey = ((await (await fetch(`${url}/.well-known/sigil.json`)).json()) as { signerPublicKey: string }).signerPublicKey;
  let payloads = 0;
  let otpUser = 0;

  /** The code init_otp queued for `email` in the local outbox, opened as the courier would. */
  const codeFor = async (email: string) => {
    const row = await store.db
      .selectFrom("outbound_messages")
      .select(["id", "organization_id", "sealed_message"])
      .where("recipient", "=", email)
      .orderBy("created_at", "desc")
      .executeTakeFirstOrThrow();
    const content = keyring
      .open(row.sealed_message!, { organizationId: row.organization_id, kind: "outbound_message", resourceId: row.id })
      .toString("utf8");
    return /verification code is ([0-9A-Z]{6,9})/.exec(content)![1]!;
  };

  /** The operations measured, against a parent of `size` sub-organizations. */
  const operations = async (size: number): Promise<Record<string, { times: number; request: Timed }>> => {
    // A cursor halfway through the parent's list, read once (not timed).
    const middle = await store.db
      .selectFrom("organizations")
      .select("id")
      .where("parent_organization_id", "=", parent.organizationId)
      .orderBy("created_at")
      .orderBy("id")
      .limit(1)
      .offset(Math.floor(size / 2))
      .executeTakeFirstOrThrow();
    return {
      create_sub_organization: {
        times: Math.ceil(ITERATIONS / 2),
        request: async () => {
          await signUp(parentSdk, `bench.${size}.${signUps}@example.com`, generateP256KeyPair().publicKey);
          return undefined;
        },
      },
      sign_raw_payload: {
        times: ITERATIONS,
        request: async () => {
          await endUser.signRawPayload({
            signWith,
            payload: Buffer.from(`million ${payloads++}`).toString("hex"),
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_KECCAK256",
          });
          return undefined;
        },
      },
      whoami: { times: ITERATIONS, request: async () => void (await endUser.getWhoami({})) },
      get_wallets: { times: ITERATIONS, request: async () => void (await endUser.getWallets({})) },
      list_suborgs_page: {
        times: ITERATIONS,
        request: async () => void (await parentSdk.getSubOrgIds({ paginationOptions: { limit: "10", after: middle.id } })),
      },
      list_suborgs_by_email: {
        times: ITERATIONS,
        request: async (i) => {
          const found = await parentSdk.getSubOrgIds({ filterType: "EMAIL", filterValue: fillerEmail(Math.abs(i * 7919) % size) });
          if (found.organizationIds.length !== 1) throw new Error("list_suborgs by email found no single sub-organization");
          return undefined;
        },
      },
      otp_login: {
        times: Math.ceil(ITERATIONS / 5),
        request: async () => {
          // A different end user each time (the per-contact budget), among the copies.
          const email = fillerEmail((otpUser++ * 104729) % size);
          const sessionKey = clientKeyPair();
          let start = performance.now();
          const { otpId, otpEncryptionTargetBundle } = await parentSdk.initOtp({
            otpType: "OTP_TYPE_EMAIL",
            contact: email,
            appName: "Bench",
          });
          let spent = performance.now() - start;
          const code = await codeFor(email);
          const encryptedOtpBundle = await encryptOtpCodeToBundle(code, otpEncryptionTargetBundle, sessionKey.publicKey, signerPublicKey);
          start = performance.now();
          const { verificationToken } = await parentSdk.verifyOtp({ otpId, encryptedOtpBundle });
          spent += performance.now() - start;
          const login = getClientSignatureMessageForLogin({ verificationToken });
          const signature = await new ApiKeyStamper({ apiPublicKey: sessionKey.publicKey, apiPrivateKey: sessionKey.privateKey }).sign(
            login.message,
            SignatureFormat.Raw,
          );
          const organizationId = (await parentSdk.getSubOrgIds({ filterType: "EMAIL", filterValue: email })).organizationIds[0]!;
          start = performance.now();
          await parentSdk.otpLogin({
            organizationId,
            verificationToken,
            publicKey: sessionKey.publicKey,
            clientSignature: { message: login.message, publicKey: login.publicKey, scheme: "CLIENT_SIGNATURE_SCHEME_API_P256", signature },
          });
          return spent + performance.now() - start;
        },
      },
    };
  };

  /** Copies the template until the parent has `target` sub-organizations (it has `existing`). */
  const fill = async (target: number, existing: number) => {
    const start = performance.now();
    await insertSubOrganizations(store.db, keyring, template, target, existing);
    const seconds = (performance.now() - start) / 1000;
    // Each copy's activity is final: the server's sequencer appends them to the parent's log after
    // their commit (services/log-sequencer.ts), meanwhile and after. Measured once it has caught up,
    // as a server in steady state runs (and how long that took is a figure of its own).
    const appending = performance.now();
    while ((await sql<{ left: boolean }>`select exists (select 1 from transparency_log_pending) as "left"`.execute(store.db)).rows[0]!.left)
      await new Promise((resolve) => setTimeout(resolve, 500));
    const logSeconds = (performance.now() - appending) / 1000;
    // What autovacuum's ANALYZE does on PostgreSQL after a bulk load: statistics for the planner.
    if (store.dialect === "postgres") await sql`analyze`.execute(store.db);
    // And what the load left the disk to write, written before anything is timed: a server in steady
    // state, not one whose disk is still taking a bulk load's gigabytes (on SQLite each request waits
    // for its commit's flush, which the writeback of a checkpoint into an 8 GB file delays).
    await settle(store);
    return {
      subOrganizations: target - existing,
      seconds: round(seconds, 1),
      perSecond: Math.round((target - existing) / seconds),
      logCaughtUpSeconds: round(logSeconds, 1),
    };
  };

  const counted = async () =>
    Number(
      (
        await store.db
          .selectFrom("organizations")
          .select((eb) => eb.fn.countAll<number>().as("n"))
          .where("parent_organization_id", "=", parent.organizationId)
          .executeTakeFirstOrThrow()
      ).n,
    );

  return { operations, fill, counted, sizes: () => sizes(store, dataDir), close: () => store.close() };
}

export async function millionEndUsers({ large, small, restart }: MillionOptions) {
  const big = await openSide(large);
  let little: Awaited<ReturnType<typeof openSide>> | undefined;
  try {
    little = await openSide(small);
    // The large side passes through 1,000 too: what one more sub-organization costs is measured on one
    // database, between its two sizes.
    await big.fill(SMALL, 0);
    const smallSize = await big.sizes();
    const smallCount = await big.counted();
    const filled = await big.fill(SUB_ORGANIZATIONS, SMALL);
    await little.fill(SMALL, 0);
    const [smallOperations, largeOperations] = [await little.operations(SMALL), await big.operations(SUB_ORGANIZATIONS)];
    const p50Small: Record<string, number> = {};
    const p50Large: Record<string, number> = {};
    for (const [op, { times, request }] of Object.entries(smallOperations)) {
      const both = await timedBeside(times, request, largeOperations[op]!.request);
      p50Small[op] = both.small;
      p50Large[op] = both.large;
    }
    const largeSize = await big.sizes();
    const count = await big.counted();
    await big.close();
    const restarted = await restart();
    const byTable = Object.entries(largeSize.byTable)
      .map(([table, s]) => ({
        table,
        bytesPerSubOrganization: round((s.tableBytes + s.indexBytes) / count, 0),
        tableBytesPerSubOrganization: round(s.tableBytes / count, 0),
        indexBytesPerSubOrganization: round(s.indexBytes / count, 0),
      }))
      .filter((t) => t.bytesPerSubOrganization >= 1)
      .sort((a, b) => b.bytesPerSubOrganization - a.bytesPerSubOrganization);
    return {
      subOrganizations: { small: SMALL, large: SUB_ORGANIZATIONS, counted: count },
      fill: filled,
      p50Ms: { [`at${SMALL}`]: p50Small, [`at${SUB_ORGANIZATIONS}`]: p50Large },
      p50RatioLargeToSmall: Object.fromEntries(Object.keys(p50Small).map((op) => [op, round(p50Large[op]! / p50Small[op]!)])),
      storage: {
        totalBytes: largeSize.totalBytes,
        bytesPerSubOrganization: round(largeSize.totalBytes / count, 0),
        // What one more sub-organization costs, between the two sizes (the fixed part left out).
        marginalBytesPerSubOrganization: round((largeSize.totalBytes - smallSize.totalBytes) / (count - smallCount), 0),
        byTable,
      },
      restartToReadyMs: restarted.readyMs,
    };
  } finally {
    await big.close().catch(() => undefined);
    await little?.close().catch(() => undefined);
  }
}
