// Signatures computed on worker threads, unless computing them on the event loop costs less.
// Curve arithmetic is the largest cost of a signing request: on the event loop it stalls every other
// request for its duration; on its own thread it runs beside the event loop, which meanwhile verifies
// stamps, talks to the database and answers other requests. But the hand-over is not free: postMessage
// both ways, the copies and the promise cost the event loop some 30-85 µs a signature here, about what
// native libsecp256k1 takes to sign (~45 µs), and add that much latency. bench/signatures.ts measures
// both in one run, 32 signatures in flight; five runs on the shared 2-core machine: for native
// libsecp256k1 a thread cost the event loop 0.27-0.89x signing inline and gave 0.52-1.54x its
// throughput (below 1 in four runs of five), so secp256k1 ECDSA is signed inline when native
// libsecp256k1 is in use: the saving is a few tens of µs, paid for in latency and in CPU spent twice.
// Everything slower stays on threads, where the event loop's saving is large: libsecp256k1's WASM
// build (a thread: 0.18-0.23x the event loop's time), OpenSSL's ed25519 (0.26-0.73x: its key import
// costs as much as the signature), and the pure-JS @noble/curves signatures (P-256, BIP-340 Schnorr,
// secp256k1 ECDSA when libsecp256k1 does not load), ~0.5 ms or more each. With `threads: 0` all are
// computed inline.
import os from "node:os";
import type { Worker } from "node:worker_threads";
import { startModuleWorker } from "../store/module-worker.js";
import type { Curve } from "./hd.js";
import { secp256k1 } from "./secp256k1.js";
import { signDigest, signEd25519, signSchnorr, signTaprootKeyPath, type RawSignature } from "./sign.js";

/** One request to a signature thread. The key is a copy the thread wipes after use. */
export interface SignatureTask {
  id: number;
  curve: Curve;
  /** Set for a BIP-340 signature by the key itself or by its Taproot output key; absent, the curve's usual scheme. */
  scheme?: "BIP340" | "BIP340_TAPROOT_KEY_PATH";
  privateKey: Uint8Array;
  /** A 32-byte digest (secp256k1, P-256) or the message itself (ed25519). */
  message: Uint8Array;
}

export interface SignatureWorkerData {
  secp256k1: ReturnType<typeof secp256k1>["choice"];
}

/** `startedAt`: when the thread took the task up (wallClock()), to tell how long it waited. */
export type SignatureAnswer = { id: number; startedAt: number } & ({ signature: RawSignature } | { error: string });

interface Pending {
  resolve(signature: RawSignature): void;
  reject(error: Error): void;
  /** When the task was handed to the thread (wallClock()). */
  sentAt: number;
}

/** Milliseconds since the epoch, to a fraction of a microsecond, on the same clock in every thread of
 * the process (each thread's performance.now() counts from its own start). */
export const wallClock = () => performance.timeOrigin + performance.now();

/** The default: one thread per core beyond the one the event loop runs on, at least one, at most four. */
export function defaultSignatureThreads(): number {
  return Math.min(4, Math.max(1, os.availableParallelism() - 1));
}

/** A worker thread that signs, started on first use; its pending tasks fail if it dies. */
class SignatureThread {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;

  constructor(private readonly onWait?: (seconds: number) => void) {}

  get load(): number {
    return this.pending.size;
  }

  private start(): Worker {
    // The thread signs secp256k1 (when it does) with the library this process chose, however it chose.
    const workerData: SignatureWorkerData = { secp256k1: secp256k1().choice };
    const worker = startModuleWorker(import.meta.url, "signature-worker", workerData);
    worker.on("message", (answer: SignatureAnswer) => {
      const task = this.pending.get(answer.id);
      if (!task) return;
      this.pending.delete(answer.id);
      if (this.pending.size === 0) worker.unref();
      this.onWait?.(Math.max(0, answer.startedAt - task.sentAt) / 1000);
      if ("error" in answer) task.reject(new Error(`signature thread: ${answer.error}`));
      else task.resolve(answer.signature);
    });
    const fail = (error: Error) => {
      if (this.worker === worker) this.worker = null;
      for (const task of this.pending.values()) task.reject(new Error(`signature thread stopped: ${error.message}`));
      this.pending.clear();
    };
    worker.on("error", fail);
    worker.on("exit", (code) => fail(new Error(`exit code ${code}`)));
    worker.unref();
    return worker;
  }

