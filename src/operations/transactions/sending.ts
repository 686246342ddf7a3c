// Sending Ethereum transactions (docs/sending-transactions.md): eth_send_transaction builds an EIP-1559
// transaction from a call (nonce, gas and fees filled from the chain's node when the request omits
// them), shows it to policies as sign_transaction shows its transactions (`eth.tx`, through the same
// function), signs it and records it; the chain broadcaster (services/chain-broadcaster.ts) sends it
// once the activity has committed and follows it to its final status. eth_send_raw_transaction hands
// an already signed transaction to the node. get_send_transaction_status and get_nonces read them.
import { getAddress, isAddress, keccak256, recoverTransactionAddress, serializeTransaction, type Hex } from "viem";
import { oncePerRequest } from "../resources.js";
import type { TransactionSerializable, TransactionSerializableEIP1559 } from "viem";
import { ServiceError, serviceError } from "../../errors.js";
import type { Tx } from "../../store/handles.js";
import { address as addressOf } from "../../crypto/addresses.js";
import { EthereumError, readEthereumTransaction, serializeSigned } from "../../chains/ethereum.js";
import { decodeRevert, revertError, type SendError } from "../../chains/ethereum-reverts.js";
import { defineActivity, defineQuery, type OperationEnvironment, type ParametersOf } from "../../registry/registry.js";
import { SEND_STATUS } from "../../services/chain-broadcaster.js";
import { rpcFailureOf, unavailable } from "../../services/chain-rpc.js";
import { newId } from "../../store/ids.js";
import { findSigner, openSigner, signerKeywords, type FoundSigner } from "../wallets/signers.js";
import { ethereumTransactionKeywords } from "../wallets/signing.js";
import { firstFreeNonce, nextNonce, pendingNonce, reserveNonce } from "./nonces.js";
import { answerOf, feesFor, readNode, type Fees, type NodeRead } from "./chain-reads.js";

type SendParameters = ParametersOf<"eth_send_transaction">;

/** What the product accepts in `calls` (v1EthSendTransactionIntentV2). */
const MAX_CALLS = 50;
const UINT64_MAX = (1n << 64n) - 1n;
const UINT256_MAX = (1n << 256n) - 1n;

/** A whole number the request sent as a string: decimal digits (or 0x hex), within `max`. */
export function wholeNumber(value: string | undefined, field: string, max: bigint): bigint | undefined {
  if (value === undefined) return undefined;
  if (!/^(0|[1-9][0-9]{0,77}|0x[0-9a-fA-F]{1,64})$/.test(value))
    throw serviceError(
      "REQUEST_INVALID",
      `${field} must be a whole number in decimal digits (or 0x hex), got ${JSON.stringify(value.slice(0, 80))}`,
    );
  const n = BigInt(value);
  if (n > max) throw serviceError("REQUEST_INVALID", `${field} is out of range (at most ${max})`);
  return n;
}

/** An address as EIP-55 requires: 0x and 40 hex digits, and a valid checksum when the case is mixed. */
function recipient(value: string, field: string): Hex {
  if (!isAddress(value, { strict: true }))
    throw serviceError(
      "REQUEST_INVALID",
      `${field} must be an Ethereum address (0x and 40 hex digits, mixed case only as its EIP-55 checksum), got ${JSON.stringify(value.slice(0, 80))}` +
        (value === "" ? ": contract creation is not offered" : ""),
    );
  return getAddress(value);
}

function calldata(value: string | undefined, field: string): Hex {
  if (value === undefined || value === "" || value === "0x") return "0x";
  const hex = value.startsWith("0x") ? value.slice(2) : value;
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) throw serviceError("REQUEST_INVALID", `${field} must be hex bytes (0x and pairs of hex digits)`);
  return `0x${hex.toLowerCase()}`;
}

