// What policies see of a call to a contract (or program) the organization has uploaded an interface
// for: `eth.tx.function_name`, `.function_signature`, `.contract_call_args`, and each Solana
// instruction's `parsed_instruction_data`. Every operation that shows policies a transaction (signing
// today, sending next) builds these here, from the transaction it parsed, so they always agree.
// Without an interface for the address, or when the data does not decode with it, the fields are
// absent: a policy reading them is OUTCOME_ERROR, which neither allows nor denies.
import type { Abi, TransactionSerializable } from "viem";
import type { Db, Tx } from "../../store/handles.js";
import { AbiError, decodeContractCall, type ContractCall } from "../../chains/ethereum-abi.js";
import { IdlError, decodeInstruction, newDecodeBudget } from "../../chains/solana-idl.js";
import { ETHEREUM, SOLANA, findContractInterface, type FoundInterface } from "./interfaces.js";
import { EthereumAddress } from "../../policy/types.js";

/** An interface stored before a change in what is accepted may no longer parse: then it decodes nothing. */
async function orNothing<T>(find: () => Promise<T | undefined>): Promise<T | undefined> {
  try {
    return await find();
  } catch (error) {
    if (error instanceof AbiError || error instanceof IdlError) return undefined;
    throw error;
  }
}

/** The ABI the organization uploaded for a contract, for decoding its revert reasons; none when there
 * is none or the stored one no longer passes the checks. */
export async function uploadedAbi(db: Db | Tx, organizationId: string, contractAddress: string): Promise<Abi | undefined> {
  return (await orNothing(() => findContractInterface(db, organizationId, ETHEREUM, contractAddress)))?.abi;
}

/**
 * The decoded call of an Ethereum transaction to a contract with an uploaded ABI (the fields to add to
 * `eth.tx`), or {} when there is none to show.
 */
export async function ethereumContractCallKeywords(
  db: Db | Tx,
  organizationId: string,
  transaction: TransactionSerializable,
): Promise<Partial<ContractCall>> {
  const to = transaction.to;
  const data = transaction.data;
  if (typeof to !== "string" || typeof data !== "string") return {};
  const found = await orNothing(() => findContractInterface(db, organizationId, ETHEREUM, to));
  if (!found) return {};
  // An `address` argument is an address to policies (compared in any letter case); other text is not.
  return decodeContractCall(found.abi, data, (hex) => new EthereumAddress(hex)) ?? {};
}

interface SolanaInstructionKeyword {
  program_key: string;
  accounts: Array<{ account_key: string }>;
  instruction_data_hex: string;
}

/**
 * `solana.tx` (as chains/solana.ts builds it) with `parsed_instruction_data` added to each instruction
 * whose program has an uploaded IDL and whose data the IDL reads.
 */
export async function withParsedInstructions(
  db: Db | Tx,
  organizationId: string,
  transaction: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const instructions = transaction.instructions as SolanaInstructionKeyword[];
  const programs = new Map<string, Extract<FoundInterface, { type: typeof SOLANA }> | undefined>();
  for (const program of new Set(instructions.map((i) => i.program_key)))
    programs.set(program, await orNothing(() => findContractInterface(db, organizationId, SOLANA, program)));
  // One budget for the whole transaction: many instructions cannot multiply what is read.
  const budget = newDecodeBudget();
  return {
    ...transaction,
    instructions: instructions.map((instruction) => {
      const found = programs.get(instruction.program_key);
      if (!found) return instruction;
      const data = Buffer.from(instruction.instruction_data_hex, "hex");
      const parsed = decodeInstruction(
        found.idl,
        data,
        instruction.accounts.map((a) => a.account_key),
        budget,
      );
      if (!parsed) return instruction;
      const { named_accounts, ...rest } = parsed;
      // Both spellings the product's docs use (named_account, named_accounts).
      return { ...instruction, parsed_instruction_data: { ...rest, named_account: named_accounts, named_accounts } };
    }),
  };
}
