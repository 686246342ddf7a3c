// The transaction keywords (eth.tx, eth.eip_712, solana.tx, bitcoin.tx) and the map / dynamic types they need:
// the product's documented example policies compile, and dynamic values are checked when they run.
import { describe, expect, it } from "vitest";
import "../src/operations/wallets/transaction-keywords.js";
import { PolicyEvaluationError, STEP_BUDGET, compileExpression } from "../src/policy/compile.js";
import { PolicySyntaxError } from "../src/policy/lexer.js";
import { rootValues } from "../src/policy/keywords.js";
import { PolicyTimestamp, type Value } from "../src/policy/types.js";

const NOW = Date.parse("2026-03-02T15:00:00Z");

const TX = {
  from: "0xfrom",
  to: "0x08d2b0a37f869ff76bacb5bab3278e26ab7067b7",
  data: "0xa9059cbb000000000000000000000000",
  value: 10n ** 17n,
  gas: 21000n,
  gas_price: 1n,
  chain_id: 11155111n,
  nonce: 2n,
  max_fee_per_gas: 1n,
  max_priority_fee_per_gas: 1n,
  max_fee_per_blob_gas: 0n,
  type: "TYPE_2",
  function_name: "executeBatch",
  function_signature: "0x34fcd5be",
  contract_call_args: {
    wad: 5n * 10n ** 17n,
    dst: "0x08d2b0a37F869FF76BACB5Bab3278E26ab7067B7",
    calls: [
      ["0xc0ffee", 0n, "0x"],
      ["0xc0ffee", 0n, "0x12"],
    ],
    recipients: ["0xa", "0xb"],
  },
} satisfies Record<string, Value>;

const EIP712 = {
  primary_type: "PermitBatchTransferFrom",
  domain: { name: "Permit2", version: "1", chain_id: 1n, verifying_contract: "0x000000000022d473030f116ddee9f6b43ac78ba3" },
  message: { permitted: [{ token: "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", amount: 50_000_000n }], nonce: 7n },
} satisfies Record<string, Value>;

const SOLANA = {
  account_keys: ["A", "B"],
  program_keys: ["11111111111111111111111111111111"],
  instructions: [
    {
      program_key: "11111111111111111111111111111111",
      accounts: [{ account_key: "A", signer: true, writable: true }],
      instruction_data_hex: "0200",
      address_table_lookups: [],
      parsed_instruction_data: {
        instruction_name: "transfer",
        discriminator: "02",
        named_account: { from: "A" },
        program_call_args: { lamports: 5000n },
      },
    },
  ],
  transfers: [{ from: "A", to: "B", amount: 5000n }],
  recent_blockhash: "hash",
  spl_transfers: [],
  address_table_lookups: [],
} satisfies Record<string, Value>;

const BITCOIN = {
  version: "2",
  inputs: [{ tx_id: "ab".repeat(32), vout: 1n, sequence: 4294967293n }],
  outputs: [
    {
      value: 150_000n,
      script_pubkey: "0014c0cebcd6c3d3ca8c75dc5ec62ebe55330ef910e2",
      address: "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu",
      address_type: "P2WPKH",
    },
    { value: 0n, script_pubkey: "6a05736967696c", address: "", address_type: "" },
  ],
  locktime: { amount: 0n, type: "Blocks" },
  fee: 2_500n,
} satisfies Record<string, Value>;

function evaluate(
  source: string,
  values: Record<string, unknown> = { "eth.tx": TX, "eth.eip_712": EIP712, "solana.tx": SOLANA, "bitcoin.tx": BITCOIN },
) {
  const run = compileExpression(source, "condition");
  return run({
    roots: rootValues({ ...values, "time.now": PolicyTimestamp.fromMillis(NOW) }),
    nowMs: NOW,
    locals: [],
    budget: { steps: STEP_BUDGET },
  });
}

