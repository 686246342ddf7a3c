// A Solana node for the tests: no validator can be installed here, so the suite runs LiteSVM (npm
// `litesvm`: the Solana runtime — its programs, fees, rent and signature checks — in this process) and
// answers, over JSON-RPC on a loopback port, the methods Sigil calls: getGenesisHash, getLatestBlockhash,
// isBlockhashValid, sendTransaction (with LiteSVM's simulation as the preflight), getSignatureStatuses,
// getTransaction, getBlock, getBalance, getAccountInfo, getMultipleAccounts and getTokenAccountsByOwner. Each
// transaction that lands gets a slot of its own and is final at once — unless a test holds them: then
// a transaction that passed its preflight waits unprocessed (no signature status, as on a validator that
// has not processed it yet) until the test lands the held ones (each executed against the state then,
// so one may fail on chain although its preflight passed) or drops them (as a validator that never
// forwarded them). A blockhash is valid until the test expires it (LiteSVM keeps one at a time; a
// cluster keeps ~150 blocks' worth). What LiteSVM has no notion of is made up here, and said so:
// the genesis hash is devnet's (the API's caip2 list names only mainnet and devnet, so the node
// must claim one of them; devnet's, so that nothing could reach a real mainnet node), a block per
// landed transaction, and its time (the wall clock).
import http from "node:http";
import type { AddressInfo } from "node:net";
import { FailedTransactionMetadata, LiteSVM, type TransactionMetadata } from "litesvm";
import {
  address,
  appendTransactionMessageInstructions,
  compileTransaction,
  createNoopSigner,
  createTransactionMessage,
  getBase58Decoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  getTransactionEncoder,
  lamports,
  pipe,
  setTransactionMessageFeePayer,
  setTransactionMessageLifetimeUsingBlockhash,
  setTransactionMessageLifetimeUsingDurableNonce,
  type Address,
  type Blockhash,
  type EncodedAccount,
  type Nonce,
  type Transaction,
} from "@solana/kit";
import {
  getNonceDecoder,
  getNonceEncoder,
  getTransferSolInstruction,
  NonceState,
  NonceVersion,
  SYSTEM_PROGRAM_ADDRESS,
} from "@solana-program/system";

/** Devnet's genesis hash: the caip2 solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1 (alias solana:devnet). */
export const DEVNET_GENESIS_HASH = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";

/** LiteSVM's fee: its default 5000 lamports per signature. */
export const LAMPORTS_PER_SIGNATURE = 5000n;

interface Landed {
  slot: number;
  blockhash: string;
  blockTime: number;
  fee: bigint;
  err: unknown;
  logs: string[];
  unitsConsumed: bigint;
}

export interface SolanaNode {
  url: string;
  caip2: string;
  svm: LiteSVM;
  /** The JSON-RPC methods asked, in order (a test can check that nothing was sent). */
  calls: string[];
  airdrop(to: string, amount: bigint): void;
  balance(of: string): bigint;
  /** What landed under a signature, as the node recorded it. */
  landed(signature: string): Landed | undefined;
  /** From now on transactions that pass their preflight are held, not processed, until landHeld or dropHeld. */
  hold(): void;
  /** How many transactions are held. */
  held(): number;
  /** Processes the held transactions in the order they arrived, and stops holding. */
  landHeld(): void;
  /** Forgets the held transactions (never processed); holding goes on. */
  dropHeld(): void;
  /** A new latest blockhash: the one before is no longer valid (isBlockhashValid false; LiteSVM refuses it). */
  expireBlockhash(): void;
  /** An initialized nonce account at `at` (its authority `authority`) holding `nonce`, as a durable-nonce
   * transaction reads it; called again, it sets the nonce held (as another transaction advancing it). */
  setNonce(at: string, authority: string, nonce: string): void;
  /** The nonce the nonce account at `at` holds. */
  nonceOf(at: string): string;
  /** While refusing, sendTransaction answers this JSON-RPC error (a node overloaded or rate limiting). */
  refuseSends(refusing: boolean): void;
  /** From now on requests get no answer until `answer` (a node that is slow to answer). */
  stall(): void;
  /** The methods of the requests waiting for an answer while stalled. */
  stalled(): string[];
  /** Answers the requests held while stalled, and stops stalling. */
  answer(): void;
  /** While paused the node answers every request HTTP 503, as a node that is down or overloaded. */
  pause(): void;
  /** Requests answered 503 while paused. */
  refused(): number;
  resume(): void;
  stop(): Promise<void>;
}

class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

