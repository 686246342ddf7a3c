// Smart contract interfaces: an Ethereum ABI or a Solana IDL an organization uploads for one contract
// address (or program id), so that policies can read what a transaction asks of that contract
// (contract-calls.ts). Each belongs to the organization that uploaded it; sub-organizations have
// their own. An interface cannot be changed, only deleted and uploaded again.
import { createHash } from "node:crypto";
import type { Selectable } from "kysely";
import { isAddress as isEthereumAddress, type Abi } from "viem";
import { isAddress as isSolanaAddress } from "@solana/kit";
import { serviceError } from "../../errors.js";
import type { Db, Tx } from "../../store/handles.js";
import type { SmartContractInterfacesTable } from "../../store/schema.js";
import { AbiError, validateAbi } from "../../chains/ethereum-abi.js";
import { IdlError, validateIdl, type Idl } from "../../chains/solana-idl.js";
import { defineActivity, defineQuery } from "../../registry/registry.js";
import { timestamp } from "../resources.js";
import { newId } from "../../store/ids.js";
import { requireName } from "../identity/credentials.js";

export const ETHEREUM = "SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM";
export const SOLANA = "SMART_CONTRACT_INTERFACE_TYPE_SOLANA";
export type InterfaceType = typeof ETHEREUM | typeof SOLANA;

/** The product's limit ("Limited to 400kb"), read as 400 KiB of UTF-8 so that nothing it accepts is refused. */
export const MAX_INTERFACE_BYTES = 400 * 1024;

/**
 * The address as stored and matched: an Ethereum address in lower case (any letter case names it;
 * mixed case must be its EIP-55 checksum, as viem checks), a Solana program id exactly as written
 * (base58 is case-sensitive) and only if it is 32 bytes. Undefined when it is not one.
 */
export function canonicalAddress(type: InterfaceType, address: string): string | undefined {
  if (type === ETHEREUM) return isEthereumAddress(address, { strict: true }) ? address.toLowerCase() : undefined;
  return isSolanaAddress(address) ? address : undefined;
}

function parseInterface(type: InterfaceType, text: string): Abi | Idl {
  try {
    return type === ETHEREUM ? validateAbi(text) : validateIdl(text);
  } catch (error) {
    if (error instanceof AbiError || error instanceof IdlError) {
      const what = type === ETHEREUM ? "an Ethereum ABI" : "a Solana (Anchor) IDL";
      throw serviceError("SMART_CONTRACT_INTERFACE_INVALID", `smartContractInterface is not ${what}: ${error.message}`);
    }
    throw error;
  }
}

function render(row: Selectable<SmartContractInterfacesTable>) {
  return {
    organizationId: row.organization_id,
    smartContractInterfaceId: row.id,
    smartContractAddress: row.address,
    smartContractInterface: row.interface_json,
    type: row.type,
    label: row.label,
    notes: row.notes,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
  };
}

/** `smartContractInterfaceReferences` of get_organization: id, address and digest, oldest first. */
export async function interfaceReferences(db: Db | Tx, organizationId: string) {
  const rows = await db
    .selectFrom("smart_contract_interfaces")
    .select(["id", "address", "digest"])
    .where("organization_id", "=", organizationId)
    .orderBy("created_at")
    .orderBy("id")
    .execute();
  return rows.map((r) => ({ smartContractInterfaceId: r.id, smartContractAddress: r.address, digest: r.digest }));
}

export type FoundInterface =
  | { id: string; type: typeof ETHEREUM; address: string; abi: Abi }
  | { id: string; type: typeof SOLANA; address: string; idl: Idl };

// Interfaces never change, so one parsed by id and digest stays right; parsing 400 KB for every
// signature would cost milliseconds each. Bounded, oldest out.
const parsed = new Map<string, FoundInterface>();
const PARSED_LIMIT = 64;

/**
 * The organization's interface for this chain and address, parsed (an ABI for Ethereum, a prepared
 * IDL for Solana), or undefined. Ethereum addresses match in any letter case; Solana program ids
 * exactly. What signing policies and, later, revert-reason decoding read.
 */
