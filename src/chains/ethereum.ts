// Ethereum: unsigned transactions in (RLP hex; legacy, EIP-2930, EIP-1559, EIP-4844, EIP-7702),
// signed ones out, EIP-712 typed data and EIP-7702 authorizations hashed — all by viem. Also what
// policies see of them (`eth.tx`, `eth.eip_712`), with the product's field names.
import { hashTypedData, keccak256, parseTransaction, serializeTransaction, type Hex, type TransactionSerializable } from "viem";
import { hashAuthorization } from "viem/utils";

export class EthereumError extends Error {
  override name = "EthereumError";
}

const hexOf = (text: string): Hex => (text.startsWith("0x") ? text : `0x${text}`) as Hex;

export interface ParsedEthereumTransaction {
  transaction: TransactionSerializable;
  /** keccak256 of the unsigned serialization: what the key signs. */
  digest: Uint8Array;
}

export function parseUnsignedTransaction(unsigned: string): ParsedEthereumTransaction {
  if (!/^(0x)?([0-9a-fA-F]{2})+$/.test(unsigned)) throw new EthereumError("unsignedTransaction must be the hex of an RLP-encoded Ethereum transaction");
  let transaction: TransactionSerializable;
  try {
    transaction = parseTransaction(hexOf(unsigned)) as TransactionSerializable;
  } catch (error) {
    throw new EthereumError(`unsignedTransaction is not an Ethereum transaction viem can parse: ${(error as Error).message.split("\n")[0]}`);
  }
  if ("r" in transaction && transaction.r) throw new EthereumError("unsignedTransaction is already signed");
  // An EIP-4844 transaction may come in its network wrapper (blobs, commitments, proofs): the
  // signature covers the transaction alone.
  for (const field of ["sidecars", "blobs", "kzg"] as const) delete (transaction as Record<string, unknown>)[field];
  const digest = Buffer.from(keccak256(serializeTransaction(transaction)).slice(2), "hex");
  return { transaction, digest };
}

/** The signed serialization, without 0x (the form the clients expect). EIP-155 v for legacy. */
export function serializeSigned(transaction: TransactionSerializable, signature: { r: string; s: string; recovery: number }): string {
  const signed = serializeTransaction(transaction, {
    r: `0x${signature.r}`,
    s: `0x${signature.s}`,
    yParity: signature.recovery,
    ...(transaction.type === "legacy" || transaction.type === undefined
      ? { v: transaction.chainId !== undefined ? BigInt(transaction.chainId) * 2n + 35n + BigInt(signature.recovery) : 27n + BigInt(signature.recovery) }
      : {}),
  });
  return signed.slice(2);
}

const TYPE_NAMES: Record<string, string> = { legacy: "LEGACY", eip2930: "TYPE_1", eip1559: "TYPE_2", eip4844: "TYPE_3", eip7702: "TYPE_4" };

/** `eth.tx` of the policy language. */
export function transactionKeyword(transaction: TransactionSerializable, from: string): Record<string, unknown> {
  const t = transaction as TransactionSerializable & Record<string, unknown>;
  const big = (v: unknown) => (typeof v === "bigint" ? v : typeof v === "number" ? BigInt(v) : 0n);
  const maxFee = big(t.maxFeePerGas);
  return {
    from: from.toLowerCase(),
    to: typeof t.to === "string" ? t.to.toLowerCase() : "",
    data: typeof t.data === "string" ? t.data : "0x",
    value: big(t.value),
    gas: big(t.gas),
    // The product fills gas_price with max_fee_per_gas for typed transactions.
    gas_price: t.gasPrice !== undefined ? big(t.gasPrice) : maxFee,
    chain_id: big(t.chainId),
    nonce: big(t.nonce),
    max_fee_per_gas: maxFee,
    max_priority_fee_per_gas: big(t.maxPriorityFeePerGas),
    max_fee_per_blob_gas: big(t.maxFeePerBlobGas),
    type: TYPE_NAMES[String(t.type ?? "legacy")] ?? String(t.type),
  };
}

interface TypedData {
  domain?: Record<string, unknown>;
  types: Record<string, { name: string; type: string }[]>;
  primaryType: string;
  message: Record<string, unknown>;
}