/** A LiteSVM transaction error as Solana's JSON-RPC writes it (`{"InstructionError":[0,{"Custom":1}]}`). */
function errorJson(failed: FailedTransactionMetadata): unknown {
  const err = failed.err() as unknown as { index?: number; err?: () => unknown; accountIndex?: number } | number;
  if (typeof err === "object" && typeof err.err === "function") {
    const inner = err.err() as { code?: number } | number;
    return {
      InstructionError: [err.index, typeof inner === "object" && inner.code !== undefined ? { Custom: inner.code } : String(inner)],
    };
  }
  return String(err);
}

/** The words a validator uses for it ("Error processing Instruction 0: custom program error: 0x1"). */
function errorText(failed: FailedTransactionMetadata): string {
  const json = errorJson(failed) as { InstructionError?: [number, { Custom?: number } | string] } | string;
  if (typeof json === "object" && json.InstructionError) {
    const [index, inner] = json.InstructionError;
    const what =
      typeof inner === "object" && inner.Custom !== undefined ? `custom program error: 0x${inner.Custom.toString(16)}` : String(inner);
    return `Error processing Instruction ${index}: ${what}`;
  }
  return String(json);
}

/** An account as JSON-RPC answers it in base64 encoding. */
const wireAccount = (account: EncodedAccount) => ({
  lamports: Number(account.lamports),
  owner: account.programAddress,
  executable: account.executable,
  rentEpoch: 0,
  space: account.data.length,
  data: [Buffer.from(account.data).toString("base64"), "base64"],
});

/** What the transaction's message says about who signs: its number of required signatures. */
const signaturesOf = (transaction: Transaction) => BigInt(Object.keys(transaction.signatures).length);

