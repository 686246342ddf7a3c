// Structured data that arrives inside a string — EIP-712 typed data, a Tempo transaction's RLP, an
// Ethereum ABI, a Solana IDL and the instruction data it decodes — is read by code (Sigil's and
// libraries') that recurses once per level of nesting, or whose time grows faster than the data. The
// request body's own nesting limit does not reach into a string. Each parser bounds what it reads
// first: too deep (or, for typed data, too costly to hash) is refused with 400 and the limit named,
// recording only the FAILED activity; data nested within the limits is still signed and decoded.
// Without the bounds these requests answered 500 (stack overflow), were accepted, or took seconds to
// minutes.
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { recoverTypedDataAddress, serializeTransaction, type Hex } from "viem";
import { PublicKey, Transaction, TransactionInstruction } from "@solana/web3.js";
import { refusedLeavingOnlyItsActivity, signedRequest, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { ETHER_MAIL, fastPoller, organizationWith, type Member } from "./helpers/organizations.js";
import { findContractInterface } from "../src/operations/contracts/interfaces.js";
import { uploadedAbi } from "../src/operations/contracts/contract-calls.js";
import { newId } from "../src/store/ids.js";

const ETHEREUM = "SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM";
const SOLANA = "SMART_CONTRACT_INTERFACE_TYPE_SOLANA";

let h: Harness;
let org: TestOrganization;
let root: ReturnType<Harness["sdk"]>;
let ethAddress: string;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization();
  root = h.sdk(org, org.key, fastPoller);
  const { addresses } = await root.createWallet({
    walletName: "signing",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  ethAddress = addresses[0]!;
});
afterAll(() => h?.close());

type Snapshot = Record<string, string[]>;

/**
 * A stamped submit the operation refuses with 400 and `code`: only its FAILED activity (and that
 * activity's policy evaluation) is added, recording the answer. Returns the message.
 */
async function refused(operation: string, body: Record<string, unknown>, code: string): Promise<string> {
  const before = JSON.parse(await h.snapshot()) as Snapshot;
  const { body: text, headers } = signedRequest(body, org.key);
  const answer = await h.post(`/public/v1/submit/${operation}`, text, headers);
  expect(answer.status, JSON.stringify(answer.json).slice(0, 500)).toBe(400);
  expect(answer.json).toEqual({
    code: 3,
    message: expect.any(String),
    details: [{ "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode: code }],
    requestId: expect.any(String),
  });
  const after = JSON.parse(await h.snapshot()) as Snapshot;
  for (const table of Object.keys(before))
    if (table !== "activities" && table !== "policy_evaluations") expect(after[table], table).toEqual(before[table]);
  const added = after.activities!.filter((row) => !before.activities!.includes(row)).map((row) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0]).toMatchObject({ organization_id: org.organizationId, status: "ACTIVITY_STATUS_FAILED" });
  // The recorded failure is the answer but for the request's id, which the row keeps apart.
  const { requestId, ...recorded } = answer.json;
  expect(JSON.parse(added[0].failure)).toEqual(recorded);
  expect(added[0].request_id).toBe(requestId);
  return answer.json.message as string;
}

const submit = (type: string, parameters: Record<string, unknown>) => ({
  type,
  timestampMs: String(Date.now()),
  organizationId: org.organizationId,
  parameters,
});

describe("EIP-712 typed data (sign_raw_payload)", () => {
  const signTypedData = (payload: string) =>
    submit("ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", {
      signWith: ethAddress,
      payload,
      encoding: "PAYLOAD_ENCODING_EIP712",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });

  /** Typed data whose message is a chain of `levels` structs, each the next's only field (JSON depth levels + 1). */
  function chain(levels: number) {
    const types: Record<string, { name: string; type: string }[]> = {};
    for (let i = 0; i < levels; i++)
      types[`L${i}`] = [i + 1 < levels ? { name: "next", type: `L${i + 1}` } : { name: "v", type: "uint256" }];
    let message = '{"v":"7"}';
    for (let i = levels - 2; i >= 0; i--) message = `{"next":${message}}`;
    return { types, text: `{"types":${JSON.stringify(types)},"primaryType":"L0","domain":{"name":"deep"},"message":${message}}` };
  }

  it("a recursive type whose message nests 3,000 levels: 400, the limit named, only the FAILED activity recorded", async () => {
    const node = [
      { name: "child", type: "Node[]" },
      { name: "v", type: "uint256" },
    ];
    const message = `${'{"child":['.repeat(3000)}{"child":[],"v":1}${'],"v":1}'.repeat(3000)}`;
    const payload = `{"types":{"Node":${JSON.stringify(node)}},"primaryType":"Node","domain":{},"message":${message}}`;
    const text = await refused("sign_raw_payload", signTypedData(payload), "REQUEST_INVALID");
    expect(text).toContain("nests arrays and objects more than 32 levels deep");
    // The same in hex, as some clients send it.
    const hex = Buffer.from(payload).toString("hex");
    expect(await refused("sign_raw_payload", signTypedData(hex), "REQUEST_INVALID")).toContain("more than 32 levels deep");
  });

  it("a message nested 31 levels (32 with the payload's own object) is signed; 32 levels is refused", async () => {
    const fits = chain(31);
    const { activity, r, s, v } = await root.signRawPayload({
      signWith: ethAddress,
      payload: fits.text,
      encoding: "PAYLOAD_ENCODING_EIP712",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const typed = JSON.parse(fits.text);
    const signer = await recoverTypedDataAddress({
      domain: typed.domain,
      types: typed.types,
      primaryType: typed.primaryType,
      message: typed.message,
      signature: `0x${r}${s}${v}` as Hex,
    });
    expect(signer.toLowerCase()).toBe(ethAddress.toLowerCase());
    expect(await refused("sign_raw_payload", signTypedData(chain(32).text), "REQUEST_INVALID")).toContain("32 levels");
  });

  it("the EIP-712 example (Ether Mail), nested structs, is signed as before", async () => {
    const { r, s, v } = await root.signRawPayload({
      signWith: ethAddress,
      payload: JSON.stringify(ETHER_MAIL),
      encoding: "PAYLOAD_ENCODING_EIP712",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
    const signer = await recoverTypedDataAddress({ ...ETHER_MAIL, signature: `0x${r}${s}${v}` as Hex });
    expect(signer.toLowerCase()).toBe(ethAddress.toLowerCase());
  });

  it("more struct types than 128: refused", async () => {
    const types: Record<string, unknown> = {};
    for (let i = 0; i < 129; i++) types[`T${i}`] = [{ name: "x", type: "uint8" }];
    const payload = JSON.stringify({ types, primaryType: "T0", domain: {}, message: { x: 1 } });
    expect(await refused("sign_raw_payload", signTypedData(payload), "REQUEST_INVALID")).toContain("129 struct types; at most 128");
  });

  it("a field type of 3,000 array dimensions, its value an empty array (the message stays shallow): refused", async () => {
    const payload = JSON.stringify({
      types: { Root: [{ name: "grid", type: `uint8${"[]".repeat(3000)}` }] },
      primaryType: "Root",
      domain: {},
      message: { grid: [] },
    });
    expect(await refused("sign_raw_payload", signTypedData(payload), "REQUEST_INVALID")).toContain(
      "types.Root[0].type has 3000 array dimensions; at most 31",
    );
  });

  it("a field of a type nobody declared, in a struct the message never reaches: refused", async () => {
    const payload = JSON.stringify({
      types: { Root: [{ name: "later", type: "Later[]" }], Later: [{ name: "what", type: "Nowhere" }] },
      primaryType: "Root",
      domain: {},
      message: { later: [] },
    });
    expect(await refused("sign_raw_payload", signTypedData(payload), "REQUEST_INVALID")).toContain(
      "types.Later.what has type Nowhere, which is neither an EIP-712 type nor a struct declared in types",
    );
  });

  it("struct values whose types refer to many others, past what hashing may go through: refused", async () => {
    // Each value's type encoding names the whole chain of 127 types (about 1,400 characters); viem
    // builds and hashes it again for every value.
    const types: Record<string, unknown> = {};
    for (let i = 0; i < 127; i++) types[`T${i}`] = [{ name: "x", type: i + 1 < 127 ? `T${i + 1}[]` : "uint8" }];
    types.Root = [{ name: "items", type: "T0[]" }];
    const items = Array.from({ length: 800 }, () => ({ x: [] }));
    const payload = JSON.stringify({ types, primaryType: "Root", domain: {}, message: { items } });
    expect(await refused("sign_raw_payload", signTypedData(payload), "REQUEST_INVALID")).toContain(
      "too large to hash: each struct value hashes its type's encoding",
    );
  });
});

describe("a Tempo transaction's RLP (sign_transaction)", () => {
  it("lists nested 20,000 levels: 400, the limit named, only the FAILED activity recorded", async () => {
    // From the inside out: an empty list, then each level a long list whose length takes 3 bytes.
    const levels = 20_000;
    const bytes = Buffer.alloc(levels * 4 + 1);
    let at = bytes.length - 1;
    bytes[at] = 0xc0;
    for (let i = 0; i < levels; i++) {
      const length = bytes.length - at;
      at -= 4;
      bytes[at] = 0xfa;
      bytes.writeUIntBE(length, at + 1, 3);
    }
    const unsignedTransaction = `76${bytes.subarray(at).toString("hex")}`;
    const message = await refused(
      "sign_transaction",
      submit("ACTIVITY_TYPE_SIGN_TRANSACTION_V2", { signWith: ethAddress, unsignedTransaction, type: "TRANSACTION_TYPE_TEMPO" }),
      "REQUEST_INVALID",
    );
    expect(message).toContain("nests RLP lists more than 32 levels deep");
  });
});

describe("Ethereum ABIs (create_smart_contract_interface)", () => {
  const upload = (inputs: unknown[]) =>
    submit("ACTIVITY_TYPE_CREATE_SMART_CONTRACT_INTERFACE", {
      smartContractAddress: `0x${createHash("sha256").update(JSON.stringify(inputs)).digest("hex").slice(0, 40)}`,
      smartContractInterface: JSON.stringify([{ type: "function", name: "f", stateMutability: "nonpayable", inputs, outputs: [] }]),
      type: ETHEREUM,
      label: "nested",
    });

  it("a parameter of 3,000 array dimensions (its JSON shallow): refused naming the limit", async () => {
    const message = await refused(
      "create_smart_contract_interface",
      upload([{ name: "x", type: `uint256${"[1]".repeat(3000)}` }]),
      "SMART_CONTRACT_INTERFACE_INVALID",
    );
    expect(message).toContain("[0].inputs[0].type nests arrays and tuples more than 32 levels deep");
  });

  it("tuples and dimensions together past 32 levels: refused; 32 levels are accepted", async () => {
    // A tuple[][] (3 levels) holding a uint8 of 29 dimensions: 3 + 30 = 33.
    const deep = [{ name: "t", type: "tuple[][]", components: [{ name: "a", type: `uint8${"[]".repeat(29)}` }] }];
    expect(await refused("create_smart_contract_interface", upload(deep), "SMART_CONTRACT_INTERFACE_INVALID")).toContain(
      "[0].inputs[0].components[0].type nests arrays and tuples more than 32 levels deep",
    );
    const fits = [{ name: "t", type: "tuple[][]", components: [{ name: "a", type: `uint8${"[]".repeat(28)}` }] }];
    const { smartContractInterfaceId } = await root.createSmartContractInterface(upload(fits).parameters as never);
    expect(smartContractInterfaceId).toBeTruthy();
  });
});

describe("an interface stored before these limits, that breaks one", () => {
  it("decodes nothing: the look-up for revert reasons finds no ABI (rather than failing), and a call to it is still signed", async () => {
    const address = "0x00000000000000000000000000000000000000d1";
    const abi = [
      { type: "function", name: "f", stateMutability: "nonpayable", inputs: [{ name: "x", type: `uint8${"[]".repeat(40)}` }], outputs: [] },
    ];
    const text = JSON.stringify(abi);
    await h.server.store.db
      .insertInto("smart_contract_interfaces")
      .values({
        id: newId(),
        organization_id: org.organizationId,
        type: ETHEREUM,
        address,
        label: "stored earlier",
        notes: "",
        interface_json: text,
        digest: createHash("sha256").update(text).digest("hex"),
        created_at: Date.now(),
        updated_at: Date.now(),
      })
      .execute();
    await expect(findContractInterface(h.server.store.db, org.organizationId, ETHEREUM, address)).rejects.toThrow(
      "more than 32 levels deep",
    );
    expect(await uploadedAbi(h.server.store.db, org.organizationId, address)).toBeUndefined();
    const unsignedTransaction = serializeTransaction({
      type: "eip1559",
      chainId: 1,
      nonce: 0,
      to: address,
      data: "0x12345678",
      gas: 50_000n,
      maxFeePerGas: 1n,
      maxPriorityFeePerGas: 1n,
    }).slice(2);
    const { activity } = await root.signTransaction({ signWith: ethAddress, unsignedTransaction, type: "TRANSACTION_TYPE_ETHEREUM" });
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });
});

describe("Solana IDLs (create_smart_contract_interface) and the instruction data they decode", () => {
  const PROGRAM = "JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV4";
  const programOf = (seed: string) => new PublicKey(createHash("sha256").update(seed).digest()).toBase58();
  const upload = (idl: unknown, program = PROGRAM) =>
    submit("ACTIVITY_TYPE_CREATE_SMART_CONTRACT_INTERFACE", {
      smartContractAddress: program,
      smartContractInterface: JSON.stringify(idl),
      type: SOLANA,
      label: "nested",
    });
  /** Types T0 … T<n-1>, each a struct holding the one before; T0 holds a u8. */
  function chainTypes(n: number) {
    return Array.from({ length: n }, (_, i) => ({
      name: `T${i}`,
      type: { kind: "struct", fields: [i === 0 ? { name: "v", type: "u8" } : { name: "inner", type: { defined: `T${i - 1}` } }] },
    }));
  }
  const instruction = (argType: unknown) => [{ name: "go", accounts: [], args: [{ name: "x", type: argType }] }];

  it("a chain of 100 defined types declared innermost first (each built alone, then reused): refused naming the limit", async () => {
    const message = await refused(
      "create_smart_contract_interface",
      upload({ instructions: instruction("u8"), types: chainTypes(100) }),
      "SMART_CONTRACT_INTERFACE_INVALID",
    );
    expect(message).toContain("types nest more than 32 levels deep");
  });

  it("a chain of 3,000 declared outermost first: refused; a chain whose values nest 32 levels is accepted", async () => {
    const message = await refused(
      "create_smart_contract_interface",
      upload({ instructions: instruction("u8"), types: chainTypes(3000).reverse() }),
      "SMART_CONTRACT_INTERFACE_INVALID",
    );
    expect(message).toContain("types nest more than 32 levels deep");
    // T30 is 31 structs around a u8: 32 levels, whichever order they are declared in.
    for (const types of [chainTypes(31), chainTypes(31).reverse()]) {
      const { smartContractInterfaceId } = await root.createSmartContractInterface(
        upload({ instructions: instruction("u8"), types }, programOf(`fits ${types[0]!.name}`)).parameters as never,
      );
      expect(smartContractInterfaceId).toBeTruthy();
    }
    expect(
      await refused(
        "create_smart_contract_interface",
        upload({ instructions: instruction("u8"), types: chainTypes(32) }, programOf("33")),
        "SMART_CONTRACT_INTERFACE_INVALID",
      ),
    ).toContain("types nest more than 32 levels deep");
  });

  describe("decoded for policies", () => {
    let payer: Member;
    let solAddress: string;
    let members: Awaited<ReturnType<typeof organizationWith>>;
    const blockhash = new PublicKey(Buffer.alloc(32, 9)).toBase58();
    const discriminator = createHash("sha256").update("global:go").digest().subarray(0, 8);

    function call(program: string, args: Buffer): string {
      const signer = new PublicKey(solAddress);
      const transaction = new Transaction({ recentBlockhash: blockhash, feePayer: signer }).add(
        new TransactionInstruction({ programId: new PublicKey(program), keys: [], data: Buffer.concat([discriminator, args]) }),
      );
      return transaction.serialize({ requireAllSignatures: false, verifySignatures: false }).toString("hex");
    }

    beforeAll(async () => {
      members = await organizationWith(h, ["payer"]);
      payer = members.members.payer!;
      const { addresses } = await members.root.createWallet({
        walletName: "sol",
        accounts: [
          { curve: "CURVE_ED25519", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/501'/0'/0'", addressFormat: "ADDRESS_FORMAT_SOLANA" },
        ],
      });
      solAddress = addresses[0]!;
    });

    const allow = (condition: string) =>
      members.root.createPolicy({
        policyName: `allow ${condition}`.slice(0, 256),
        effect: "EFFECT_ALLOW",
        consensus: `approvers.any(u, u.id == '${payer.userId}')`,
        condition,
        notes: "",
      });
    const sign = (unsignedTransaction: string) =>
      payer.client.signTransaction({ signWith: solAddress, unsignedTransaction, type: "TRANSACTION_TYPE_SOLANA" });

    it("arguments nested a few levels (struct, vec of structs, enum, option) are decoded and judged", async () => {
      const program = programOf("orders");
      await members.root.createSmartContractInterface({
        type: SOLANA,
        smartContractAddress: program,
        label: "orders",
        smartContractInterface: JSON.stringify({
          instructions: instruction({ defined: "Order" }),
          types: [
            {
              name: "Kind",
              type: { kind: "enum", variants: [{ name: "Buy" }, { name: "Sell", fields: [{ name: "floor", type: "u64" }] }] },
            },
            {
              name: "Item",
              type: {
                kind: "struct",
                fields: [
                  { name: "amount", type: "u64" },
                  { name: "kind", type: { defined: "Kind" } },
                ],
              },
            },
            {
              name: "Order",
              type: {
                kind: "struct",
                fields: [
                  { name: "items", type: { vec: { defined: "Item" } } },
                  { name: "note", type: { option: "string" } },
                ],
              },
            },
          ],
        }),
      });
      await allow(
        `solana.tx.instructions.all(i, i.parsed_instruction_data.program_call_args['x']['items'][1]['amount'] == 7 ` +
          `&& i.parsed_instruction_data.program_call_args['x']['items'][1]['kind']['Sell']['floor'] == 3)`,
      );
      const u64 = (n: bigint) => {
        const b = Buffer.alloc(8);
        b.writeBigUInt64LE(n);
        return b;
      };
      const items = (second: bigint) =>
        Buffer.concat([Buffer.from([2, 0, 0, 0]), u64(5n), Buffer.from([0]), u64(second), Buffer.from([1]), u64(3n), Buffer.from([0])]);
      const { activity } = await sign(call(program, items(7n)));
      expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      await expect(sign(call(program, items(8n)))).rejects.toThrow(/OUTCOME_DENY_IMPLICIT/);
    });

    it("types that decode to billions of values from no bytes: the instruction is shown undecoded, at once", async () => {
      // E0 is an empty struct; each E<k> holds two E<k-1>: E25 reads 2^25 empty structs from no bytes.
      const program = programOf("empty structs");
      const types = [{ name: "E0", type: { kind: "struct", fields: [] as unknown[] } }];
      for (let k = 1; k <= 25; k++)
        types.push({
          name: `E${k}`,
          type: {
            kind: "struct",
            fields: [
              { name: "a", type: { defined: `E${k - 1}` } },
              { name: "b", type: { defined: `E${k - 1}` } },
            ],
          },
        });
      await members.root.createSmartContractInterface({
        type: SOLANA,
        smartContractAddress: program,
        label: "empty structs",
        smartContractInterface: JSON.stringify({ instructions: instruction({ defined: "E25" }), types }),
      });
      const { policyId } = await allow(`solana.tx.instructions.all(i, i.parsed_instruction_data.instruction_name == 'go')`);
      // Not decoded: the policy reading parsed_instruction_data errors, and nothing allows the payer.
      const { id } = await refusedLeavingOnlyItsActivity(h, () => sign(call(program, Buffer.alloc(0))), {
        message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
      });
      const { policyEvaluations } = await members.root.getPolicyEvaluations({ activityId: id });
      expect(policyEvaluations[0]!.policyEvaluations.find((p) => p.policyId === policyId)).toMatchObject({ outcome: "OUTCOME_ERROR" });
      // The root quorum signs it: the request itself is fine.
      const signed = await members.root.signTransaction({
        signWith: solAddress,
        unsignedTransaction: call(program, Buffer.alloc(0)),
        type: "TRANSACTION_TYPE_SOLANA",
      });
      expect(signed.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    });
  });
});
