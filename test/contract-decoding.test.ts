// The decoders behind eth.tx.contract_call_args and parsed_instruction_data, on their own: what a call
// or instruction is shown as, and the encodings that are shown as nothing (non-canonical bytes,
// unknown selectors); and the policy language's one case-insensitive comparison, Ethereum addresses.
import { describe, expect, it } from "vitest";
import { encodeFunctionData, erc20Abi, type Abi } from "viem";
import { getAddressCodec, getU64Codec } from "@solana/kit";
import { decodeContractCall, validateAbi } from "../src/chains/ethereum-abi.js";
import { anchorDiscriminator, decodeInstruction, validateIdl } from "../src/chains/solana-idl.js";
import "../src/operations/wallets/transaction-keywords.js";
import { STEP_BUDGET, compileExpression } from "../src/policy/compile.js";
import { rootValues } from "../src/policy/keywords.js";
import { EthereumAddress, PolicyTimestamp } from "../src/policy/types.js";

const TREASURY = "0x08d2b0a37F869FF76BACB5Bab3278E26ab7067B7";

describe("Ethereum calls decoded with an ABI", () => {
  const abi = validateAbi(JSON.stringify(erc20Abi));
  const data = encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [TREASURY, 2n ** 256n - 1n] });

  it("shows the function, its selector and named arguments: addresses in lower case, integers exact", () => {
    expect(decodeContractCall(abi, data)).toEqual({
      function_name: "transfer",
      function_signature: "0xa9059cbb",
      contract_call_args: { recipient: TREASURY.toLowerCase(), amount: 2n ** 256n - 1n },
    });
  });

  it("ignores bytes after the arguments (attribution suffixes), as the contract does", () => {
    expect(decodeContractCall(abi, `${data}deadbeef`)?.contract_call_args.amount).toBe(2n ** 256n - 1n);
  });

  it("shows nothing for an unknown selector, short data, or a non-canonical encoding (dirty high bits in an address)", () => {
    expect(decodeContractCall(abi, `0x12345678${data.slice(10)}`)).toBeUndefined();
    expect(decodeContractCall(abi, data.slice(0, 40))).toBeUndefined();
    expect(decodeContractCall(abi, "0x")).toBeUndefined();
    expect(decodeContractCall(abi, `${data.slice(0, 10)}ff${data.slice(12)}`)).toBeUndefined();
  });

  it("shows tuples as lists by position, and unnamed arguments under their position", () => {
    const batch = validateAbi(
      JSON.stringify([
        {
          type: "function",
          name: "executeBatch",
          stateMutability: "payable",
          outputs: [],
          inputs: [
            {
              name: "calls",
              type: "tuple[]",
              components: [
                { name: "target", type: "address" },
                { name: "value", type: "uint256" },
                { name: "data", type: "bytes" },
              ],
            },
            { name: "", type: "bytes32" },
          ],
        },
      ]),
    ) as Abi;
    const call = encodeFunctionData({
      abi: batch,
      functionName: "executeBatch",
      args: [[{ target: TREASURY, value: 3n, data: "0xABCD" }], `0x${"AB".repeat(32)}`],
    } as never);
    expect(decodeContractCall(batch, call)?.contract_call_args).toEqual({
      calls: [[TREASURY.toLowerCase(), 3n, "0xabcd"]],
      "1": `0x${"ab".repeat(32)}`,
    });
  });

  it("accepts legacy ABIs (constant/payable instead of stateMutability) and refuses deeply nested JSON", () => {
    expect(() =>
      validateAbi(
        '[{"constant":true,"inputs":[],"name":"name","outputs":[{"name":"","type":"string"}],"payable":false,"type":"function"}]',
      ),
    ).not.toThrow();
    expect(() => validateAbi(`${"[".repeat(40)}${"]".repeat(40)}`)).toThrow("nests arrays and objects more than 32 levels deep");
  });
});

