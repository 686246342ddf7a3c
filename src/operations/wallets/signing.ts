// Signing with the organization's keys: raw payloads (one or many) and chain transactions. The key
// is opened from its sealed form only inside the allowed activity, used once, and dropped.
import { sha256 } from "@noble/hashes/sha2.js";
import type { TransactionSerializable } from "viem";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { serviceError } from "../../errors.js";
import type { Tx } from "../../store/handles.js";
import { SigningError, type RawSignature } from "../../crypto/sign.js";
import type { SignatureThreads } from "../../crypto/signature-threads.js";
import {
  EthereumError,
  authorizationDigest,
  authorizationKeyword,
  parseAuthorization,
  parseTypedData,
  parseUnsignedTransaction,
  serializeSigned,
  transactionKeyword,
  typedDataDigest,
  typedDataKeyword,
} from "../../chains/ethereum.js";
import { SolanaError, signSolanaTransaction, solanaKeyword } from "../../chains/solana.js";
import { BitcoinError, isTaprootFormat, parsePsbt, signPsbt } from "../../chains/bitcoin.js";
import { TronError, parseTronTransaction, serializeSignedTron } from "../../chains/tron.js";
import { TempoError, parseTempoTransaction, serializeSignedTempo, tempoKeyword } from "../../chains/tempo.js";
import { address } from "../../crypto/addresses.js";
import { defineActivity, type ActivityContext } from "../../registry/registry.js";
import { requireAtMost } from "../resources.js";
import { findSigner, openSigner, signerAddresses, signerKeywords, signerReadsAhead, type FoundSigner } from "./signers.js";
import { ethereumContractCallKeywords, withParsedInstructions } from "../contracts/contract-calls.js";
import "./transaction-keywords.js";

type Encoding =
  | "PAYLOAD_ENCODING_HEXADECIMAL"
  | "PAYLOAD_ENCODING_TEXT_UTF8"
  | "PAYLOAD_ENCODING_EIP712"
  | "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION";
type HashFunction = "HASH_FUNCTION_NO_OP" | "HASH_FUNCTION_SHA256" | "HASH_FUNCTION_KECCAK256" | "HASH_FUNCTION_NOT_APPLICABLE";

const signWithOf = (p: { signWith?: string; privateKeyId?: string }) => p.signWith ?? p.privateKeyId ?? "";

const isCallerError = (error: unknown): error is Error =>
  error instanceof EthereumError ||
  error instanceof SolanaError ||
  error instanceof BitcoinError ||
  error instanceof TronError ||
  error instanceof TempoError ||
  error instanceof SigningError;

/** Chain and payload errors are the caller's to fix: InvalidArgument, with the parsers' words (in the request's terms). */
export function callerError<T>(where: string, f: () => T): T {
  try {
    return f();
  } catch (error) {
    if (isCallerError(error)) throw serviceError("REQUEST_INVALID", `${where}: ${error.message}`);
    throw error;
  }
}

/** callerError for work that finishes later (a signature computed on another thread). */
async function callerErrorLater<T>(where: string, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    if (isCallerError(error)) throw serviceError("REQUEST_INVALID", `${where}: ${error.message}`);
    throw error;
  }
}

function bytesOf(payload: string, encoding: Encoding, where: string): Uint8Array {
  if (encoding === "PAYLOAD_ENCODING_TEXT_UTF8") return Buffer.from(payload, "utf8");
  const hex = payload.startsWith("0x") ? payload.slice(2) : payload;
  if (!/^([0-9a-fA-F]{2})*$/.test(hex))
    throw serviceError(
      "REQUEST_INVALID",
      `${where} is not hexadecimal (PAYLOAD_ENCODING_HEXADECIMAL): send an even number of hex digits, with or without 0x`,
    );
  return Buffer.from(hex, "hex");
}

/**
 * An EIP-712 or EIP-7702 payload, parsed once: the digest that is signed and the keyword policies
 * see are both computed from the same canonical values, so no spelling can show policies one thing
 * and have another signed. Policy evaluation and execution both come through here.
 */
