// Tron: an unsigned transaction in (the hex of its protobuf `Transaction.raw`, tronweb's `raw_data_hex`,
// as the product's examples send it), the signed `Transaction` out (raw_data and one signature: what
// tronweb's sendHexTransaction and a node's wallet/broadcasthex take). Also `tron.tx` for policies,
// with the product's field names, read from the very bytes that are signed.
//
// protobufjs decodes and encodes; the message shapes below are java-tron's protocol (core/Tron.proto and
// core/contract/*.proto), declared here as the subset a policy reads: field numbers and types are the
// protocol's, and test/tron.test.ts reads each contract type from bytes tronweb serialized with its compiled
// copy of the same protos. A transaction is accepted only when encoding what was decoded gives back its
// exact bytes, so no byte that is signed (an unknown field, a second spelling of a known one) goes unseen
// by the policies.
import { createRequire } from "node:module";
import type protobuf from "protobufjs";
import { createBase58check, hex } from "@scure/base";
import { sha256 } from "@noble/hashes/sha2.js";

export class TronError extends Error {
  override name = "TronError";
}

const SCHEMA = `
syntax = "proto3";
package protocol;
message Any { string type_url = 1; bytes value = 2; }
message AccountId { bytes name = 1; bytes address = 2; }
message authority { AccountId account = 1; bytes permission_name = 2; }
message Key { bytes address = 1; int64 weight = 2; }
message Permission {
  enum PermissionType { Owner = 0; Witness = 1; Active = 2; }
  PermissionType type = 1; int32 id = 2; string permission_name = 3; int64 threshold = 4; int32 parent_id = 5;
  bytes operations = 6; repeated Key keys = 7;
}
enum ResourceCode { BANDWIDTH = 0; ENERGY = 1; TRON_POWER = 2; }
message Contract {
  enum ContractType {
    AccountCreateContract = 0; TransferContract = 1; TransferAssetContract = 2; VoteAssetContract = 3;
    VoteWitnessContract = 4; WitnessCreateContract = 5; AssetIssueContract = 6; WitnessUpdateContract = 8;
    ParticipateAssetIssueContract = 9; AccountUpdateContract = 10; FreezeBalanceContract = 11;
    UnfreezeBalanceContract = 12; WithdrawBalanceContract = 13; UnfreezeAssetContract = 14; UpdateAssetContract = 15;
    ProposalCreateContract = 16; ProposalApproveContract = 17; ProposalDeleteContract = 18; SetAccountIdContract = 19;
    CustomContract = 20; CreateSmartContract = 30; TriggerSmartContract = 31; GetContract = 32;
    UpdateSettingContract = 33; ExchangeCreateContract = 41; ExchangeInjectContract = 42; ExchangeWithdrawContract = 43;
    ExchangeTransactionContract = 44; UpdateEnergyLimitContract = 45; AccountPermissionUpdateContract = 46;
    ClearABIContract = 48; UpdateBrokerageContract = 49; ShieldedTransferContract = 51; MarketSellAssetContract = 52;
    MarketCancelOrderContract = 53; FreezeBalanceV2Contract = 54; UnfreezeBalanceV2Contract = 55;
    WithdrawExpireUnfreezeContract = 56; DelegateResourceContract = 57; UnDelegateResourceContract = 58;
    CancelAllUnfreezeV2Contract = 59;
  }
  ContractType type = 1; Any parameter = 2; bytes provider = 3; bytes ContractName = 4; int32 Permission_id = 5;
}
message TransactionRaw {
  bytes ref_block_bytes = 1; int64 ref_block_num = 3; bytes ref_block_hash = 4; int64 expiration = 8;
  repeated authority auths = 9; bytes data = 10; repeated Contract contract = 11; bytes scripts = 12;
  int64 timestamp = 14; int64 fee_limit = 18;
}
// Transaction with raw_data kept as the bytes that were signed, so the answer carries them unchanged.
message SignedTransaction { bytes raw_data = 1; repeated bytes signature = 2; }
message TransferContract { bytes owner_address = 1; bytes to_address = 2; int64 amount = 3; }
message TriggerSmartContract {
  bytes owner_address = 1; bytes contract_address = 2; int64 call_value = 3; bytes data = 4;
  int64 call_token_value = 5; int64 token_id = 6;
}
message FreezeBalanceV2Contract { bytes owner_address = 1; int64 frozen_balance = 2; ResourceCode resource = 3; }
message UnfreezeBalanceV2Contract { bytes owner_address = 1; int64 unfreeze_balance = 2; ResourceCode resource = 3; }
message DelegateResourceContract {
  bytes owner_address = 1; ResourceCode resource = 2; int64 balance = 3; bytes receiver_address = 4; bool lock = 5;
  int64 lock_period = 6;
}
message UnDelegateResourceContract { bytes owner_address = 1; ResourceCode resource = 2; int64 balance = 3; bytes receiver_address = 4; }
message AccountPermissionUpdateContract {
  bytes owner_address = 1; Permission owner = 2; Permission witness = 3; repeated Permission actives = 4;
}
`;

