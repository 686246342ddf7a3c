// Sending Solana transactions (docs/sending-transactions.md): sol_send_transaction takes an unsigned
// wire transaction, attaches a blockhash (the request's, or the node's latest), shows the result to
// policies as sign_transaction shows a Solana transaction (`solana.tx` through the same function, with
// each signing key's own keywords: every key must be allowed), signs it with every key signWiths names
// and records it; the chain broadcaster sends it once the activity has committed and follows it to its
// final status (services/solana-broadcast.ts).
import type { Transaction } from "@solana/kit";
import { oncePerRequest } from "../resources.js";
import { canonicalCaip2 } from "../../config.js";
import { ServiceError, serviceError } from "../../errors.js";
import type { Tx } from "../../store/handles.js";
import { address as addressOf } from "../../crypto/addresses.js";
import { solanaKeyword } from "../../chains/solana.js";
import {
  checkBlockhash,
  readUnsignedTransaction,
  signWithEach,
  transactionHex,
  usesDurableNonce,
  wireOf,
  withBlockhash,
} from "../../chains/solana-send.js";
import { defineActivity, type OperationEnvironment, type ParametersOf } from "../../registry/registry.js";
import { SEND_STATUS } from "../../services/chain-broadcaster.js";
import { solanaUnavailable } from "../../services/solana-rpc.js";
import { findSigner, openSigner, signerKeywords, type FoundSigner } from "../wallets/signers.js";
import { callerError, solanaTransactionKeywords } from "../wallets/signing.js";
import { newSend } from "./sending.js";
import { answerOf, readNode, type NodeRead } from "./chain-reads.js";

type SolSendParameters = ParametersOf<"sol_send_transaction">;

/** What the product accepts in signWiths. */
const MAX_SIGNERS = 16;

/** The signing addresses: V2's signWiths, V1's single signWith; 1 to 16, none twice. */
function signWithsOf(p: SolSendParameters): string[] {
  const signWiths = p.signWiths ?? (p.signWith !== undefined ? [p.signWith] : []);
  if (signWiths.length < 1 || signWiths.length > MAX_SIGNERS)
    throw serviceError("REQUEST_INVALID", `signWiths must hold between 1 and ${MAX_SIGNERS} addresses, got ${signWiths.length}`);
  const twice = signWiths.find((a, i) => signWiths.indexOf(a) !== i);
  if (twice !== undefined) throw serviceError("REQUEST_INVALID", `signWiths names ${twice} twice`);
  return signWiths;
}

/** V2 sends the wire transaction in hex, V1 in base64. */
function unsignedHexOf(p: SolSendParameters, type: string): string {
  if (type !== "ACTIVITY_TYPE_SOL_SEND_TRANSACTION") return p.unsignedTransaction;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(p.unsignedTransaction))
    throw serviceError("REQUEST_INVALID", "unsignedTransaction must be the base64 of a serialized Solana transaction");
  return Buffer.from(p.unsignedTransaction, "base64").toString("hex");
}

/** The key an address names: an ed25519 wallet account or private key address of the organization. */
async function signerOf(trx: Tx, organizationId: string, signWith: string, i: number): Promise<FoundSigner> {
  const signer = await findSigner(trx, organizationId, signWith).catch((error: unknown) => {
    if (error instanceof ServiceError && error.turnkeyErrorCode === "SIGNER_NOT_FOUND")
      throw serviceError(
        "SIGNER_NOT_FOUND",
        `signWiths[${i}] ${signWith} is not the address of a wallet account or private key of this organization`,
      );
    throw error;
  });
  const solana =
    signer.curve === "CURVE_ED25519" ? addressOf("CURVE_ED25519", "ADDRESS_FORMAT_SOLANA", Buffer.from(signer.publicKey, "hex")) : "";
  if (solana !== signWith)
    throw serviceError(
      "REQUEST_INVALID",
      signer.curve === "CURVE_ED25519"
        ? `signWiths[${i}] must be the Solana address of the key (private key ids are not accepted), got ${signWith}`
        : `signWiths[${i}] ${signWith} is a ${signer.curve} key: Solana transactions are signed with ed25519 keys`,
    );
  return signer;
}

/** A send as prepared: the transaction policies see and the keys sign. */
interface PreparedSolanaSend {
  caip2: string;
  signers: FoundSigner[];
  /** With its blockhash, every signature slot empty. */
  transaction: Transaction;
  /** `solana.tx` of that transaction (sign_transaction's keyword). */
  keywords: Record<string, unknown>;
}