function structuredPayload(payload: string, encoding: "PAYLOAD_ENCODING_EIP712" | "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION") {
  if (encoding === "PAYLOAD_ENCODING_EIP712") {
    const data = parseTypedData(payload);
    return { keyword: "eth.eip_712", value: typedDataKeyword(data), digest: typedDataDigest(data) };
  }
  const authorization = parseAuthorization(payload);
  return { keyword: "eth.eip_7702_authorization", value: authorizationKeyword(authorization), digest: authorizationDigest(authorization) };
}

/** What one payload's signature is over, per the curve's rules, and the signature. */
async function signPayload(
  signatures: SignatureThreads,
  signer: FoundSigner,
  privateKey: Uint8Array,
  payload: string,
  encoding: Encoding,
  hashFunction: HashFunction,
  where: string,
): Promise<RawSignature> {
  if (signer.curve === "CURVE_ED25519") {
    if (hashFunction !== "HASH_FUNCTION_NOT_APPLICABLE")
      throw serviceError(
        "REQUEST_INVALID",
        `ed25519 hashes inside the signature: hashFunction must be HASH_FUNCTION_NOT_APPLICABLE, got ${hashFunction}`,
      );
    if (encoding === "PAYLOAD_ENCODING_EIP712" || encoding === "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION")
      throw serviceError(
        "REQUEST_INVALID",
        `${encoding} is signed with secp256k1 keys, and ${signer.kind === "wallet_account" ? signer.address : signer.privateKey.id} is ed25519`,
      );
    return signatures.signEd25519(privateKey, bytesOf(payload, encoding, where));
  }
  if (hashFunction === "HASH_FUNCTION_NOT_APPLICABLE")
    throw serviceError(
      "REQUEST_INVALID",
      `HASH_FUNCTION_NOT_APPLICABLE is for ed25519 keys; a ${signer.curve} key signs a 32-byte digest: use HASH_FUNCTION_NO_OP, _SHA256 or _KECCAK256`,
    );
  let digest: Uint8Array;
  if (encoding === "PAYLOAD_ENCODING_EIP712" || encoding === "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION") {
    if (signer.curve !== "CURVE_SECP256K1")
      throw serviceError("REQUEST_INVALID", `${encoding} is signed with secp256k1 keys, not ${signer.curve}`);
    if (hashFunction !== "HASH_FUNCTION_NO_OP" && hashFunction !== "HASH_FUNCTION_KECCAK256")
      throw serviceError("REQUEST_INVALID", `${encoding} is hashed by its own rules: hashFunction must be HASH_FUNCTION_NO_OP`);
    // An Ethereum signature is ECDSA with a recovery id; a Taproot or Spark address signs BIP-340
    // Schnorr, which no Ethereum verifier accepts. Refused rather than answered with a signature nobody can use.
    const schnorr = schnorrAddressKind(signerAddressFormat(signer));
    if (schnorr)
      throw serviceError(
        "REQUEST_INVALID",
        `${encoding} is signed for Ethereum (ECDSA), and ${signer.kind === "wallet_account" ? signer.address : "that address"} is a ` +
          `${schnorr} address, which signs BIP-340 Schnorr: name the key by its id or by an Ethereum address`,
      );
    digest = callerError(where, () => structuredPayload(payload, encoding).digest);
  } else {
    const bytes = bytesOf(payload, encoding, where);
    digest =
      hashFunction === "HASH_FUNCTION_SHA256" ? sha256(bytes) : hashFunction === "HASH_FUNCTION_KECCAK256" ? keccak_256(bytes) : bytes;
  }
  // The product signs for a P2TR address with Schnorr by its Taproot output key, and for a Spark
  // address with plain Schnorr by the key itself (spark.mdx, "Signing configurations"); an ECDSA
  // signature there would be accepted by nobody. A key named by its id implies no address: ECDSA.
  if (signer.curve === "CURVE_SECP256K1") {
    const schnorr = schnorrAddressKind(signerAddressFormat(signer));
    if (schnorr === "Taproot (P2TR)") return callerErrorLater(where, signatures.signTaprootKeyPath(privateKey, digest));
    if (schnorr === "Spark") return callerErrorLater(where, signatures.signSchnorr(privateKey, digest));
  }
  return callerErrorLater(where, signatures.signDigest(signer.curve as "CURVE_SECP256K1", privateKey, digest));
}

