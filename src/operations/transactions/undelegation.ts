// eth_undelegate_7702 (docs/sending-transactions.md): clears an account's EIP-7702 delegation. The
// account sends itself an EIP-7702 (type 4) transaction whose one authorization, signed by the account
// too, delegates to the zero address, which EIP-7702 reads as "no delegation". The sender is the
// authority, and a transaction raises its sender's nonce before its authorizations are applied, so the
// authorization's nonce is the transaction's plus one: the send holds both nonces (nonce_count 2).
// Policies see the transaction (`eth.tx`, through the function every Ethereum signing activity uses)
// and the authorization (`eth.eip_7702_authorization`, as sign_raw_payload shows one). Signed,
// recorded and broadcast like eth_send_transaction's transactions, and followed by the same broadcaster.
import { getAddress, isAddress, keccak256, serializeTransaction, zeroAddress, type Hex, type TransactionSerializableEIP7702 } from "viem";
import { oncePerRequest } from "../resources.js";
import { authorizationDigest, authorizationKeyword, serializeSigned } from "../../chains/ethereum.js";
import type { Tx } from "../../store/handles.js";
import { defineActivity, type OperationEnvironment, type ParametersOf } from "../../registry/registry.js";
import { SEND_STATUS } from "../../services/chain-broadcaster.js";
import { openSigner, signerKeywords, type FoundSigner } from "../wallets/signers.js";
import { ethereumTransactionKeywords } from "../wallets/signing.js";
import { firstFreeNonce, pendingNonce, reserveNonce } from "./nonces.js";
import { answerOf, feesFor, readNode, type Fees, type NodeRead } from "./chain-reads.js";
import { askedFees, newSend, senderOf, wholeNumber } from "./sending.js";

type UndelegateParameters = ParametersOf<"eth_undelegate_7702">;

const UINT64_MAX = (1n << 64n) - 1n;

/**
 * The gas limit when the request names none: the intrinsic cost of a call with one authorization
 * (21,000 + 25,000 per authorization, EIP-7702) with room to spare; the account, its delegation
 * cleared before the call runs, executes no code. Gas not used is not paid.
 */
export const UNDELEGATION_GAS_LIMIT = 60_000n;

interface PreparedUndelegation {
  signer: FoundSigner;
  from: Hex;
  /** Without the authorization's signature: what policies see. */
  transaction: Omit<TransactionSerializableEIP7702, "authorizationList"> & { nonce: number; gas: bigint; chainId: number };
  authorization: { address: Hex; chainId: bigint; nonce: bigint };
  nonceChosen: boolean;
}

/** What the precheck reads from the node (plain JSON; see chain-reads.ts). */
interface UndelegationReads {
  chainId: number;
  fees: Fees;
  /** The node's pending nonce of `from`, when Sigil chooses the nonce. */
  pendingNonce: number | null;
}

function askedOf(p: UndelegateParameters) {
  return {
    nonce: wholeNumber(p.nonce, "nonce", UINT64_MAX - 1n),
    gas: wholeNumber(p.gasLimit, "gasLimit", UINT64_MAX) ?? UNDELEGATION_GAS_LIMIT,
    ...askedFees(p),
  };
}

/** The precheck: the request's own checks, then the node's chain id, fees and pending nonce. */
async function readUndelegation(p: UndelegateParameters, env: OperationEnvironment): Promise<NodeRead<UndelegationReads>> {
  const asked = askedOf(p);
  const from = isAddress(p.from, { strict: false }) ? getAddress(p.from) : undefined;
  return readNode(async () => {
    const { client, chainId } = await env.chains.evm(p.caip2);
    const fees = await feesFor(client, p.caip2, asked.maxFee, asked.tip);
    // A `from` that is no address is refused in the transaction, with the signer's other checks.
    const pending = asked.nonce === undefined && from ? await pendingNonce(client, p.caip2, from) : null;
    return { chainId, fees, pendingNonce: pending };
  });
}

const buildOnce = oncePerRequest<UndelegateParameters, PreparedUndelegation>();

