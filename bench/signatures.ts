// Signatures: each secp256k1 implementation (libsecp256k1 native, its WASM build, @noble/curves),
// ed25519 by OpenSSL and by noble, and what a signature costs the event loop computed inline
// against handed to a signature thread (the postMessage round trip). Ratios within this one run.
import crypto from "node:crypto";
import { performance } from "node:perf_hooks";
import { ed25519 } from "@noble/curves/ed25519.js";
import { secp256k1 as secp256k1Noble } from "@noble/curves/secp256k1.js";
import { loadSecp256k1, SECP256K1_CHOICES, selectSecp256k1, type Secp256k1 } from "../src/crypto/secp256k1.js";
import { signEd25519 } from "../src/crypto/sign.js";
import { SignatureThreads } from "../src/crypto/signature-threads.js";
import { measure } from "./measure.js";

const privateKey = crypto.randomBytes(32);
const digest = crypto.randomBytes(32);
const message = crypto.randomBytes(200);

const loaded: Secp256k1[] = [];
for (const choice of SECP256K1_CHOICES) {
  try {
    loaded.push(loadSecp256k1(choice));
  } catch (error) {
    console.log(`${choice}: ${(error as Error).message}`);
  }
}
const signing = new Map<string, number>();
for (const lib of loaded) {
  signing.set(
    lib.name,
    measure(`secp256k1 sign, ${lib.name}`, lib.choice === "noble" ? 1000 : 5000, () => lib.sign(digest, privateKey)),
  );
}
const publicKey = loaded[0]!.publicKey(privateKey);
const der = secp256k1Noble.Signature.fromBytes(loaded[0]!.sign(digest, privateKey).signature, "compact").toBytes("der");
for (const lib of loaded) {
  measure(`secp256k1 verify (DER), ${lib.name}`, lib.choice === "noble" ? 500 : 3000, () => {
    if (!lib.verifyDer(der, digest, publicKey)) throw new Error("did not verify");
  });
}
const noble = signing.get("@noble/curves");
if (noble) for (const [name, ns] of signing) console.log(`  ${name}: ${(noble / ns).toFixed(1)}x @noble/curves' signing speed`);
const ed = measure("ed25519 sign, node:crypto (OpenSSL)", 3000, () => signEd25519(privateKey, message));
const edNoble = measure("ed25519 sign, @noble/curves", 1000, () => ed25519.sign(message, privateKey));
console.log(`  ed25519 by OpenSSL: ${(edNoble / ed).toFixed(1)}x noble's speed`);

/** Wall time and event-loop busy time per signature, `inFlight` signatures at a time. */
async function roundTrips(name: string, count: number, inFlight: number, sign: () => Promise<unknown>) {
  for (let i = 0; i < 200; i++) await sign(); // warm up (and start the threads)
  const before = performance.eventLoopUtilization();
  const start = process.hrtime.bigint();
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next++ < count) await sign();
    }),
  );
  const wallUs = Number(process.hrtime.bigint() - start) / 1000 / count;
  const busyUs = (performance.eventLoopUtilization(before).active * 1000) / count;
  console.log(`${name.padEnd(56)} ${wallUs.toFixed(1).padStart(8)} µs/op wall, ${busyUs.toFixed(1).padStart(6)} µs/op on the event loop`);
  return { wallUs, busyUs };
}

// Inline against a thread, for each libsecp256k1 build that loads (with noble a thread is a given:
// its ~0.6 ms would stall the event loop) and for ed25519 (OpenSSL).
const results: Record<string, { wallUs: number; busyUs: number }> = {};
for (const lib of loaded.filter((l) => l.choice !== "noble")) {
  selectSecp256k1(lib.choice);
  const forced = new SignatureThreads(1, { threadsForAll: true });
  const inline = new SignatureThreads(0);
  for (const inFlight of [1, 32]) {
    results[`${lib.choice} inline ${inFlight}`] = await roundTrips(
      `secp256k1 ${lib.choice} inline, ${inFlight} in flight`,
      3000,
      inFlight,
      () => inline.signDigest("CURVE_SECP256K1", privateKey, digest),
    );
    results[`${lib.choice} thread ${inFlight}`] = await roundTrips(
      `secp256k1 ${lib.choice} on a thread, ${inFlight} in flight`,
      3000,
      inFlight,
      () => forced.signDigest("CURVE_SECP256K1", privateKey, digest),
    );
  }
  await forced.close();
  const r = (key: string) => results[`${lib.choice} ${key}`]!;
  console.log(
    `  ${lib.name}, 32 in flight: a thread costs the event loop ${(r("thread 32").busyUs / r("inline 32").busyUs).toFixed(2)}x inline, ` +
      `and gives ${(r("inline 32").wallUs / r("thread 32").wallUs).toFixed(2)}x inline's throughput`,
  );
}
{
  const forced = new SignatureThreads(1, { threadsForAll: true });
  const inline = new SignatureThreads(0);
  for (const inFlight of [1, 32]) {
    results[`ed25519 inline ${inFlight}`] = await roundTrips(`ed25519 inline, ${inFlight} in flight`, 3000, inFlight, () =>
      inline.signEd25519(privateKey, message),
    );
    results[`ed25519 thread ${inFlight}`] = await roundTrips(`ed25519 on a thread, ${inFlight} in flight`, 3000, inFlight, () =>
      forced.signEd25519(privateKey, message),
    );
  }
  await forced.close();
  const r = (key: string) => results[`ed25519 ${key}`]!;
  console.log(
    `  ed25519, 32 in flight: a thread costs the event loop ${(r("thread 32").busyUs / r("inline 32").busyUs).toFixed(2)}x inline, ` +
      `and gives ${(r("inline 32").wallUs / r("thread 32").wallUs).toFixed(2)}x inline's throughput`,
  );
}
selectSecp256k1();
console.log("");
