// A worker thread running a module that sits beside its caller — compiled JavaScript in a build,
// TypeScript source under the test runner — for the store's checkpoint thread and crypto's signature threads.
import { Worker } from "node:worker_threads";

/** Starts `name` (a module next to `callerUrl`, without extension) on a new thread, with `workerData`. */
export function startModuleWorker(callerUrl: string, name: string, workerData: unknown): Worker {
  // Under the test runner the caller is TypeScript source; the thread then loads the module through tsx.
  if (callerUrl.endsWith(".ts")) {
    const source = JSON.stringify(new URL(`./${name}.ts`, callerUrl).href);
    return new Worker(`import("tsx/esm/api").then((tsx) => { tsx.register(); return import(${source}); });`, { eval: true, workerData });
  }
  return new Worker(new URL(`./${name}.js`, callerUrl), { workerData });
}