function parseJson(payload: string, what: string): unknown {
  const text = /^(0x)?([0-9a-fA-F]{2})+$/.test(payload) && !payload.trim().startsWith("{") ? Buffer.from(payload.replace(/^0x/, ""), "hex").toString("utf8") : payload;
  try {
    return JSON.parse(text);
  } catch {
    throw new EthereumError(`payload must be ${what} as JSON`);
  }
}

/** Parses EIP-712 typed data as the clients send it (chainId as a number, a decimal or a hex string). */
export function parseTypedData(payload: string): TypedData {
  const data = parseJson(payload, "EIP-712 typed data") as Partial<TypedData>;
  if (!data || typeof data !== "object" || typeof data.primaryType !== "string" || typeof data.types !== "object" || typeof data.message !== "object") {
    throw new EthereumError("EIP-712 payload needs types, primaryType, domain and message");
  }
  const domain = { ...(data.domain ?? {}) };
  if (domain.chainId !== undefined) domain.chainId = BigInt(domain.chainId as string | number);
  return { domain, types: data.types!, primaryType: data.primaryType, message: data.message as Record<string, unknown> };
}

export function typedDataDigest(data: TypedData): Uint8Array {
  try {
    return Buffer.from(hashTypedData(data as Parameters<typeof hashTypedData>[0]).slice(2), "hex");
  } catch (error) {
    throw new EthereumError(`EIP-712 payload does not hash: ${(error as Error).message.split("\n")[0]}`);
  }
}

/** `eth.eip_712`: numbers become numbers, addresses lower case, as the product's policies expect. */
export function typedDataKeyword(data: TypedData): Record<string, unknown> {
  const convert = (value: unknown, type: string): unknown => {
    if (type.endsWith("]")) return Array.isArray(value) ? value.map((v) => convert(v, type.slice(0, type.lastIndexOf("[")))) : value;
    if (/^u?int\d*$/.test(type) && (typeof value === "string" || typeof value === "number" || typeof value === "bigint")) return BigInt(value);
    if (type === "address" && typeof value === "string") return value.toLowerCase();
    const fields = data.types[type];
    if (fields && value && typeof value === "object") return Object.fromEntries(fields.map((f) => [f.name, convert((value as Record<string, unknown>)[f.name], f.type)]));
    return value;
  };
  // Only domain fields the signature covers: when the request declares EIP712Domain, viem hashes
  // exactly those, so a field left out of it must not be shown to policies as if it were signed.
  const declared = data.types.EIP712Domain?.map((f) => f.name);
  const domain = Object.fromEntries(Object.entries(data.domain ?? {}).filter(([k]) => !declared || declared.includes(k)));
  return {
    primary_type: data.primaryType,
    domain: {
      ...(domain.name !== undefined ? { name: String(domain.name) } : {}),
      ...(domain.version !== undefined ? { version: String(domain.version) } : {}),
      ...(domain.chainId !== undefined ? { chain_id: BigInt(domain.chainId as bigint) } : {}),
      ...(domain.verifyingContract !== undefined ? { verifying_contract: String(domain.verifyingContract).toLowerCase() } : {}),
    },
    message: convert(data.message, data.primaryType),
  };
}

/** EIP-7702: keccak256(0x05 ‖ rlp([chainId, address, nonce])). */
export function authorizationDigest(payload: string): { digest: Uint8Array; keyword: Record<string, unknown> } {
  const auth = parseJson(payload, "an EIP-7702 authorization {address, chainId, nonce}") as { address?: string; contractAddress?: string; chainId?: number | string; nonce?: number | string };
  const address = auth?.address ?? auth?.contractAddress;
  if (typeof address !== "string" || auth.chainId === undefined || auth.nonce === undefined) throw new EthereumError("EIP-7702 payload needs address, chainId and nonce");
  const digest = hashAuthorization({ contractAddress: address as Hex, chainId: Number(auth.chainId), nonce: Number(auth.nonce) });
  return { digest: Buffer.from(digest.slice(2), "hex"), keyword: { address: address.toLowerCase(), chain_id: BigInt(auth.chainId), nonce: BigInt(auth.nonce) } };
}
