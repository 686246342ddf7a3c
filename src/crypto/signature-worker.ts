// The body of a signature thread (see signature-threads.ts): takes a key and what to sign, answers
// with the signature, and wipes its copy of the key. It knows nothing of organizations or storage.
import { parentPort, workerData } from "node:worker_threads";
import { selectSecp256k1 } from "./secp256k1.js";
import { signDigest, signEd25519, signSchnorr, signTaprootKeyPath } from "./sign.js";
import { wallClock, type SignatureTask, type SignatureAnswer, type SignatureWorkerData } from "./signature-threads.js";

if (!parentPort) throw new Error("signature-worker.ts runs as a worker thread");
const port = parentPort;
selectSecp256k1((workerData as SignatureWorkerData).secp256k1);

port.on("message", (task: SignatureTask) => {
  const startedAt = wallClock();
  let answer: SignatureAnswer;
  try {
    const signature =
      task.curve === "CURVE_ED25519"
        ? signEd25519(task.privateKey, task.message)
        : task.scheme === "BIP340_TAPROOT_KEY_PATH"
          ? signTaprootKeyPath(task.privateKey, task.message)
          : task.scheme === "BIP340"
            ? signSchnorr(task.privateKey, task.message)
            : signDigest(task.curve, task.privateKey, task.message);
    answer = { id: task.id, startedAt, signature };
  } catch (error) {
    answer = { id: task.id, startedAt, error: error instanceof Error ? error.message : String(error) };
  } finally {
    task.privateKey.fill(0);
  }
  port.postMessage(answer);
});