/** Which BIP-340 scheme an address format signs raw payloads with, by its name in messages: none for ECDSA. */
function schnorrAddressKind(format: string | undefined): "Taproot (P2TR)" | "Spark" | undefined {
  if (isTaprootFormat(format)) return "Taproot (P2TR)";
  if (format === "ADDRESS_FORMAT_SPARK_MAINNET" || format === "ADDRESS_FORMAT_SPARK_REGTEST") return "Spark";
  return undefined;
}

/** The address format signWith named: the account's, or that of the private key address it gave. */
const signerAddressFormat = (signer: FoundSigner) =>
  signer.kind === "wallet_account" ? signer.account.address_format : signer.addressFormat;

/** The signer's keywords, and what the payload says to policies; a malformed request shows nothing
 * here and is refused by the activity itself, so the audit log records the refusal. */
async function payloadContext(
  trx: Tx,
  organizationId: string,
  signWith: string,
  payload: string | undefined,
  encoding: Encoding,
): Promise<Record<string, unknown>> {
  const context: Record<string, unknown> = {};
  try {
    Object.assign(context, signerKeywords(await findSigner(trx, organizationId, signWith)));
  } catch {
    return context;
  }
  try {
    if (payload !== undefined && (encoding === "PAYLOAD_ENCODING_EIP712" || encoding === "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION")) {
      const { keyword, value } = structuredPayload(payload, encoding);
      context[keyword] = value;
    }
  } catch {
    // refused with its reason when the activity runs
  }
  return context;
}

/**
 * The condition keywords of an Ethereum transaction about to be signed (`eth.tx`), for every activity
 * that signs one: sign_transaction and eth_send_transaction both come through here, so a policy reads
 * a transaction the same way whichever activity signs it. `from` is the address the signature will
 * recover to. Given the organization (and its transaction) so that keywords read from its stored data
 * (a contract's ABI) are added here for both.
 */
export async function ethereumTransactionKeywords(
  trx: Tx,
  organizationId: string,
  transaction: TransactionSerializable,
  from: string,
): Promise<Record<string, unknown>> {
  return {
    "eth.tx": { ...transactionKeyword(transaction, from), ...(await ethereumContractCallKeywords(trx, organizationId, transaction)) },
  };
}

/**
 * The condition keywords of a Solana transaction about to be signed (`solana.tx`), for every activity
 * that signs one: sign_transaction and sol_send_transaction both come through here. `keyword` is
 * `solanaKeyword` of the wire transaction whose message is signed (parsed by the caller, whose
 * errors it maps); the organization's uploaded IDLs decode its calls.
 */
export async function solanaTransactionKeywords(
  trx: Tx,
  organizationId: string,
  keyword: ReturnType<typeof solanaKeyword>,
): Promise<Record<string, unknown>> {
  return { "solana.tx": await withParsedInstructions(trx, organizationId, keyword) };
}

async function signerFor(ctx: ActivityContext, signWith: string) {
  const signer = await findSigner(ctx.trx, ctx.organizationId, signWith);
  return { signer, privateKey: openSigner(ctx.env.keyring, signer) };
}