/** The request's own checks (before any node or the database is asked). */
function readRequest(p: SolSendParameters, type: string) {
  const signWiths = signWithsOf(p);
  if (p.sponsor === true)
    throw serviceError(
      "GAS_STATION_NOT_OFFERED",
      "sponsor true asks the product's Gas Station to pay the fees; this server has no sponsor: send with sponsor false, paid by the fee payer",
    );
  const caip2 = canonicalCaip2(p.caip2);
  const unsigned = callerError("unsignedTransaction", () => readUnsignedTransaction(unsignedHexOf(p, type)));
  const recentBlockhash =
    p.recentBlockhash !== undefined
      ? callerError("recentBlockhash", () => checkBlockhash(p.recentBlockhash!, "recentBlockhash"))
      : undefined;
  return { signWiths, caip2, unsigned, recentBlockhash };
}

/** The precheck: the request's checks, then the node (its cluster checked) and, unless the request
 * names one or the transaction uses a durable nonce, its latest blockhash. Plain JSON (chain-reads.ts). */
async function readSolanaSend(
  p: SolSendParameters,
  env: OperationEnvironment,
  type: string,
): Promise<NodeRead<{ blockhash: string | null }>> {
  const { caip2, unsigned, recentBlockhash } = readRequest(p, type);
  return readNode(async () => {
    const { rpc } = await env.chains.solana(caip2);
    if (recentBlockhash !== undefined || usesDurableNonce(unsigned.transaction)) return { blockhash: recentBlockhash ?? null };
    try {
      return { blockhash: (await rpc.getLatestBlockhash({ commitment: "confirmed" }).send()).value.blockhash };
    } catch (error) {
      throw solanaUnavailable(caip2, error);
    }
  });
}

// Built once per request: policies and the execution read the same transaction (same blockhash).
const buildOnce = oncePerRequest<SolSendParameters, PreparedSolanaSend>();

function buildSend(
  trx: Tx,
  organizationId: string,
  p: SolSendParameters,
  type: string,
  reads: NodeRead<{ blockhash: string | null }> | undefined,
) {
  return buildOnce(p, async () => {
    const { signWiths, caip2, unsigned } = readRequest(p, type);
    const signers: FoundSigner[] = [];
    for (const [i, signWith] of signWiths.entries()) signers.push(await signerOf(trx, organizationId, signWith, i));
    // Sigil attaches the blockhash, so a signature made before could not verify: every signer signs here.
    const missing = unsigned.signers.filter((a) => !signWiths.includes(a));
    if (missing.length)
      throw serviceError(
        "REQUEST_INVALID",
        `the transaction needs the signatures of ${missing.join(", ")}, which signWiths does not list: every signer must be one of the organization's keys named in signWiths`,
      );
    const extra = signWiths.find((a) => !unsigned.signers.includes(a));
    if (extra !== undefined)
      throw serviceError("REQUEST_INVALID", `the transaction asks no signature of ${extra} (its signers: ${unsigned.signers.join(", ")})`);
    const { blockhash } = answerOf(reads);
    const transaction = withBlockhash(unsigned.transaction, blockhash ?? unsigned.blockhash);
    const keyword = callerError("unsignedTransaction", () => solanaKeyword(transactionHex(transaction)));
    const keywords = await solanaTransactionKeywords(trx, organizationId, keyword);
    return { caip2, signers, transaction, keywords };
  });
}

export const solanaSendingOperations = [
  defineActivity({
    name: "sol_send_transaction",
    summary:
      "Sign a Solana transaction with 1 to 16 of the organization's keys (the blockhash attached from the node when omitted), send it, and follow it to its final status.",
    resource: "PRIVATE_KEY",
    action: "SIGN",
    queuesBroadcasts: true,
    precheck: (p, env, type) => readSolanaSend(p, env, type),
    async policyContexts(trx, organizationId, p, type, reads) {
      try {
        const send = await buildSend(trx, organizationId, p, type, reads);
        return send.signers.map((signer) => ({ keywords: { ...signerKeywords(signer), ...send.keywords } }));
      } catch {
        // refused with its reason when the activity runs
        return [];
      }
    },
    async execute(ctx, p, type, reads) {
      const send = await buildSend(ctx.trx, ctx.organizationId, p, type, reads);
      const signed = await signWithEach(
        send.transaction,
        send.signers.map((signer) => {
          const privateKey = openSigner(ctx.env.keyring, signer);
          const address = addressOf("CURVE_ED25519", "ADDRESS_FORMAT_SOLANA", Buffer.from(signer.publicKey, "hex"));
          return { address, sign: (message: Uint8Array) => ctx.env.signatures.signEd25519(privateKey, message) };
        }),
      );
      const { base64, signature } = wireOf(signed);
      // The fee payer (the first signer) is the sender the status and the history name.
      const feePayer = Object.keys(signed.signatures)[0]!;
      const row = newSend(ctx, { caip2: send.caip2, from: feePayer, to: "" });
      await ctx.trx
        .insertInto("sent_transactions")
        .values({
          ...row,
          to_address: null,
          nonce: null,
          signed_transaction: base64,
          tx_hash: signature,
          status: SEND_STATUS.INITIALIZED,
          error: null,
        })
        .execute();
      return { sendTransactionStatusId: row.id };
    },
  }),
];