export async function startSolanaNode(genesisHash = DEVNET_GENESIS_HASH): Promise<SolanaNode> {
  const svm = new LiteSVM();
  const calls: string[] = [];
  const landed = new Map<string, Landed>();
  const blocks = new Map<number, Landed>();
  let slot = 1;
  let paused = false;
  let refusedWhilePaused = 0;
  let holding = false;
  let refusingSends = false;
  let heldTransactions: Transaction[] = [];

  const context = () => ({ slot, apiVersion: "2.2.0" });

  function sendTransaction([wire, options]: [string, { encoding?: string; skipPreflight?: boolean }?]): string {
    if (options?.encoding !== "base64") throw new RpcError(-32602, "this test node takes base64 transactions only");
    if (refusingSends) throw new RpcError(-32005, "Node is behind by 42 slots; try again later");
    let transaction: Transaction;
    try {
      transaction = getTransactionDecoder().decode(Buffer.from(wire, "base64"));
    } catch (error) {
      throw new RpcError(-32602, `invalid transaction: ${(error as Error).message}`);
    }
    const signature = getSignatureFromTransaction(transaction);
    if (landed.has(signature) && !options.skipPreflight)
      throw new RpcError(-32002, "Transaction simulation failed: This transaction has already been processed", {
        err: "AlreadyProcessed",
        logs: [],
        accounts: null,
        unitsConsumed: 0,
        returnData: null,
        innerInstructions: null,
      });
    if (!options.skipPreflight) {
      const simulated = svm.simulateTransaction(transaction);
      if (simulated instanceof FailedTransactionMetadata) {
        const meta = simulated.meta();
        throw new RpcError(-32002, `Transaction simulation failed: ${errorText(simulated)}`, {
          err: errorJson(simulated),
          logs: meta.logs(),
          accounts: null,
          unitsConsumed: Number(meta.computeUnitsConsumed()),
          returnData: null,
          innerInstructions: null,
        });
      }
    }
    if (landed.has(signature)) return signature;
    if (holding) {
      if (!heldTransactions.some((held) => getSignatureFromTransaction(held) === signature)) heldTransactions.push(transaction);
      return signature;
    }
    return land(transaction);
  }

  /** Processes one transaction: it lands (successfully or failing in execution, its fee paid), or is refused. */
  function land(transaction: Transaction): string {
    const signature = getSignatureFromTransaction(transaction);
    const result = svm.sendTransaction(transaction);
    const failed = result instanceof FailedTransactionMetadata;
    const meta: TransactionMetadata = failed ? result.meta() : result;
    // A transaction refused before it could pay its fee (bad signature, unknown blockhash) never lands.
    if (failed && svm.getTransaction(signature) === null) throw new RpcError(-32003, `Transaction failed: ${result.err().toString()}`);
    slot += 1;
    const record: Landed = {
      slot,
      blockhash: svm.latestBlockhash(),
      blockTime: Math.floor(Date.now() / 1000),
      fee: LAMPORTS_PER_SIGNATURE * signaturesOf(transaction),
      err: failed ? errorJson(result) : null,
      logs: meta.logs(),
      unitsConsumed: meta.computeUnitsConsumed(),
    };
    landed.set(signature, record);
    blocks.set(slot, record);
    return signature;
  }

  const methods: Record<string, (params: never) => unknown> = {
    getGenesisHash: () => genesisHash,
    getLatestBlockhash: () => ({ context: context(), value: { blockhash: svm.latestBlockhash(), lastValidBlockHeight: slot + 150 } }),
    isBlockhashValid: ([blockhash]: [string]) => ({ context: context(), value: blockhash === svm.latestBlockhash() }),
    sendTransaction,
    getSignatureStatuses: ([signatures]: [string[]]) => ({
      context: context(),
      value: signatures.map((signature) => {
        const found = landed.get(signature);
        return found
          ? {
              slot: found.slot,
              confirmations: null,
              err: found.err,
              status: found.err ? { Err: found.err } : { Ok: null },
              confirmationStatus: "finalized",
            }
          : null;
      }),
    }),
    getTransaction: ([signature]: [string]) => {
      const found = landed.get(signature);
      if (!found) return null;
      return {
        slot: found.slot,
        blockTime: found.blockTime,
        version: 0,
        meta: {
          err: found.err,
          status: found.err ? { Err: found.err } : { Ok: null },
          fee: Number(found.fee),
          preBalances: [],
          postBalances: [],
          innerInstructions: [],
          logMessages: found.logs,
          computeUnitsConsumed: Number(found.unitsConsumed),
          loadedAddresses: { readonly: [], writable: [] },
        },
        transaction: {
          signatures: [signature],
          message: { accountKeys: [], header: {}, instructions: [], recentBlockhash: found.blockhash },
        },
      };
    },
    getBlock: ([at]: [number]) => {
      const found = blocks.get(Number(at));
      if (!found) throw new RpcError(-32004, `Block not available for slot ${at}`);
      return {
        blockhash: found.blockhash,
        previousBlockhash: found.blockhash,
        parentSlot: found.slot - 1,
        blockTime: found.blockTime,
        blockHeight: found.slot,
      };
    },
    getBalance: ([of]: [string]) => ({ context: context(), value: Number(svm.getBalance(address(of)) ?? 0n) }),
    getAccountInfo: ([at]: [string]) => {
      const account = svm.getAccount(address(at));
      return { context: context(), value: account.exists ? wireAccount(account) : null };
    },
    getMultipleAccounts: ([addresses]: [string[]]) => ({
      context: context(),
      value: addresses.map((at) => {
        const account = svm.getAccount(address(at));
        return account.exists ? wireAccount(account) : null;
      }),
    }),
    getTokenAccountsByOwner: ([owner, filter]: [string, { mint?: string; programId?: string }]) => {
      // SPL token accounts (165 bytes: mint 0..32, owner 32..64, amount 64..72), base64 as asked.
      const program = filter.programId ?? "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
      const accounts = svm.getProgramAccounts(address(program)).filter((account) => {
        const data = Buffer.from(account.data);
        if (data.length < 72) return false;
        const base58 = getBase58Decoder();
        return base58.decode(data.subarray(32, 64)) === owner && (!filter.mint || base58.decode(data.subarray(0, 32)) === filter.mint);
      });
      return {
        context: context(),
        value: accounts.map((account) => ({ pubkey: account.address, account: wireAccount(account) })),
      };
    },
  };

  let stalling = false;
  let unanswered: { method: string; handle: () => void }[] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      if (!stalling) return handle();
      let method = "?";
      try {
        method = String(JSON.parse(Buffer.concat(chunks).toString("utf8")).method);
      } catch {
        // answered as malformed when handled
      }
      unanswered.push({ method, handle });
    });
    const handle = () => {
      if (paused) {
        refusedWhilePaused++;
        response.statusCode = 503;
        response.end("paused");
        return;
      }
      let id: unknown = null;
      let answer: Record<string, unknown>;
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { id: unknown; method: string; params?: never };
        id = body.id;
        calls.push(body.method);
        const method = methods[body.method];
        if (!method) throw new RpcError(-32601, `Method not found: ${body.method}`);
        answer = { result: method((body.params ?? []) as never) };
      } catch (error) {
        answer =
          error instanceof RpcError
            ? { error: { code: error.code, message: error.message, ...(error.data !== undefined ? { data: error.data } : {}) } }
            : { error: { code: -32603, message: (error as Error).message } };
      }
      response.setHeader("content-type", "application/json");
      response.end(JSON.stringify({ jsonrpc: "2.0", id, ...answer }));
    };
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    caip2: `solana:${genesisHash.slice(0, 32)}`,
    svm,
    calls,
    airdrop(to, amount) {
      const result = svm.airdrop(address(to) as Address, lamports(amount));
      if (!result || result instanceof FailedTransactionMetadata) throw new Error(`airdrop to ${to} failed`);
    },
    balance: (of) => svm.getBalance(address(of)) ?? 0n,
    landed: (signature) => landed.get(signature),
    hold: () => {
      holding = true;
    },
    held: () => heldTransactions.length,
    landHeld: () => {
      holding = false;
      const waiting = heldTransactions;
      heldTransactions = [];
      for (const transaction of waiting) {
        try {
          land(transaction);
        } catch {
          // refused on processing (its blockhash expired meanwhile): it never lands
        }
      }
    },
    dropHeld: () => {
      heldTransactions = [];
    },
    expireBlockhash: () => svm.expireBlockhash(),
    setNonce: (at, authority, nonce) => {
      const data = getNonceEncoder().encode({
        version: NonceVersion.Current,
        state: NonceState.Initialized,
        authority: address(authority),
        blockhash: address(nonce),
        lamportsPerSignature: LAMPORTS_PER_SIGNATURE,
      });
      svm.setAccount({
        address: address(at),
        data: new Uint8Array(data),
        executable: false,
        lamports: lamports(1_447_680n),
        programAddress: SYSTEM_PROGRAM_ADDRESS,
        space: BigInt(data.length),
      });
    },
    nonceOf: (at) => {
      const account = svm.getAccount(address(at));
      if (!account.exists) throw new Error(`no nonce account at ${at}`);
      return getNonceDecoder().decode(account.data).blockhash;
    },
    refuseSends: (refusing) => {
      refusingSends = refusing;
    },
    stall: () => {
      stalling = true;
    },
    stalled: () => unanswered.map((request) => request.method),
    answer: () => {
      stalling = false;
      const waiting = unanswered;
      unanswered = [];
      for (const request of waiting) request.handle();
    },
    pause: () => {
      paused = true;
    },
    resume: () => {
      paused = false;
    },
    refused: () => refusedWhilePaused,
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A blockhash no node has: what a client puts in the message when Sigil attaches the real one. */
const PLACEHOLDER_BLOCKHASH = "11111111111111111111111111111111";