/** The one call a send carries, with the request's own checks (before anything reaches a node). */
function callOf(p: SendParameters) {
  // V1 names one call at the top level; V2 lists them.
  const calls = p.calls ?? (p.to !== undefined ? [{ to: p.to, value: p.value, data: p.data }] : []);
  if (calls.length < 1 || calls.length > MAX_CALLS)
    throw serviceError("REQUEST_INVALID", `calls must hold between 1 and ${MAX_CALLS} entries, got ${calls.length}`);
  calls.forEach((call, i) => {
    recipient(call.to, `calls[${i}].to`);
    wholeNumber(call.value, `calls[${i}].value`, UINT256_MAX);
    calldata(call.data, `calls[${i}].data`);
  });
  if (p.sponsor === true)
    throw serviceError(
      "GAS_STATION_NOT_OFFERED",
      "sponsor true asks the product's Gas Station to pay the fees; this server has no sponsor: send with sponsor false, paid by the sender",
    );
  if (calls.length > 1)
    throw serviceError(
      "GAS_STATION_NOT_OFFERED",
      `${calls.length} calls are executed as one EIP-7702 batch through the product's Gas Station delegate contract, which this server ` +
        "does not run: send each call as its own transaction (one call, sponsor false)",
    );
  const [call] = calls;
  return {
    to: recipient(call!.to, "calls[0].to"),
    value: wholeNumber(call!.value, "calls[0].value", UINT256_MAX) ?? 0n,
    data: calldata(call!.data, "calls[0].data"),
  };
}

const notAnAddress = () =>
  serviceError(
    "REQUEST_INVALID",
    "from must be the Ethereum address of a wallet account or private key (private key ids are not accepted)",
  );

/** The key `from` names: an Ethereum address of one of the organization's wallet accounts or private keys. */
export async function senderOf(trx: Tx, organizationId: string, from: string): Promise<{ signer: FoundSigner; from: Hex }> {
  if (!isAddress(from, { strict: false })) throw notAnAddress();
  const signer = await findSigner(trx, organizationId, from).catch((error: unknown) => {
    if (error instanceof ServiceError && error.turnkeyErrorCode === "SIGNER_NOT_FOUND")
      throw serviceError("SIGNER_NOT_FOUND", `from ${from} is not the address of a wallet account or private key of this organization`);
    throw error;
  });
  const ethereum =
    signer.curve === "CURVE_SECP256K1" ? addressOf("CURVE_SECP256K1", "ADDRESS_FORMAT_ETHEREUM", Buffer.from(signer.publicKey, "hex")) : "";
  if (ethereum.toLowerCase() !== from.toLowerCase())
    throw serviceError(
      "REQUEST_INVALID",
      `from ${from} is not an Ethereum address of a secp256k1 key: it cannot sign an Ethereum transaction`,
    );
  return { signer, from: getAddress(from) };
}

/** What eth_send_transaction's precheck reads from the node (plain JSON; see chain-reads.ts). */
interface SendReads {
  chainId: number;
  fees: Fees;
  /** The gas limit, the request's or the node's estimate; null when the node's simulation reverted. */
  gas: string | null;
  /** The simulation's revert data: decoded in the transaction, with the contract's uploaded ABI. */
  revertData?: Hex;
  /** The node's pending nonce of `from`, when Sigil chooses the nonce. */
  pendingNonce: number | null;
}

/** A send as prepared: the transaction policies see and the key signs, or the reason its simulation reverted. */
interface PreparedSend {
  signer: FoundSigner;
  from: Hex;
  transaction: TransactionSerializableEIP1559 & { nonce: number; gas: bigint };
  /** Sigil chose the nonce (the request named none). */
  nonceChosen: boolean;
  /** The node's simulation of the call reverted (its data): nothing is signed, the send is recorded FAILED. */
  reverted?: { data?: Hex };
}

/** The numbers the request names, checked. */
function askedOf(p: SendParameters) {
  return {
    call: callOf(p),
    nonce: wholeNumber(p.nonce, "nonce", UINT64_MAX),
    gas: wholeNumber(p.gasLimit, "gasLimit", UINT64_MAX),
    ...askedFees(p),
  };
}

/** The EIP-1559 fees a request names (a send's, an undelegation's), checked. */
export function askedFees(p: { maxFeePerGas?: string; maxPriorityFeePerGas?: string }) {
  const maxFee = wholeNumber(p.maxFeePerGas, "maxFeePerGas", UINT256_MAX);
  const tip = wholeNumber(p.maxPriorityFeePerGas, "maxPriorityFeePerGas", UINT256_MAX);
  if (maxFee !== undefined && tip !== undefined && tip > maxFee)
    throw serviceError("REQUEST_INVALID", "maxPriorityFeePerGas must not exceed maxFeePerGas");
  return { maxFee, tip };
}