function buildUndelegation(trx: Tx, organizationId: string, p: UndelegateParameters, reads: NodeRead<UndelegationReads> | undefined) {
  return buildOnce(p, async () => {
    const asked = askedOf(p);
    const { signer, from } = await senderOf(trx, organizationId, p.from);
    const read = answerOf(reads);
    const nonce = asked.nonce !== undefined ? Number(asked.nonce) : await firstFreeNonce(trx, p.caip2, from, read.pendingNonce!);
    return {
      signer,
      from,
      transaction: {
        type: "eip7702" as const,
        chainId: read.chainId,
        nonce,
        to: from,
        value: 0n,
        data: "0x" as Hex,
        gas: asked.gas,
        maxFeePerGas: BigInt(read.fees.maxFeePerGas),
        maxPriorityFeePerGas: BigInt(read.fees.maxPriorityFeePerGas),
      },
      authorization: { address: zeroAddress, chainId: BigInt(read.chainId), nonce: BigInt(nonce) + 1n },
      nonceChosen: asked.nonce === undefined,
    };
  });
}

export const undelegationOperations = [
  defineActivity({
    name: "eth_undelegate_7702",
    // @turnkey/sdk-server spells its type ACTIVITY_TYPE_ETH_UNDELEGATE7702: read as this one (CLIENT_TYPE_SPELLINGS).
    summary:
      "Clear an account's EIP-7702 delegation: a type-4 transaction from the account to itself authorizing the zero address, signed, sent and followed to its final status.",
    resource: "PRIVATE_KEY",
    action: "SIGN",
    queuesBroadcasts: true,
    precheck: (p, env) => readUndelegation(p, env),
    async policyContext(trx, organizationId, p, _type, reads) {
      try {
        const undelegation = await buildUndelegation(trx, organizationId, p, reads);
        return {
          ...signerKeywords(undelegation.signer),
          // The transaction as it will be signed, its authorization's signature aside (eth.tx names none of it).
          ...(await ethereumTransactionKeywords(
            trx,
            organizationId,
            { ...undelegation.transaction, authorizationList: [] },
            undelegation.from,
          )),
          "eth.eip_7702_authorization": authorizationKeyword(undelegation.authorization),
        };
      } catch {
        // refused with its reason when the activity runs
        return {};
      }
    },
    async execute(ctx, p, _type, reads) {
      const undelegation = await buildUndelegation(ctx.trx, ctx.organizationId, p, reads);
      const { transaction, authorization, from } = undelegation;
      await reserveNonce(ctx.trx, ctx.dialect, p.caip2, from, transaction.nonce, undelegation.nonceChosen, ctx.now, 2);
      const privateKey = openSigner(ctx.env.keyring, undelegation.signer);
      const signed = await ctx.env.signatures.signDigest("CURVE_SECP256K1", privateKey, authorizationDigest(authorization));
      const complete: TransactionSerializableEIP7702 = {
        ...transaction,
        authorizationList: [
          {
            address: authorization.address,
            chainId: Number(authorization.chainId),
            nonce: Number(authorization.nonce),
            r: `0x${signed.r}`,
            s: `0x${signed.s}`,
            yParity: Number.parseInt(signed.v, 16),
          },
        ],
      };
      const digest = Buffer.from(keccak256(serializeTransaction(complete)).slice(2), "hex");
      const signature = await ctx.env.signatures.signDigest("CURVE_SECP256K1", privateKey, digest);
      const raw = `0x${serializeSigned(complete, { r: signature.r, s: signature.s, recovery: Number.parseInt(signature.v, 16) })}` as Hex;
      const row = newSend(ctx, { caip2: p.caip2, from, to: from });
      await ctx.trx
        .insertInto("sent_transactions")
        .values({
          ...row,
          nonce: transaction.nonce,
          nonce_count: 2,
          signed_transaction: raw,
          tx_hash: keccak256(raw),
          status: SEND_STATUS.INITIALIZED,
          error: null,
        })
        .execute();
      return { sendTransactionStatusId: row.id };
    },
  }),
];