/** An unsigned wire transaction (hex, empty signature slots) with these transfers, `feePayer` paying. */
export function transfers(
  feePayer: string,
  moves: { from: string; to: string; lamports: bigint }[],
  blockhash = PLACEHOLDER_BLOCKHASH,
): string {
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (m) => setTransactionMessageFeePayer(address(feePayer), m),
    (m) => setTransactionMessageLifetimeUsingBlockhash({ blockhash: blockhash as Blockhash, lastValidBlockHeight: 0n }, m),
    (m) =>
      appendTransactionMessageInstructions(
        moves.map((move) =>
          getTransferSolInstruction({ source: createNoopSigner(address(move.from)), destination: address(move.to), amount: move.lamports }),
        ),
        m,
      ),
  );
  return Buffer.from(getTransactionEncoder().encode(compileTransaction(message))).toString("hex");
}

/** An unsigned wire transaction (hex) on the durable nonce `nonce` of `nonceAccount` (its first
 * instruction advances it, `authority` signing), then these transfers, `feePayer` paying. */
export function durableNonceTransfers(
  feePayer: string,
  nonceAccount: string,
  authority: string,
  nonce: string,
  moves: { from: string; to: string; lamports: bigint }[],
): string {
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (m) => setTransactionMessageFeePayer(address(feePayer), m),
    (m) =>
      setTransactionMessageLifetimeUsingDurableNonce(
        { nonce: nonce as Nonce, nonceAccountAddress: address(nonceAccount), nonceAuthorityAddress: address(authority) },
        m,
      ),
    (m) =>
      appendTransactionMessageInstructions(
        moves.map((move) =>
          getTransferSolInstruction({ source: createNoopSigner(address(move.from)), destination: address(move.to), amount: move.lamports }),
        ),
        m,
      ),
  );
  return Buffer.from(getTransactionEncoder().encode(compileTransaction(message))).toString("hex");
}