describe("Solana instructions decoded with an Anchor IDL", () => {
  it("computes Anchor's default discriminators from camelCase names (Jupiter's sharedAccountsRoute)", () => {
    expect([...anchorDiscriminator("sharedAccountsRoute")]).toEqual([193, 32, 155, 51, 65, 214, 156, 129]);
  });

  it("reads the Anchor 0.30 format: explicit discriminators, pubkey, {defined: {name}}, enums, options, tuples", () => {
    const idl = validateIdl(
      JSON.stringify({
        address: "JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV4",
        metadata: { name: "demo", version: "0.1.0", spec: "0.1.0" },
        instructions: [
          {
            name: "place",
            discriminator: [9, 9],
            accounts: [
              { name: "owner", signer: true },
              { name: "market", accounts: [{ name: "book", writable: true }] },
            ],
            args: [
              { name: "side", type: { defined: { name: "Side" } } },
              { name: "limit", type: { option: "u64" } },
              { name: "memo", type: { option: "string" } },
              { name: "pair", type: { defined: { name: "Pair" } } },
              { name: "to", type: "pubkey" },
              { name: "flag", type: "bool" },
            ],
          },
        ],
        types: [
          { name: "Side", type: { kind: "enum", variants: [{ name: "Bid" }, { name: "Ask", fields: ["u64"] }] } },
          { name: "Pair", type: { kind: "struct", fields: ["u8", "bytes"] } },
        ],
      }),
    );
    const to = "JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV4";
    const bytes = (side: number[], flag: number) =>
      new Uint8Array([
        9,
        9,
        ...side,
        1,
        ...getU64Codec().encode(2n ** 64n - 1n),
        0,
        7,
        2,
        0,
        0,
        0,
        0xab,
        0xcd,
        ...getAddressCodec().encode(to as never),
        flag,
      ]);
    expect(decodeInstruction(idl, bytes([1, ...getU64Codec().encode(5n)], 1), ["Owner1", "Book1"])).toEqual({
      instruction_name: "place",
      discriminator: "0909",
      named_accounts: { owner: "Owner1", book: "Book1" },
      program_call_args: { side: { Ask: [5n] }, limit: 2n ** 64n - 1n, pair: [7n, "abcd"], to, flag: true },
    });
    // A unit variant is its name; None is absent.
    expect(decodeInstruction(idl, bytes([0], 0), ["Owner1"])?.program_call_args.side).toBe("Bid");
    // A bool byte of 2 is not a canonical Borsh bool: nothing is shown.
    expect(decodeInstruction(idl, bytes([0], 2), [])).toBeUndefined();
    // Another discriminator: no instruction of this IDL.
    expect(decodeInstruction(idl, new Uint8Array([9, 8, 0]), [])).toBeUndefined();
  });

  it("refuses types that contain themselves and lists of items that take no bytes", () => {
    const idl = (types: unknown[], type: unknown) =>
      JSON.stringify({ instructions: [{ name: "a", accounts: [], args: [{ name: "x", type }] }], types });
    expect(() =>
      validateIdl(
        idl([{ name: "L", type: { kind: "struct", fields: [{ name: "next", type: { option: { defined: "L" } } }] } }], { defined: "L" }),
      ),
    ).toThrow("type L contains itself");
    expect(() => validateIdl(idl([{ name: "E", type: { kind: "struct", fields: [] } }], { vec: { defined: "E" } }))).toThrow(
      "a vec of a type that takes no bytes cannot be read safely",
    );
  });
});