describe("the product's documented transaction policies", () => {
  const TRUE = [
    "eth.tx.contract_call_args['wad'] < 1000000000000000000 && eth.tx.contract_call_args['dst'] == '0x08d2b0a37F869FF76BACB5Bab3278E26ab7067B7'",
    "eth.tx.function_name == 'executeBatch' && eth.tx.contract_call_args['calls'].count() == 2",
    "eth.tx.function_name == 'executeBatch' && eth.tx.contract_call_args['calls'].all(call, call[0] == '0xc0ffee' && call[1] == 0)",
    "eth.tx.contract_call_args['recipients'].all(addr, addr in ['0xa', '0xb', '0xc'])",
    "eth.tx.data[0..10] == '0xa9059cbb'",
    "eth.tx.chain_id == 11155111 && eth.tx.nonce <= 3 && eth.tx.value < 500000000000000000",
    "eth.eip_712.domain.name == 'Permit2' && eth.eip_712.primary_type == 'PermitBatchTransferFrom' && eth.eip_712.message['permitted'][0]['token'] == '0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48'",
    "eth.eip_712.message['permitted'].all(p, p['token'] == '0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48')",
    "eth.eip_712.message['permitted'].any(p, p['token'] == '0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48' && p['amount'] < 100000000)",
    "eth.eip_712.message['permitted'].count() <= 2 && eth.eip_712.domain.chain_id == 1",
    "solana.tx.transfers.all(transfer, transfer.from == 'A') && solana.tx.transfers[0].to == 'B'",
    "solana.tx.program_keys.all(p, p == '11111111111111111111111111111111')",
    "solana.tx.instructions[0].accounts[0].account_key == 'A' && solana.tx.instructions[0].instruction_data_hex == '0200'",
    "solana.tx.instructions[0].parsed_instruction_data.named_account['from'] == 'A' && solana.tx.instructions[0].parsed_instruction_data.program_call_args['lamports'] >= 5000",
    "solana.tx.address_table_lookups.count() == 0 && solana.tx.spl_transfers.count() == 0",
    "bitcoin.tx.outputs.all(o, o.value < 200000)",
    `bitcoin.tx.inputs.all(i, i.tx_id == '${"ab".repeat(32)}' && i.vout == 1)`,
    "bitcoin.tx.fee <= 10000 && !(bitcoin.tx.fee > 50000)",
    "bitcoin.tx.outputs.any(o, o.address == 'bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu' && o.value < 200000)",
    "bitcoin.tx.outputs.all(o, o.address in ['bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu', ''])",
    "bitcoin.tx.version == '2' && bitcoin.tx.locktime.type == 'Blocks' && bitcoin.tx.inputs[0].sequence == 4294967293",
    "bitcoin.tx.outputs.filter(o, o.address_type == '').all(o, o.script_pubkey[0..2] == '6a' && o.value == 0)",
  ];
  it.each(TRUE)("%s holds for the sample transaction", (source) => {
    expect(evaluate(source)).toBe(true);
  });

  it("reads false where the sample does not match", () => {
    expect(evaluate("eth.tx.contract_call_args['calls'].all(call, call[1] == 1)")).toBe(false);
    expect(evaluate("solana.tx.transfers.any(t, t.to == 'EVIL')")).toBe(false);
    expect(evaluate("bitcoin.tx.outputs.all(o, o.address == 'bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu')")).toBe(false);
    expect(evaluate("bitcoin.tx.outputs.any(o, o.value > 150000)")).toBe(false);
  });
});

describe("dynamic values are checked when the policy runs", () => {
  const ERRORS: [string, string][] = [
    ["eth.tx.contract_call_args['missing'] == 1", "missing key 'missing'"],
    ["eth.tx.contract_call_args['dst'] < 5", "cannot compare a string with a number"],
    ["eth.tx.contract_call_args['dst'].count() == 1", "expected a list, found a string"],
    ["eth.tx.contract_call_args['wad'][0] == 1", "expected a list, found a number"],
    ["eth.tx.contract_call_args['calls'][0]['to'] == 'x'", "cannot look up 'to' in a list"],
    ["eth.tx.contract_call_args['calls'][5][0] == 'x'", "index 5 is out of range"],
    ["eth.tx.contract_call_args['wad']", "expected a bool, found a number"],
  ];
  it.each(ERRORS)("%s fails with: %s", (source, message) => {
    let error: unknown;
    try {
      evaluate(source);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(PolicyEvaluationError);
    expect((error as Error).message).toContain(message);
  });

  it("a transaction keyword on an activity that has none is an evaluation error, not a type error", () => {
    expect(() => evaluate("eth.tx.to == '0x'", { activity: {} })).toThrow(PolicyEvaluationError);
  });
});

describe("maps and transaction keywords are still typed where they can be", () => {
  const REFUSED: [string, string][] = [
    ["eth.tx.contract_call_args[0] == 1", "a map is indexed by a string key"],
    ["eth.tx.recipient == 'x'", 'EthereumTransaction has no field "recipient"'],
    ["eth.tx.value == 'ten'", "cannot compare int with string"],
    ["solana.tx.transfers.count == 1", "has no fields"],
    ["eth.eip_712.domain.chain_id < 'x'", "compares two numbers or two timestamps"],
    ["bitcoin.tx.outputs.all(o, o.amount < 5)", 'BitcoinTxOutput has no field "amount"'],
    ["bitcoin.tx.locktime.kind == 'Blocks'", 'BitcoinTxLocktime has no field "kind"'],
    ["bitcoin.tx.version == 2", "cannot compare string with int"],
  ];
  it.each(REFUSED)("%s is refused: %s", (source, message) => {
    let error: unknown;
    try {
      compileExpression(source, "condition");
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(PolicySyntaxError);
    expect((error as Error).message).toContain(message);
  });
});