export const signingOperations = [
  defineActivity({
    name: "sign_raw_payload",
    summary: "Sign one payload (hex or UTF-8 text, EIP-712 typed data, an EIP-7702 authorization) with a wallet account or private key.",
    resource: "PRIVATE_KEY",
    action: "SIGN",
    leavesOrganizationUnchanged: true,
    readsAhead: (p, organizationId) => signerReadsAhead(organizationId, signWithOf(p)),
    policyParameters: (p) => ({ hash_function: p.hashFunction, encoding: p.encoding }),
    policyContext: (trx, organizationId, p) => payloadContext(trx, organizationId, signWithOf(p), p.payload, p.encoding),
    async execute(ctx, p) {
      const { signer, privateKey } = await signerFor(ctx, signWithOf(p));
      return { ...(await signPayload(ctx.env.signatures, signer, privateKey, p.payload, p.encoding, p.hashFunction, "payload")) };
    },
  }),

  defineActivity({
    name: "sign_raw_payloads",
    summary: "Sign several payloads with one key, in one activity.",
    resource: "PRIVATE_KEY",
    action: "SIGN",
    leavesOrganizationUnchanged: true,
    readsAhead: (p, organizationId) => signerReadsAhead(organizationId, p.signWith),
    policyParameters: (p) => ({ hash_function: p.hashFunction, encoding: p.encoding }),
    policyContext: (trx, organizationId, p) => payloadContext(trx, organizationId, p.signWith, undefined, p.encoding),
    async execute(ctx, p) {
      if (p.payloads.length === 0) throw serviceError("REQUEST_INVALID", "payloads must list at least one payload");
      requireAtMost(p.payloads, "payloads");
      // Policies judge one activity; typed data and authorizations must each be seen by them.
      if (p.encoding === "PAYLOAD_ENCODING_EIP712" || p.encoding === "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION") {
        throw serviceError(
          "REQUEST_INVALID",
          `${p.encoding} payloads are signed one at a time with sign_raw_payload, so that policies see each one`,
        );
      }
      const { signer, privateKey } = await signerFor(ctx, p.signWith);
      return {
        signatures: await Promise.all(
          p.payloads.map((payload, i) =>
            signPayload(ctx.env.signatures, signer, privateKey, payload, p.encoding, p.hashFunction, `payloads[${i}]`),
          ),
        ),
      };
    },
  }),

  defineActivity({
    name: "sign_transaction",
    summary:
      "Sign a chain transaction: Ethereum (RLP hex, every envelope type), Solana (wire transaction hex), Bitcoin (PSBT hex), " +
      "Tron (raw_data hex) or Tempo (type 0x76 hex).",
    resource: "PRIVATE_KEY",
    action: "SIGN",
    leavesOrganizationUnchanged: true,
    readsAhead: (p, organizationId) => signerReadsAhead(organizationId, signWithOf(p)),
    policyParameters: (p) => ({ type: p.type }),
    // The spec records V2's intent under signTransactionIntent with the key in `privateKeyId`; the
    // swagger's signTransactionIntentV2 has `signWith`. Both are kept, so either reader finds it.
    intentOf: (p) => (p.signWith !== undefined ? { ...p, privateKeyId: p.signWith } : { ...p }),
    async policyContext(trx, organizationId, p) {
      const context = await payloadContext(trx, organizationId, signWithOf(p), undefined, "PAYLOAD_ENCODING_HEXADECIMAL");
      try {
        const signer = await findSigner(trx, organizationId, signWithOf(p));
        // The address the signature will recover to, however the key was named (address or id).
        const from =
          signer.curve === "CURVE_SECP256K1"
            ? address("CURVE_SECP256K1", "ADDRESS_FORMAT_ETHEREUM", Buffer.from(signer.publicKey, "hex"))
            : "";
        if (p.type === "TRANSACTION_TYPE_ETHEREUM")
          Object.assign(
            context,
            await ethereumTransactionKeywords(trx, organizationId, parseUnsignedTransaction(p.unsignedTransaction).transaction, from),
          );
        if (p.type === "TRANSACTION_TYPE_SOLANA")
          Object.assign(context, await solanaTransactionKeywords(trx, organizationId, solanaKeyword(p.unsignedTransaction)));
        if (p.type === "TRANSACTION_TYPE_BITCOIN") {
          context["bitcoin.tx"] = parsePsbt(p.unsignedTransaction, signerAddresses(signer), signWithOf(p)).keyword;
        }
        if (p.type === "TRANSACTION_TYPE_TRON") context["tron.tx"] = parseTronTransaction(p.unsignedTransaction).keyword;
        if (p.type === "TRANSACTION_TYPE_TEMPO")
          context["tempo.tx"] = tempoKeyword(await parseTempoTransaction(p.unsignedTransaction), from);
      } catch {
        // refused with its reason when the activity runs
      }
      return context;
    },
    async execute(ctx, p) {
      const { signer, privateKey } = await signerFor(ctx, signWithOf(p));
      if (p.type === "TRANSACTION_TYPE_ETHEREUM") {
        if (signer.curve !== "CURVE_SECP256K1")
          throw serviceError(
            "REQUEST_INVALID",
            `Ethereum transactions are signed with secp256k1 keys, and ${signWithOf(p)} is ${signer.curve}`,
          );
        const { transaction, digest } = callerError("unsignedTransaction", () => parseUnsignedTransaction(p.unsignedTransaction));
        const signature = await ctx.env.signatures.signDigest("CURVE_SECP256K1", privateKey, digest);
        return {
          signedTransaction: serializeSigned(transaction, { r: signature.r, s: signature.s, recovery: Number.parseInt(signature.v, 16) }),
        };
      }
      if (p.type === "TRANSACTION_TYPE_SOLANA") {
        if (signer.curve !== "CURVE_ED25519")
          throw serviceError(
            "REQUEST_INVALID",
            `Solana transactions are signed with ed25519 keys, and ${signWithOf(p)} is ${signer.curve}`,
          );
        // What policies were shown must be what is signed: a message they could not read is refused.
        callerError("unsignedTransaction", () => solanaKeyword(p.unsignedTransaction));
        return {
          signedTransaction: await callerErrorLater(
            "unsignedTransaction",
            signSolanaTransaction(p.unsignedTransaction, signer.publicKey, (message) =>
              ctx.env.signatures.signEd25519(privateKey, message),
            ),
          ),
        };
      }
      if (p.type === "TRANSACTION_TYPE_BITCOIN") {
        if (signer.curve !== "CURVE_SECP256K1")
          throw serviceError(
            "REQUEST_INVALID",
            `Bitcoin transactions are signed with secp256k1 keys, and ${signWithOf(p)} is ${signer.curve}`,
          );
        // Parsed by the function that built bitcoin.tx for the policies, and signed from that parse.
        const parsed = callerError("unsignedTransaction", () => parsePsbt(p.unsignedTransaction, signerAddresses(signer), signWithOf(p)));
        return { signedTransaction: callerError("unsignedTransaction", () => signPsbt(parsed, privateKey, signWithOf(p))) };
      }
      if (p.type === "TRANSACTION_TYPE_TRON") {
        if (signer.curve !== "CURVE_SECP256K1")
          throw serviceError(
            "REQUEST_INVALID",
            `Tron transactions are signed with secp256k1 keys, and ${signWithOf(p)} is ${signer.curve}`,
          );
        // Parsed by the function that built tron.tx for the policies; the signature is over sha256 of the very bytes read.
        const parsed = callerError("unsignedTransaction", () => parseTronTransaction(p.unsignedTransaction));
        const signature = await ctx.env.signatures.signDigest("CURVE_SECP256K1", privateKey, parsed.digest);
        return {
          signedTransaction: serializeSignedTron(parsed, { r: signature.r, s: signature.s, recovery: Number.parseInt(signature.v, 16) }),
        };
      }
      if (p.type === "TRANSACTION_TYPE_TEMPO") {
        if (signer.curve !== "CURVE_SECP256K1")
          throw serviceError(
            "REQUEST_INVALID",
            `Tempo transactions are signed with secp256k1 keys, and ${signWithOf(p)} is ${signer.curve}`,
          );
        const parsed = await callerErrorLater("unsignedTransaction", parseTempoTransaction(p.unsignedTransaction));
        const signature = await ctx.env.signatures.signDigest("CURVE_SECP256K1", privateKey, parsed.digest);
        return {
          signedTransaction: serializeSignedTempo(parsed, { r: signature.r, s: signature.s, recovery: Number.parseInt(signature.v, 16) }),
        };
      }
      throw serviceError(
        "TRANSACTION_TYPE_UNSUPPORTED",
        `${String(p.type)} is not a transaction type this server signs (supported: TRANSACTION_TYPE_ETHEREUM, TRANSACTION_TYPE_SOLANA, ` +
          "TRANSACTION_TYPE_BITCOIN, TRANSACTION_TYPE_TRON, TRANSACTION_TYPE_TEMPO)",
      );
    },
  }),
];