/** The precheck: the request's own checks, then the node's chain id, fees, gas estimate and pending nonce. */
async function readSend(p: SendParameters, env: OperationEnvironment): Promise<NodeRead<SendReads>> {
  const asked = askedOf(p);
  if (!isAddress(p.from, { strict: false })) throw notAnAddress();
  const from = getAddress(p.from);
  return readNode(async () => {
    const { client, chainId } = await env.chains.evm(p.caip2);
    const fees = await feesFor(client, p.caip2, asked.maxFee, asked.tip);
    let gas = asked.gas;
    let revertData: Hex | undefined;
    let reverted = false;
    if (gas === undefined) {
      try {
        gas = await client.estimateGas({ account: from, to: asked.call.to, data: asked.call.data, value: asked.call.value });
      } catch (error) {
        const failure = rpcFailureOf(error);
        if (failure.kind === "unreachable") throw unavailable(p.caip2, error);
        if (failure.data === undefined && !/revert/i.test(failure.message))
          throw serviceError(
            "TRANSACTION_REJECTED_BY_NODE",
            `the node of ${p.caip2} refused to estimate the transaction's gas: ${failure.message}`,
          );
        reverted = true;
        revertData = failure.data;
      }
    }
    const pending = asked.nonce === undefined && !reverted ? await pendingNonce(client, p.caip2, from) : null;
    return {
      chainId,
      fees,
      gas: reverted ? null : String(gas),
      ...(revertData !== undefined ? { revertData } : {}),
      pendingNonce: pending,
    };
  });
}

// Built once per request: the policies' keywords and the execution read the same transaction, so
// what policies allowed is exactly what is signed (the parameters object is the same for both).
const buildOnce = oncePerRequest<SendParameters, PreparedSend>();

/** The transaction, in the activity's transaction: the signer and the nonce from the database, the rest from the precheck. */
function buildSend(trx: Tx, organizationId: string, p: SendParameters, reads: NodeRead<SendReads> | undefined): Promise<PreparedSend> {
  return buildOnce(p, async () => {
    const asked = askedOf(p);
    const { signer, from } = await senderOf(trx, organizationId, p.from);
    const read = answerOf(reads);
    const reverted = read.gas === null;
    const nonce =
      asked.nonce !== undefined ? Number(asked.nonce) : reverted ? 0 : await firstFreeNonce(trx, p.caip2, from, read.pendingNonce!);
    return {
      signer,
      from,
      transaction: {
        type: "eip1559",
        chainId: read.chainId,
        nonce,
        to: asked.call.to,
        value: asked.call.value,
        data: asked.call.data,
        gas: reverted ? 0n : BigInt(read.gas!),
        maxFeePerGas: BigInt(read.fees.maxFeePerGas),
        maxPriorityFeePerGas: BigInt(read.fees.maxPriorityFeePerGas),
      },
      nonceChosen: asked.nonce === undefined,
      ...(reverted ? { reverted: read.revertData !== undefined ? { data: read.revertData } : {} } : {}),
    };
  });
}

export const newSend = (
  ctx: { organizationId: string; activityId: string; now: number },
  fields: { caip2: string; from: string; to: string },
) => ({
  id: newId(),
  organization_id: ctx.organizationId,
  activity_id: ctx.activityId,
  caip2: fields.caip2,
  from_address: fields.from,
  to_address: fields.to,
  broadcasts: 0,
  attempts: 0,
  next_attempt_at: ctx.now,
  lease_until: null,
  block_number: null,
  created_at: ctx.now,
  updated_at: ctx.now,
});

/** A signed transaction as eth_send_raw_transaction takes it: 0x hex (or without 0x) that viem parses and whose sender recovers. */
async function parseSignedTransaction(signed: string) {
  const hex = (signed.startsWith("0x") ? signed : `0x${signed}`) as Hex;
  if (!/^0x([0-9a-fA-F]{2})+$/.test(hex))
    throw serviceError("REQUEST_INVALID", "signedTransaction must be the hex of a signed Ethereum transaction");
  let transaction: TransactionSerializable;
  try {
    transaction = readEthereumTransaction(hex, "signedTransaction");
  } catch (error) {
    if (error instanceof EthereumError) throw serviceError("REQUEST_INVALID", error.message);
    throw error;
  }
  if (!("r" in transaction) || transaction.r === undefined || transaction.s === undefined)
    throw serviceError("REQUEST_INVALID", "signedTransaction carries no signature: send a signed transaction (sign_transaction's answer)");
  // Typed transactions only: a legacy one without a chain id is refused with its own reason below.
  if (transaction.chainId === 0)
    throw serviceError(
      "REQUEST_INVALID",
      "signedTransaction is signed for chain id 0, which names no chain: sign it for the chain it is sent to",
    );
  let from: Hex;
  try {
    from = await recoverTransactionAddress({
      serializedTransaction: hex as Parameters<typeof recoverTransactionAddress>[0]["serializedTransaction"],
    });
  } catch {
    throw serviceError("REQUEST_INVALID", "signedTransaction's signature recovers no sender: r and s are not a secp256k1 signature");
  }
  return { hex, transaction, from };
}