// Loaded, and the schema compiled, on the first Tron transaction rather than at every process start.
const requireFromHere = createRequire(import.meta.url);
let compiled: ReturnType<typeof compile> | undefined;
function compile() {
  const root = (requireFromHere("protobufjs") as typeof protobuf).parse(SCHEMA, { keepCase: true }).root;
  return {
    type: (name: string) => root.lookupType(`protocol.${name}`),
    contractTypes: root.lookupEnum("protocol.Contract.ContractType").valuesById,
    resources: root.lookupEnum("protocol.ResourceCode").valuesById,
    permissionTypes: root.lookupEnum("protocol.Permission.PermissionType").valuesById,
  };
}
const schema = () => (compiled ??= compile());

/** Contracts whose parameters policies read: the ones the product's policy engine supports (tron.mdx). */
const READ_CONTRACTS = new Set([
  "TransferContract",
  "TriggerSmartContract",
  "DelegateResourceContract",
  "UnDelegateResourceContract",
  "FreezeBalanceV2Contract",
  "UnfreezeBalanceV2Contract",
  "AccountPermissionUpdateContract",
]);
const TYPE_URL_PREFIX = "type.googleapis.com/protocol.";
const MAX_TRANSACTION_BYTES = 512 * 1024;

const base58check = createBase58check(sha256);
// Plain objects: 64-bit integers as decimal strings (exact), bytes as Uint8Array, enums as numbers.
const TO_OBJECT = { longs: String, enums: Number, bytes: Array, defaults: true, arrays: true } as const;
type Decoded = Record<string, unknown>;

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);
const bytesOf = (value: unknown) => Uint8Array.from((value as number[] | Uint8Array | undefined) ?? []);
const int = (value: unknown) => BigInt((value as string | number | undefined) ?? 0);
const hexOf = (value: unknown) => hex.encode(bytesOf(value));

/** Decodes `bytes` as `message` and holds them to their canonical encoding (see the header). */
function decodeExactly(message: protobuf.Type, bytes: Uint8Array, what: string): Decoded {
  let decoded: protobuf.Message;
  try {
    decoded = message.decode(bytes);
  } catch {
    // protobufjs's own words name its reader ("index out of range: 5 + 10 > 12").
    throw new TronError(
      `${what} is not a protobuf ${message.name}: its bytes do not decode as protobuf (a length runs past the end, ` +
        "or a field has a wire type protobuf does not have)",
    );
  }
  if (!same(message.encode(decoded).finish(), bytes))
    throw new TronError(
      `${what} holds fields or encodings this server does not read (not in java-tron's ${message.name} as policies see it): ` +
        "send the transaction as tronweb or a node builds it",
    );
  return message.toObject(decoded, TO_OBJECT) as Decoded;
}

/** A Tron address as base58check ("T…"): 21 bytes, the 0x41 prefix and the account hash. Empty stays empty. */
function addressOf(value: unknown, what: string): string {
  const bytes = bytesOf(value);
  if (bytes.length === 0) return "";
  if (bytes.length !== 21 || bytes[0] !== 0x41) throw new TronError(`${what} is not a Tron address (21 bytes beginning 0x41)`);
  return base58check.encode(bytes);
}

const EMPTY_PERMISSION = { type: "", id: 0n, permission_name: "", threshold: 0n, parent_id: 0n, operations: "", keys: [] };

function permissionOf(value: unknown, what: string): Record<string, unknown> {
  if (!value) return EMPTY_PERMISSION;
  const p = value as Decoded;
  return {
    type: schema().permissionTypes[p.type as number] ?? String(p.type),
    id: int(p.id),
    permission_name: String(p.permission_name ?? ""),
    threshold: int(p.threshold),
    parent_id: int(p.parent_id),
    operations: hexOf(p.operations),
    keys: ((p.keys as Decoded[]) ?? []).map((k, i) => ({
      address: addressOf(k.address, `${what}.keys[${i}].address`),
      weight: int(k.weight),
    })),
  };
}

