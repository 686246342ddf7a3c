// npm run bench: every benchmark, each reporting ratios measured in the same run.
const { stampVerification } = await import("./stamps.js");
const { policySetEvaluation } = await import("./policies.js");
console.log(
  `\nevaluating a typical policy set costs ${((policySetEvaluation / stampVerification) * 100).toFixed(1)}% of verifying one request's stamp`,
);
// The HTTP load run against a started server, on SQLite and (if a PostgreSQL URL is set) PostgreSQL.
const { runLoad } = await import("./load.js");
await runLoad();
// Signatures: each secp256k1 library, ed25519, and a signature inline against on a signature thread.
await import("./signatures.js");
// sigil policy replay on 10,000 recorded activities (docs/benchmarks.md#policy-replay).
const { runReplayBench } = await import("./replay.js");
await runReplayBench();
// The web console opening a wallet of 100,000 accounts, next to one of 1,000 (docs/benchmarks.md#web-console).
const { runConsoleBench } = await import("./console.js");
await runConsoleBench();