/**
 * eth_send_raw_transaction's precheck: the transaction read and signed for a chain, then the node asked
 * whether it is signed for its chain and whether its nonce is still unused (a transaction the node
 * would refuse outright is refused here, while the caller waits, rather than failing unseen later).
 */
async function readRawSend(p: ParametersOf<"eth_send_raw_transaction">, env: OperationEnvironment): Promise<NodeRead<{ chainId: number }>> {
  const { transaction, from } = await parseSignedTransaction(p.signedTransaction);
  // A legacy transaction signed without a chain id (before EIP-155) is valid on every chain: relaying
  // it would let anyone replay it elsewhere.
  if (transaction.chainId === undefined)
    throw serviceError(
      "REQUEST_INVALID",
      `signedTransaction names no chain id (signed before EIP-155, valid on every chain): sign it for ${p.caip2}`,
    );
  return readNode(async () => {
    const { client, chainId } = await env.chains.evm(p.caip2);
    if (transaction.chainId !== chainId)
      throw serviceError("REQUEST_INVALID", `signedTransaction is signed for chain ${transaction.chainId}, not ${p.caip2}`);
    let mined: number;
    try {
      mined = await client.getTransactionCount({ address: from, blockTag: "latest" });
    } catch (error) {
      throw unavailable(p.caip2, error);
    }
    const nonce = transaction.nonce ?? 0;
    if (nonce < mined)
      throw serviceError(
        "NONCE_ALREADY_USED",
        `nonce ${nonce} of ${from} was already used on ${p.caip2} (its next nonce is ${mined}): the transaction can never be mined`,
      );
    return { chainId };
  });
}

