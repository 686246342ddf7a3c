// A noisy neighbour: one organization (the attacker) loops create_wallet_accounts with 100 accounts —
// an activity that holds its organization's lock exclusively for as long as it derives them — while
// it also signs in its own organization; another organization (the victim) signs meanwhile. An
// organization's lock may delay only that organization's activities, so the victim's latency and
// throughput with the attacker should stay near what they are without it (on one machine's shared
// cores the attacker's CPU still costs something). Reported as ratios measured in the same run: the
// victim's p50, p99 and requests per second with the attacker over without, alternating the two.
import { type Client, load, type RunResult, type Scenario, signRawPayloadParameters } from "./generator.js";

export interface NeighbourSetup {
  victim: { client: Client; signWith: string };
  attacker: { client: Client; walletId: string; signWith: string };
  seconds: number;
  runs: number;
  /** How many requests to stamp ahead for a victim's run. */
  ahead: number;
}

/** Accounts per create_wallet_accounts, concurrent account loops and concurrent signers of the attacker, victim's concurrency. */
const ACCOUNTS_PER_ACTIVITY = 100;
const ATTACKER_ACCOUNT_LOOPS = 2;
const ATTACKER_SIGNERS = 8;
const VICTIM_CONCURRENCY = 4;

let nextAccount = 1;

/** The attacker's two loops, until `stop` says so: what it completed, and the first error if any. */
function attack(setup: NeighbourSetup, stopped: () => boolean) {
  const { client, walletId, signWith } = setup.attacker;
  const counts = { accountActivities: 0, signatures: 0, seconds: 0 };
  const started = Date.now();
  const accountLoop = async () => {
    while (!stopped()) {
      const first = nextAccount;
      nextAccount += ACCOUNTS_PER_ACTIVITY;
      await client.submit("create_wallet_accounts", "ACTIVITY_TYPE_CREATE_WALLET_ACCOUNTS", () => ({
        walletId,
        accounts: Array.from({ length: ACCOUNTS_PER_ACTIVITY }, (_, i) => ({
          curve: "CURVE_SECP256K1",
          pathFormat: "PATH_FORMAT_BIP32",
          path: `m/44'/60'/0'/0/${first + i}`,
          addressFormat: "ADDRESS_FORMAT_ETHEREUM",
        })),
      }));
      counts.accountActivities++;
    }
  };
  const signLoop = async () => {
    while (!stopped()) {
      await client.submit("sign_raw_payload", "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", (n) => signRawPayloadParameters(signWith, n));
      counts.signatures++;
    }
  };
  const done = Promise.all([
    ...Array.from({ length: ATTACKER_ACCOUNT_LOOPS }, accountLoop),
    ...Array.from({ length: ATTACKER_SIGNERS }, signLoop),
  ]).then(() => void (counts.seconds = (Date.now() - started) / 1000));
  return { counts, done };
}

const round = (n: number) => Math.round(n * 100) / 100;
const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return round(sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2);
};

/** The victim's signing alone and beside the attacker, alternating, `runs` times each. */
export async function noisyNeighbour(setup: NeighbourSetup) {
  const { client, signWith } = setup.victim;
  const victim: Scenario = {
    fresh: true,
    make: () => client.submitBody("sign_raw_payload", "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", (n) => signRawPayloadParameters(signWith, n)),
  };
  const alone: RunResult[] = [];
  const beside: RunResult[] = [];
  const attacker: Array<{ accountActivities: number; signatures: number; seconds: number }> = [];
  for (let run = 0; run < setup.runs; run++) {
    alone.push(await load(client, VICTIM_CONCURRENCY, victim, setup.seconds, setup.ahead));
    let stop = false;
    const attacking = attack(setup, () => stop);
    // The attacker's first long activities are under way before the clock starts.
    await new Promise((resolve) => setTimeout(resolve, 500));
    try {
      beside.push(await load(client, VICTIM_CONCURRENCY, victim, setup.seconds, setup.ahead));
    } finally {
      stop = true;
      await attacking.done;
    }
    attacker.push(attacking.counts);
  }
  const ratios = (pick: (r: RunResult) => number) => round(median(beside.map(pick)) / median(alone.map(pick)));
  return {
    shape: {
      victimConcurrency: VICTIM_CONCURRENCY,
      attackerAccountLoops: ATTACKER_ACCOUNT_LOOPS,
      accountsPerActivity: ACCOUNTS_PER_ACTIVITY,
      attackerSigners: ATTACKER_SIGNERS,
    },
    victimAlone: {
      requestsPerSecond: median(alone.map((r) => r.requestsPerSecond)),
      p50Ms: median(alone.map((r) => r.p50Ms)),
      p99Ms: median(alone.map((r) => r.p99Ms)),
    },
    victimBeside: {
      requestsPerSecond: median(beside.map((r) => r.requestsPerSecond)),
      p50Ms: median(beside.map((r) => r.p50Ms)),
      p99Ms: median(beside.map((r) => r.p99Ms)),
      maxP99Ms: Math.max(...beside.map((r) => r.p99Ms)),
    },
    // With the attacker over without (1 would be no effect at all): latencies higher is worse,
    // requests per second lower is worse.
    p50BesideToAlone: ratios((r) => r.p50Ms),
    p99BesideToAlone: ratios((r) => r.p99Ms),
    requestsPerSecondBesideToAlone: ratios((r) => r.requestsPerSecond),
    attackerPerRun: attacker.map((a) => ({
      accountActivitiesPerSecond: round(a.accountActivities / a.seconds),
      signaturesPerSecond: round(a.signatures / a.seconds),
    })),
  };
}