export async function findContractInterface(
  db: Db | Tx,
  organizationId: string,
  type: typeof ETHEREUM,
  address: string,
): Promise<Extract<FoundInterface, { type: typeof ETHEREUM }> | undefined>;
export async function findContractInterface(
  db: Db | Tx,
  organizationId: string,
  type: typeof SOLANA,
  address: string,
): Promise<Extract<FoundInterface, { type: typeof SOLANA }> | undefined>;
export async function findContractInterface(
  db: Db | Tx,
  organizationId: string,
  type: InterfaceType,
  address: string,
): Promise<FoundInterface | undefined> {
  const canonical = type === ETHEREUM ? address.toLowerCase() : address;
  const row = await db
    .selectFrom("smart_contract_interfaces")
    .select(["id", "address", "interface_json", "digest"])
    .where("organization_id", "=", organizationId)
    .where("type", "=", type)
    .where("address", "=", canonical)
    .executeTakeFirst();
  if (!row) return undefined;
  const key = `${row.id}:${row.digest}`;
  const hit = parsed.get(key);
  if (hit) return hit;
  // Validated when uploaded; validated again here, so what policies see never rests on a shortcut.
  const found: FoundInterface =
    type === ETHEREUM
      ? { id: row.id, type, address: row.address, abi: validateAbi(row.interface_json) }
      : { id: row.id, type, address: row.address, idl: validateIdl(row.interface_json) };
  if (parsed.size >= PARSED_LIMIT) parsed.delete(parsed.keys().next().value!);
  parsed.set(key, found);
  return found;
}

async function requireInterface(db: Db | Tx, organizationId: string, id: string) {
  const row = await db
    .selectFrom("smart_contract_interfaces")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (!row) throw serviceError("SMART_CONTRACT_INTERFACE_NOT_FOUND", `smart contract interface ${id} not found in this organization`);
  return row;
}

export const contractInterfaceOperations = [
  defineActivity({
    name: "create_smart_contract_interface",
    summary:
      "Upload an Ethereum ABI or a Solana (Anchor) IDL for one contract address or program id (at most 400 KiB, checked when uploaded), " +
      "so that policies read the calls made to it (`eth.tx.function_name`, `.contract_call_args`, `parsed_instruction_data`).",
    resource: "SMART_CONTRACT_INTERFACE",
    action: "CREATE",
    async execute(ctx, p) {
      const type = p.type as InterfaceType;
      const label = requireName(p.label, "label");
      const address = canonicalAddress(type, p.smartContractAddress);
      if (address === undefined)
        throw serviceError(
          "SMART_CONTRACT_ADDRESS_INVALID",
          type === ETHEREUM
            ? `smartContractAddress "${p.smartContractAddress.slice(0, 100)}" is not an Ethereum address: 0x and 40 hex digits (mixed case must be its EIP-55 checksum)`
            : `smartContractAddress "${p.smartContractAddress.slice(0, 100)}" is not a Solana program id: the base58 text of 32 bytes`,
        );
      const text = p.smartContractInterface;
      const bytes = Buffer.byteLength(text, "utf8");
      if (bytes > MAX_INTERFACE_BYTES)
        throw serviceError(
          "SMART_CONTRACT_INTERFACE_TOO_LARGE",
          `smartContractInterface has ${bytes} bytes; at most ${MAX_INTERFACE_BYTES} (400 KiB) are accepted: minify the JSON`,
        );
      parseInterface(type, text);
      const existing = await ctx.trx
        .selectFrom("smart_contract_interfaces")
        .select("id")
        .where("organization_id", "=", ctx.organizationId)
        .where("type", "=", type)
        .where("address", "=", address)
        .executeTakeFirst();
      if (existing)
        throw serviceError(
          "SMART_CONTRACT_INTERFACE_ALREADY_EXISTS",
          `smart contract interface ${existing.id} is already bound to ${address}: delete it first to upload another`,
        );
      const id = newId();
      await ctx.trx
        .insertInto("smart_contract_interfaces")
        .values({
          id,
          organization_id: ctx.organizationId,
          type,
          address,
          label,
          notes: p.notes ?? "",
          interface_json: text,
          digest: createHash("sha256").update(text, "utf8").digest("hex"),
          created_at: ctx.now,
          updated_at: ctx.now,
        })
        .execute();
      return { smartContractInterfaceId: id };
    },
  }),

  defineActivity({
    name: "delete_smart_contract_interface",
    summary: "Delete a smart contract interface: from then on, policies no longer see the calls to its address decoded.",
    resource: "SMART_CONTRACT_INTERFACE",
    action: "DELETE",
    async execute(ctx, p) {
      const row = await requireInterface(ctx.trx, ctx.organizationId, p.smartContractInterfaceId);
      await ctx.trx.deleteFrom("smart_contract_interfaces").where("id", "=", row.id).execute();
      return { smartContractInterfaceId: row.id };
    },
  }),

  defineQuery({
    name: "get_smart_contract_interface",
    summary: "One smart contract interface, with the ABI or IDL as uploaded.",
    async run(ctx, body) {
      return { smartContractInterface: render(await requireInterface(ctx.db, ctx.organizationId, body.smartContractInterfaceId)) };
    },
  }),

  defineQuery({
    name: "list_smart_contract_interfaces",
    summary: "Every smart contract interface of the organization, oldest first.",
    async run(ctx) {
      const rows = await ctx.db
        .selectFrom("smart_contract_interfaces")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return { smartContractInterfaces: rows.map(render) };
    },
  }),
];