export const transactionOperations = [
  defineActivity({
    name: "eth_send_transaction",
    summary:
      "Build, sign and send an EIP-1559 transaction (one call; nonce, gas and fees filled from the chain's node when omitted), then follow it to its final status.",
    resource: "PRIVATE_KEY",
    action: "SIGN",
    queuesBroadcasts: true,
    precheck: (p, env) => readSend(p, env),
    async policyContext(trx, organizationId, p, _type, reads) {
      try {
        const send = await buildSend(trx, organizationId, p, reads);
        return { ...signerKeywords(send.signer), ...(await ethereumTransactionKeywords(trx, organizationId, send.transaction, send.from)) };
      } catch {
        // refused with its reason when the activity runs
        return {};
      }
    },
    async execute(ctx, p, _type, reads) {
      const send = await buildSend(ctx.trx, ctx.organizationId, p, reads);
      const { transaction, from } = send;
      const row = newSend(ctx, { caip2: p.caip2, from, to: transaction.to! });
      if (send.reverted) {
        // Nothing is signed and no nonce is taken; the status query says why.
        const abi = await ctx.env.findContractAbi(ctx.trx, ctx.organizationId, transaction.to!);
        const simulationReverted = revertError("execution reverted in simulation", decodeRevert(send.reverted.data, transaction.to!, abi));
        await ctx.trx
          .insertInto("sent_transactions")
          .values({
            ...row,
            nonce: null,
            signed_transaction: null,
            tx_hash: null,
            status: SEND_STATUS.FAILED,
            error: JSON.stringify(simulationReverted),
          })
          .execute();
        return { sendTransactionStatusId: row.id };
      }
      await reserveNonce(ctx.trx, ctx.dialect, p.caip2, from, transaction.nonce, send.nonceChosen, ctx.now);
      const digest = Buffer.from(keccak256(serializeTransaction(transaction)).slice(2), "hex");
      const signature = await ctx.env.signatures.signDigest("CURVE_SECP256K1", openSigner(ctx.env.keyring, send.signer), digest);
      const signed =
        `0x${serializeSigned(transaction, { r: signature.r, s: signature.s, recovery: Number.parseInt(signature.v, 16) })}` as Hex;
      await ctx.trx
        .insertInto("sent_transactions")
        .values({
          ...row,
          nonce: transaction.nonce,
          signed_transaction: signed,
          tx_hash: keccak256(signed),
          status: SEND_STATUS.INITIALIZED,
          error: null,
        })
        .execute();
      return { sendTransactionStatusId: row.id };
    },
  }),

  defineActivity({
    name: "eth_send_raw_transaction",
    summary:
      "Send an already signed Ethereum transaction to the chain's node once the activity has committed; answers its hash. Followed like Sigil's own sends.",
    // The product's policy docs list no resource for it; it broadcasts a signature, so it is grouped
    // with the sending activities (docs/sending-transactions.md).
    resource: "PRIVATE_KEY",
    action: "SIGN",
    queuesBroadcasts: true,
    precheck: (p, env) => readRawSend(p, env),
    async policyContext(trx, organizationId, p) {
      try {
        const { transaction, from } = await parseSignedTransaction(p.signedTransaction);
        return await ethereumTransactionKeywords(trx, organizationId, transaction, from);
      } catch {
        return {};
      }
    },
    async execute(ctx, p, _type, reads) {
      const { hex, transaction, from } = await parseSignedTransaction(p.signedTransaction);
      answerOf(reads);
      const hash = keccak256(hex);
      // Recorded, and sent by the chain broadcaster once this activity has committed (never from
      // inside it: a rolled-back activity must not have sent anything); followed as Sigil's own sends.
      await ctx.trx
        .insertInto("sent_transactions")
        .values({
          ...newSend(ctx, { caip2: p.caip2, from: getAddress(from), to: transaction.to ? getAddress(transaction.to) : "" }),
          to_address: transaction.to ? getAddress(transaction.to) : null,
          nonce: transaction.nonce ?? 0,
          signed_transaction: hex,
          tx_hash: hash,
          status: SEND_STATUS.INITIALIZED,
          error: null,
        })
        .execute();
      return { transactionHash: hash };
    },
  }),

  defineQuery({
    name: "get_send_transaction_status",
    summary:
      "The status of a transaction eth_send_transaction (or sol_send_transaction, eth_undelegate_7702) sent: INITIALIZED, BROADCASTING, INCLUDED or FAILED, its hash (Solana: signature), and why it failed or reverted.",
    async run(ctx, body) {
      const row = await ctx.db
        .selectFrom("sent_transactions")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .where("id", "=", body.sendTransactionStatusId)
        .executeTakeFirst();
      if (!row)
        throw serviceError(
          "SEND_TRANSACTION_STATUS_NOT_FOUND",
          `no sent transaction ${body.sendTransactionStatusId} in organization ${ctx.organizationId}`,
        );
      const error = row.error ? (JSON.parse(row.error) as SendError) : undefined;
      // The hash is shown once the node has accepted the transaction; a FAILED one never landed.
      const showHash = row.tx_hash && (row.status === SEND_STATUS.BROADCASTING || row.status === SEND_STATUS.INCLUDED);
      return {
        txStatus: row.status,
        ...(showHash ? (row.caip2.startsWith("solana:") ? { solana: { signature: row.tx_hash } } : { eth: { txHash: row.tx_hash } }) : {}),
        ...(error ? { txError: error.message, error } : {}),
      };
    },
  }),

  defineQuery({
    name: "get_nonces",
    summary: "The nonce the next send from an address will use (the node's pending nonce, past Sigil's sends in flight).",
    async run(ctx, body) {
      if (body.gasStationNonce === true)
        throw serviceError(
          "GAS_STATION_NOT_OFFERED",
          "gasStationNonce is the nonce of the product's Gas Station delegate contract, which this server does not run",
        );
      if (!isAddress(body.address, { strict: true }))
        throw serviceError(
          "REQUEST_INVALID",
          `address must be an Ethereum address (0x and 40 hex digits), got ${JSON.stringify(body.address.slice(0, 80))}`,
        );
      if (body.nonce !== true) return {};
      const { client } = await ctx.chains.evm(body.caip2);
      return { nonce: String(await nextNonce(ctx.db, client, body.caip2, getAddress(body.address))) };
    },
  }),
];