describe("Ethereum addresses compare in any letter case, and nothing else does", () => {
  const evaluate = (source: string, values: Record<string, unknown>) =>
    compileExpression(
      source,
      "condition",
    )({
      roots: rootValues({ ...values, "time.now": PolicyTimestamp.fromMillis(0) }),
      nowMs: 0,
      locals: [],
      budget: { steps: STEP_BUDGET },
    });
  const lower = TREASURY.toLowerCase();
  const upper = `0x${TREASURY.slice(2).toUpperCase()}`;
  // As the decoder shows a call to `pay(address dst, string memo, address[] payees)`: the address
  // arguments marked as addresses, the memo (text that happens to hold 0x and 40 hex digits) not.
  const payAbi = [
    {
      type: "function",
      name: "pay",
      stateMutability: "nonpayable",
      outputs: [],
      inputs: [
        { name: "dst", type: "address" },
        { name: "memo", type: "string" },
        { name: "payees", type: "address[]" },
        { name: "tag", type: "bytes20" },
      ],
    },
  ] as const;
  const call = decodeContractCall(
    validateAbi(JSON.stringify(payAbi)),
    encodeFunctionData({ abi: payAbi, functionName: "pay", args: [TREASURY, lower, [TREASURY], lower as `0x${string}`] }),
    (hex) => new EthereumAddress(hex),
  )!;
  const tx = { to: lower, from: lower, ...call };

  it.each([
    // Fields typed as addresses, against a checksummed or upper-case literal.
    [`eth.tx.to == '${TREASURY}'`, true],
    [`eth.tx.from != '${upper}'`, false],
    [`eth.tx.to in ['0x1111111111111111111111111111111111111111', '${TREASURY}']`, true],
    [`['${upper}'].contains(eth.tx.to)`, true],
    // Decoded `address` arguments (values marked as addresses).
    [`eth.tx.contract_call_args['dst'] == '${upper}'`, true],
    [`eth.tx.contract_call_args['dst'] in ['0x1111111111111111111111111111111111111111', '${TREASURY}']`, true],
    [`eth.tx.contract_call_args['dst'] != '${TREASURY}'`, false],
    [`eth.tx.contract_call_args['payees'].contains('${upper}')`, true],
    [`eth.tx.contract_call_args['payees'].all(p, p == '${TREASURY}')`, true],
    [`eth.tx.contract_call_args['dst'] == eth.tx.contract_call_args['memo']`, true],
    // Still text for everything else: slices, indexes, lengths.
    [`eth.tx.contract_call_args['dst'][0..4] == '0x08'`, true],
    [`eth.tx.contract_call_args['dst'][41] == '7'`, true],
    // Text that looks like an address is not one: a string argument, bytes20, literals.
    [`eth.tx.contract_call_args['memo'] == '${TREASURY}'`, false],
    [`eth.tx.contract_call_args['memo'] == '${lower}'`, true],
    [`eth.tx.contract_call_args['memo'] in ['${TREASURY}']`, false],
    [`eth.tx.contract_call_args['tag'] == '${TREASURY}'`, false],
    [`'${TREASURY}' == '${lower}'`, false],
    // 0x and 40 hex digits on both sides, or it is plain text even in an address field.
    [`eth.tx.to == '${TREASURY.slice(0, 41)}'`, false],
    [`'0xABCDEF' == '0xabcdef'`, false],
  ])("%s is %s", (source, expected) => {
    expect(evaluate(source, { "eth.tx": tx })).toBe(expected);
  });

  it("EIP-712: the verifying contract is an address; message fields compare exactly (the product asks for lower case)", () => {
    const typed = { domain: { verifying_contract: lower }, message: { owner: lower } };
    expect(evaluate(`eth.eip_712.domain.verifying_contract == '${TREASURY}'`, { "eth.eip_712": typed })).toBe(true);
    expect(evaluate(`eth.eip_712.message['owner'] == '${TREASURY}'`, { "eth.eip_712": typed })).toBe(false);
    expect(evaluate(`eth.eip_712.message['owner'] == '${lower}'`, { "eth.eip_712": typed })).toBe(true);
  });

  it("wallet_account.address folds only when the account is an Ethereum one (marked by signerKeywords)", () => {
    expect(evaluate(`wallet_account.address == '${upper}'`, { wallet_account: { address: new EthereumAddress(lower) } })).toBe(true);
    expect(evaluate(`wallet_account.address == '${upper}'`, { wallet_account: { address: lower } })).toBe(false);
  });

  it("Solana addresses stay case-sensitive", () => {
    const solana = {
      instructions: [{ parsed_instruction_data: { named_accounts: { owner: "JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV4" } } }],
    };
    expect(
      evaluate(
        "solana.tx.instructions[0].parsed_instruction_data.named_accounts['owner'] == 'jup6lkbzbjs1jkkwapdhny74zcz3tluzoi5qnyvtav4'",
        { "solana.tx": solana },
      ),
    ).toBe(false);
  });
});