/** `TronContract` of the policy language: every field present, those of other contract types at their zero value. */
function contractKeyword(contract: Decoded, index: number): Record<string, unknown> {
  const name = schema().contractTypes[contract.type as number];
  const where = `contract[${index}]`;
  if (name === undefined) throw new TronError(`${where} has contract type ${String(contract.type)}, which java-tron does not define`);
  const parameter = (contract.parameter ?? {}) as Decoded;
  const typeUrl = String(parameter.type_url ?? "");
  if (typeUrl !== `${TYPE_URL_PREFIX}${name}`)
    throw new TronError(`${where} is a ${name} whose parameter is typed ${JSON.stringify(typeUrl)}, not ${TYPE_URL_PREFIX}${name}`);
  const keyword: Record<string, unknown> = {
    type: name,
    permission_id: int(contract.Permission_id),
    owner_address: "",
    to_address: "",
    amount: 0n,
    contract_address: "",
    call_value: 0n,
    data: "",
    call_token_value: 0n,
    token_id: 0n,
    resource: "",
    balance: 0n,
    receiver_address: "",
    lock: false,
    lock_period: 0n,
    frozen_balance: 0n,
    unfreeze_balance: 0n,
    owner: EMPTY_PERMISSION,
    witness: EMPTY_PERMISSION,
    actives: [],
  };
  if (!READ_CONTRACTS.has(name)) {
    // Signed as built; policies see its type and permission only (the product reads no other type either).
    return keyword;
  }
  const p = decodeExactly(schema().type(name), bytesOf(parameter.value), `${where} (${name})`);
  const resource = () => schema().resources[p.resource as number] ?? String(p.resource);
  keyword.owner_address = addressOf(p.owner_address, `${where}.owner_address`);
  switch (name) {
    case "TransferContract":
      return { ...keyword, to_address: addressOf(p.to_address, `${where}.to_address`), amount: int(p.amount) };
    case "TriggerSmartContract":
      return {
        ...keyword,
        contract_address: addressOf(p.contract_address, `${where}.contract_address`),
        call_value: int(p.call_value),
        data: hexOf(p.data),
        call_token_value: int(p.call_token_value),
        token_id: int(p.token_id),
      };
    case "FreezeBalanceV2Contract":
      return { ...keyword, frozen_balance: int(p.frozen_balance), resource: resource() };
    case "UnfreezeBalanceV2Contract":
      return { ...keyword, unfreeze_balance: int(p.unfreeze_balance), resource: resource() };
    case "DelegateResourceContract":
      return {
        ...keyword,
        resource: resource(),
        balance: int(p.balance),
        receiver_address: addressOf(p.receiver_address, `${where}.receiver_address`),
        lock: p.lock === true,
        lock_period: int(p.lock_period),
      };
    case "UnDelegateResourceContract":
      return {
        ...keyword,
        resource: resource(),
        balance: int(p.balance),
        receiver_address: addressOf(p.receiver_address, `${where}.receiver_address`),
      };
    default: // AccountPermissionUpdateContract
      return {
        ...keyword,
        owner: permissionOf(p.owner, `${where}.owner`),
        witness: permissionOf(p.witness, `${where}.witness`),
        actives: ((p.actives as Decoded[]) ?? []).map((a, i) => permissionOf(a, `${where}.actives[${i}]`)),
      };
  }
}

export interface ParsedTronTransaction {
  /** The bytes of raw_data, exactly as sent: what is hashed and what the answer carries. */
  raw: Uint8Array;
  /** sha256(raw): the transaction id, and what the key signs. */
  digest: Uint8Array;
  /** `tron.tx` of the policy language. */
  keyword: Record<string, unknown>;
}

/** Reads the hex of an unsigned Tron `Transaction.raw` (tronweb's `raw_data_hex`). */
export function parseTronTransaction(unsignedHex: string): ParsedTronTransaction {
  const text = unsignedHex.startsWith("0x") ? unsignedHex.slice(2) : unsignedHex;
  if (!/^([0-9a-fA-F]{2})+$/.test(text))
    throw new TronError("unsignedTransaction must be the hex of a Tron transaction's raw_data (tronweb's raw_data_hex)");
  if (text.length / 2 > MAX_TRANSACTION_BYTES) throw new TronError(`a Tron transaction is at most ${MAX_TRANSACTION_BYTES} bytes`);
  const raw = hex.decode(text.toLowerCase());
  const decoded = decodeExactly(schema().type("TransactionRaw"), raw, "unsignedTransaction");
  const contracts = (decoded.contract as Decoded[]) ?? [];
  // java-tron executes exactly one contract per transaction and refuses any other count.
  if (contracts.length !== 1) throw new TronError(`a Tron transaction carries exactly one contract, this one has ${contracts.length}`);
  return {
    raw,
    digest: sha256(raw),
    keyword: {
      ref_block_bytes: hexOf(decoded.ref_block_bytes),
      ref_block_hash: hexOf(decoded.ref_block_hash),
      expiration: int(decoded.expiration),
      timestamp: int(decoded.timestamp),
      data: hexOf(decoded.data),
      fee_limit: int(decoded.fee_limit),
      contract: contracts.map(contractKeyword),
    },
  };
}

/** The signed transaction's hex: raw_data unchanged and the 65-byte signature r ‖ s ‖ v, v = 27 + recovery id as tronweb writes it. */
export function serializeSignedTron(parsed: ParsedTronTransaction, signature: { r: string; s: string; recovery: number }): string {
  const bytes = hex.decode(`${signature.r}${signature.s}${(27 + signature.recovery).toString(16)}`);
  const signed = schema().type("SignedTransaction");
  return hex.encode(signed.encode(signed.create({ raw_data: parsed.raw, signature: [bytes] })).finish());
}
