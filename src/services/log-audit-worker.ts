// The body of a leaf-checking thread of `sigil audit verify` (log-audit.ts): takes a page of leaf rows,
// answers with what checkLeafPage makes of it, its hashes moved (not copied) back.
import { parentPort } from "node:worker_threads";
import { checkLeafPage, type LeafPageTask } from "./log-audit-leaves.js";

if (!parentPort) throw new Error("log-audit-worker.ts runs as a worker thread");
const port = parentPort;

port.on("message", (task: LeafPageTask) => {
  try {
    const page = checkLeafPage(task.rows, task.start, task.organizationId);
    port.postMessage({ id: task.id, page }, [page.leaves.buffer as ArrayBuffer, ...page.nodes.map((n) => n.buffer as ArrayBuffer)]);
  } catch (error) {
    port.postMessage({ id: task.id, error: error instanceof Error ? error.message : String(error) });
  }
});
