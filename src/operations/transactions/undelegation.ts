// eth_undelegate_7702 (docs/sending-transactions.md): clears an account's EIP-7702 delegation. The
// account sends itself an EIP-7702 (type 4) transaction whose one authorization, signed by the account
// too, delegates to the zero address, which EIP-7702 reads as "no delegation". The sender is the
// authority, and a transaction raises its sender's nonce before its authorizations are applied, so the
// authorization's nonce is the transaction's plus one: the send holds both nonces (nonce_count 2).
// Policies see the transaction (`eth.tx`, through the function every Ethereum signing activity uses)
// and the authorization (`eth.eip_7702_authorization`, as sign_raw_payload shows one). Signed,
// recorded and broadcast like eth_send_transaction's transactions, and followed by the same broadcaster.
import { keccak256, serializeTransaction, zeroAddress, type Hex, type TransactionSerializableEIP7702 } from "viem";
import { oncePerRequest } from "../resources.js";
import { authorizationDigest, authorizationKeyword, serializeSigned } from "../../chains/ethereum.js";
import { serviceError } from "../../errors.js";
import type { Tx } from "../../store/handles.js";
import { defineActivity, type OperationEnvironment, type ParametersOf } from "../../registry/registry.js";
import { SEND_STATUS } from "../../services/chain-broadcaster.js";
import { unavailable, type EvmChain } from "../../services/chain-rpc.js";
import { openSigner, signerKeywords, type FoundSigner } from "../wallets/signers.js";
import { ethereumTransactionKeywords } from "../wallets/signing.js";
import { nextNonce, reserveNonce } from "./nonces.js";
import { newSend, senderOf, wholeNumber } from "./sending.js";

type UndelegateParameters = ParametersOf<"eth_undelegate_7702">;

const UINT64_MAX = (1n << 64n) - 1n;
const UINT256_MAX = (1n << 256n) - 1n;

/**
 * The gas limit when the request names none: the intrinsic cost of a call with one authorization
 * (21,000 + 25,000 per authorization, EIP-7702) with room to spare; the account, its delegation
 * cleared before the call runs, executes no code. Gas not used is not paid.
 */
export const UNDELEGATION_GAS_LIMIT = 60_000n;

interface PreparedUndelegation {
  signer: FoundSigner;
  from: Hex;
  chain: EvmChain;
  /** Without the authorization's signature: what policies see. */
  transaction: Omit<TransactionSerializableEIP7702, "authorizationList"> & { nonce: number; gas: bigint; chainId: number };
  authorization: { address: Hex; chainId: bigint; nonce: bigint };
  nonceChosen: boolean;
}

const prepareOnce = oncePerRequest<UndelegateParameters, PreparedUndelegation>();

function prepareUndelegation(trx: Tx, env: OperationEnvironment, organizationId: string, p: UndelegateParameters) {
  return prepareOnce(p, () => prepare(trx, env, organizationId, p));
}

async function prepare(trx: Tx, env: OperationEnvironment, organizationId: string, p: UndelegateParameters): Promise<PreparedUndelegation> {
  const nonceAsked = wholeNumber(p.nonce, "nonce", UINT64_MAX - 1n);
  const gas = wholeNumber(p.gasLimit, "gasLimit", UINT64_MAX) ?? UNDELEGATION_GAS_LIMIT;
  let maxFeePerGas = wholeNumber(p.maxFeePerGas, "maxFeePerGas", UINT256_MAX);
  let maxPriorityFeePerGas = wholeNumber(p.maxPriorityFeePerGas, "maxPriorityFeePerGas", UINT256_MAX);
  if (maxFeePerGas !== undefined && maxPriorityFeePerGas !== undefined && maxPriorityFeePerGas > maxFeePerGas)
    throw serviceError("REQUEST_INVALID", "maxPriorityFeePerGas must not exceed maxFeePerGas");
  const { signer, from } = await senderOf(trx, organizationId, p.from);
  const chain = await env.chains.evm(p.caip2);
  if (maxFeePerGas === undefined || maxPriorityFeePerGas === undefined) {
    let estimate: { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint };
    try {
      estimate = await chain.client.estimateFeesPerGas();
    } catch (error) {
      throw unavailable(p.caip2, error);
    }
    maxPriorityFeePerGas ??= estimate.maxPriorityFeePerGas;
    maxFeePerGas ??= estimate.maxFeePerGas - estimate.maxPriorityFeePerGas + maxPriorityFeePerGas;
  }
  const nonce = nonceAsked !== undefined ? Number(nonceAsked) : await nextNonce(trx, chain.client, p.caip2, from);
  return {
    signer,
    from,
    chain,
    transaction: {
      type: "eip7702",
      chainId: chain.chainId,
      nonce,
      to: from,
      value: 0n,
      data: "0x",
      gas,
      maxFeePerGas,
      maxPriorityFeePerGas,
    },
    authorization: { address: zeroAddress, chainId: BigInt(chain.chainId), nonce: BigInt(nonce) + 1n },
    nonceChosen: nonceAsked === undefined,
  };
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
    async policyContext(trx, organizationId, p, _type, env) {
      if (!env) return {};
      try {
        const undelegation = await prepareUndelegation(trx, env, organizationId, p);
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
    async execute(ctx, p) {
      const undelegation = await prepareUndelegation(ctx.trx, ctx.env, ctx.organizationId, p);
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