  sign(curve: Curve, privateKey: Uint8Array, message: Uint8Array, scheme?: SignatureTask["scheme"]): Promise<RawSignature> {
    const worker = (this.worker ??= this.start());
    const id = ++this.nextId;
    return new Promise<RawSignature>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, sentAt: wallClock() });
      // An idle thread does not keep the process alive; one with work does, until it answers.
      worker.ref();
      // The copy crosses to the thread, which wipes it; the caller's key stays the caller's to drop.
      const task: SignatureTask = {
        id,
        curve,
        ...(scheme ? { scheme } : {}),
        privateKey: Uint8Array.from(privateKey),
        message: Uint8Array.from(message),
      };
      worker.postMessage(task, [task.privateKey.buffer as ArrayBuffer, task.message.buffer as ArrayBuffer]);
    });
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    if (worker) await worker.terminate();
  }
}

export interface SignatureThreadOptions {
  /** Sign on a thread even what is cheaper inline (native libsecp256k1): for the benchmark that
   * measures the difference. */
  threadsForAll?: boolean;
  /** Told, for each signature a thread computed, how long it waited for the thread (seconds): from
   * the hand-over to the moment the thread took it up (the metrics). */
  onWait?: (seconds: number) => void;
}

export class SignatureThreads {
  private readonly threads: SignatureThread[];
  private readonly threadsForAll: boolean;

  constructor(count: number = defaultSignatureThreads(), options: SignatureThreadOptions = {}) {
    this.threads = Array.from({ length: count }, () => new SignatureThread(options.onWait));
    this.threadsForAll = options.threadsForAll ?? false;
  }

  /** Signatures handed to the threads and not yet answered: the threads' queue. */
  get queued(): number {
    let queued = 0;
    for (const thread of this.threads) queued += thread.load;
    return queued;
  }

  /** The least busy thread, or none when signatures are computed inline. */
  private pick(): SignatureThread | undefined {
    let best: SignatureThread | undefined;
    for (const thread of this.threads) if (!best || thread.load < best.load) best = thread;
    return best;
  }

  /** A thread for work that is slow on the event loop; none for what costs it less inline (see the top). */
  private pickFor(fastInline: boolean): SignatureThread | undefined {
    return fastInline && !this.threadsForAll ? undefined : this.pick();
  }

  /** Signs a 32-byte digest with secp256k1 (low S) or P-256, with the recovery id. */
  async signDigest(curve: Exclude<Curve, "CURVE_ED25519">, privateKey: Uint8Array, digest: Uint8Array): Promise<RawSignature> {
    // Checked here, so the caller gets the same SigningError whether or not a thread signs.
    if (digest.length !== 32) return signDigest(curve, privateKey, digest);
    const thread = this.pickFor(curve === "CURVE_SECP256K1" && secp256k1().choice === "native");
    return thread ? thread.sign(curve, privateKey, digest) : signDigest(curve, privateKey, digest);
  }

  /** Signs a 32-byte sighash with BIP-340 Schnorr by the secp256k1 key's BIP-86 Taproot output key. */
  async signTaprootKeyPath(privateKey: Uint8Array, digest: Uint8Array): Promise<RawSignature> {
    if (digest.length !== 32) return signTaprootKeyPath(privateKey, digest);
    const thread = this.pick();
    return thread ? thread.sign("CURVE_SECP256K1", privateKey, digest, "BIP340_TAPROOT_KEY_PATH") : signTaprootKeyPath(privateKey, digest);
  }

  /** Signs a 32-byte digest with plain BIP-340 Schnorr by the secp256k1 key itself (Spark identity keys). */
  async signSchnorr(privateKey: Uint8Array, digest: Uint8Array): Promise<RawSignature> {
    if (digest.length !== 32) return signSchnorr(privateKey, digest);
    const thread = this.pick();
    return thread ? thread.sign("CURVE_SECP256K1", privateKey, digest, "BIP340") : signSchnorr(privateKey, digest);
  }

  /** Signs a message with ed25519. */
  async signEd25519(privateKey: Uint8Array, message: Uint8Array): Promise<RawSignature> {
    const thread = this.pick();
    return thread ? thread.sign("CURVE_ED25519", privateKey, message) : signEd25519(privateKey, message);
  }

  async close(): Promise<void> {
    await Promise.all(this.threads.map((thread) => thread.close()));
  }
}
