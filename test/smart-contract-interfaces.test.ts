// Smart contract interfaces (Ethereum ABIs, Solana IDLs) through @turnkey/sdk-server, as a program
// managing them would call them: created, read, listed, shown in get_organization, deleted; every
// malformed upload refused with its exact error, leaving nothing but its failed activity.
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { erc20Abi } from "viem";
import { organizationWith } from "./helpers/organizations.js";
import { newKeyPair, refusedLeavingOnlyItsActivity, startHarness, type Harness } from "./helpers/harness.js";

type Client = ReturnType<Harness["sdk"]>;

const ETHEREUM = "SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM";
const SOLANA = "SMART_CONTRACT_INTERFACE_TYPE_SOLANA";
/** USDC on Ethereum mainnet, as block explorers write it (EIP-55 checksum). */
const USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48";
const JUPITER = "JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV4";
const ABI = JSON.stringify(erc20Abi);
/** The example IDL of the product's smart-contract-interfaces page (legacy Anchor format). */
const IDL = JSON.stringify({
  instructions: [
    {
      name: "initialize",
      accounts: [{ name: "authority", isMut: false, isSigner: true, isOptional: false }],
      args: [{ name: "amount", type: "u64" }],
    },
  ],
  types: [{ name: "MyStruct", type: { kind: "struct", fields: [{ name: "value", type: "u64" }] } }],
});

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest("hex");

/** A refusal by the activity itself (recorded FAILED, with its code in the details) that changed nothing else. */
async function expectRefused(attempt: () => Promise<unknown>, code: number, turnkeyErrorCode: string, message: string) {
  const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, { code, message: expect.stringContaining(message) });
  expect(failure).toMatchObject({ code, message, details: [expect.objectContaining({ turnkeyErrorCode })] });
}

const ethereumInterface = (root: Client, overrides: Record<string, unknown> = {}) =>
  root.createSmartContractInterface({
    type: ETHEREUM,
    smartContractAddress: USDC,
    smartContractInterface: ABI,
    label: "USDC mainnet",
    notes: "ERC-20 transfers",
    ...overrides,
  } as Parameters<Client["createSmartContractInterface"]>[0]);

describe("create, read, list, delete", () => {
  it("round-trips an Ethereum ABI and a Solana IDL, and get_organization references them", async () => {
    const { org, root } = await organizationWith(h, []);
    const http = h.http(org.key);
    const created = await ethereumInterface(root);
    expect(created.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(created.activity.type).toBe("ACTIVITY_TYPE_CREATE_SMART_CONTRACT_INTERFACE");
    const ethereumId = created.smartContractInterfaceId;
    const { smartContractInterfaceId: solanaId } = await root.createSmartContractInterface({
      type: SOLANA,
      smartContractAddress: JUPITER,
      smartContractInterface: IDL,
      label: "Jupiter",
    });

    const { smartContractInterface } = await root.getSmartContractInterface({ smartContractInterfaceId: ethereumId });
    expect(smartContractInterface).toEqual({
      organizationId: org.organizationId,
      smartContractInterfaceId: ethereumId,
      // Ethereum addresses are stored (and matched) in lower case; the ABI exactly as uploaded.
      smartContractAddress: USDC.toLowerCase(),
      smartContractInterface: ABI,
      type: ETHEREUM,
      label: "USDC mainnet",
      notes: "ERC-20 transfers",
      createdAt: expect.objectContaining({ seconds: expect.any(String) }),
      updatedAt: expect.objectContaining({ seconds: expect.any(String) }),
    });
    const solana = (await root.getSmartContractInterface({ smartContractInterfaceId: solanaId })).smartContractInterface;
    expect(solana).toMatchObject({ smartContractAddress: JUPITER, smartContractInterface: IDL, type: SOLANA, label: "Jupiter", notes: "" });

    const listed = (await root.getSmartContractInterfaces({})).smartContractInterfaces;
    expect(listed.map((i) => i.smartContractInterfaceId)).toEqual([ethereumId, solanaId]);
    expect(listed[0]).toEqual(smartContractInterface);

    const { organizationData } = await http.getOrganization({ organizationId: org.organizationId });
    expect(organizationData.smartContractInterfaceReferences).toEqual([
      { smartContractInterfaceId: ethereumId, smartContractAddress: USDC.toLowerCase(), digest: sha256(ABI) },
      { smartContractInterfaceId: solanaId, smartContractAddress: JUPITER, digest: sha256(IDL) },
    ]);

    const deleted = await root.deleteSmartContractInterface({ smartContractInterfaceId: ethereumId });
    expect(deleted.smartContractInterfaceId).toBe(ethereumId);
    expect(deleted.activity.type).toBe("ACTIVITY_TYPE_DELETE_SMART_CONTRACT_INTERFACE");
    expect((await root.getSmartContractInterfaces({})).smartContractInterfaces.map((i) => i.smartContractInterfaceId)).toEqual([solanaId]);
    await expect(root.getSmartContractInterface({ smartContractInterfaceId: ethereumId })).rejects.toMatchObject({
      code: 5,
      message: expect.stringContaining(`smart contract interface ${ethereumId} not found in this organization`),
    });
    // Deleted, the address is free for another upload.
    expect((await ethereumInterface(root, { smartContractAddress: USDC.toLowerCase() })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("keeps interfaces to the organization that uploaded them (a sub-organization sees none of its parent's)", async () => {
    const { org, root } = await organizationWith(h, []);
    const { smartContractInterfaceId } = await ethereumInterface(root);
    const key = newKeyPair();
    const { subOrganizationId } = await root.createSubOrganization({
      subOrganizationName: "child",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "child root",
          apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const child = h.sdk({ organizationId: subOrganizationId } as never, key);
    expect((await child.getSmartContractInterfaces({})).smartContractInterfaces).toEqual([]);
    await expect(child.getSmartContractInterface({ smartContractInterfaceId })).rejects.toMatchObject({ code: 5 });
    // The same address may be described again in the sub-organization: its own interface.
    const own = await ethereumInterface(child, { label: "child's USDC" });
    const childData = (await h.http(key).getOrganization({ organizationId: subOrganizationId })).organizationData;
    expect(childData.smartContractInterfaceReferences).toEqual([
      { smartContractInterfaceId: own.smartContractInterfaceId, smartContractAddress: USDC.toLowerCase(), digest: sha256(ABI) },
    ]);
    expect((await root.getSmartContractInterfaces({})).smartContractInterfaces).toHaveLength(1);
    const parentData = (await h.http(org.key).getOrganization({ organizationId: org.organizationId })).organizationData;
    expect(parentData.smartContractInterfaceReferences?.map((r) => r.smartContractInterfaceId)).toEqual([smartContractInterfaceId]);
    // Deleting the sub-organization takes its interfaces with it, and leaves the parent's.
    await child.deleteSubOrganization({ deleteWithoutExport: true });
    const rows = await h.server.store.db.selectFrom("smart_contract_interfaces").select(["id", "organization_id"]).execute();
    expect(rows.filter((r) => r.organization_id === subOrganizationId)).toEqual([]);
    expect(rows.filter((r) => r.id === smartContractInterfaceId)).toHaveLength(1);
  });

  it("is a policy resource: a non-root user needs a policy naming SMART_CONTRACT_INTERFACE", async () => {
    const { root, members } = await organizationWith(h, ["dev"]);
    const dev = members.dev!;
    const { failure } = await refusedLeavingOnlyItsActivity(h, () => ethereumInterface(dev.client), { code: 7 });
    expect(failure.message).toContain("OUTCOME_DENY_IMPLICIT");
    await root.createPolicy({
      policyName: "dev manages interfaces",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${dev.userId}')`,
      condition: "activity.resource == 'SMART_CONTRACT_INTERFACE' && activity.action in ['CREATE', 'DELETE']",
      notes: "",
    });
    const { smartContractInterfaceId } = await ethereumInterface(dev.client);
    await dev.client.deleteSmartContractInterface({ smartContractInterfaceId });
    expect((await root.getSmartContractInterfaces({})).smartContractInterfaces).toEqual([]);
  });
});

describe("malformed uploads are refused, and change nothing", () => {
  let root: Client;
  beforeAll(async () => {
    ({ root } = await organizationWith(h, []));
    await ethereumInterface(root, { smartContractAddress: "0x1111111111111111111111111111111111111111" });
  });

  it.each([
    [
      "an ABI with a type Solidity does not have",
      { smartContractInterface: '[{"type":"function","name":"f","inputs":[{"name":"x","type":"uint257"}],"outputs":[]}]' },
      'smartContractInterface is not an Ethereum ABI: [0].inputs[0].type "uint257" is not a Solidity ABI type',
    ],
    [
      "a function without outputs",
      { smartContractInterface: '[{"type":"function","name":"f","inputs":[],"stateMutability":"view"}]' },
      "smartContractInterface is not an Ethereum ABI: [0].outputs must be a list",
    ],
    [
      "a compiler artifact instead of its ABI",
      { smartContractInterface: JSON.stringify({ abi: erc20Abi }) },
      "smartContractInterface is not an Ethereum ABI: must be a JSON array of ABI items (the ABI itself, not a compiler artifact holding one under `abi`)",
    ],
    [
      "text that is not JSON",
      { smartContractInterface: "transfer(address,uint256)" },
      "smartContractInterface is not an Ethereum ABI: is not valid JSON text",
    ],
    [
      "an item of no ABI kind",
      { smartContractInterface: '[{"type":"modifier","name":"onlyOwner"}]' },
      "smartContractInterface is not an Ethereum ABI: [0].type must be one of function, event, error, constructor, fallback, receive",
    ],
  ])("%s: SMART_CONTRACT_INTERFACE_INVALID", async (_, overrides, message) => {
    await expectRefused(() => ethereumInterface(root, overrides), 3, "SMART_CONTRACT_INTERFACE_INVALID", message);
  });

  it("an ABI over 400 KiB: SMART_CONTRACT_INTERFACE_TOO_LARGE; one of exactly 400 KiB is accepted", async () => {
    // A valid ABI padded with whitespace to the limit, then one byte more.
    const padded = (bytes: number) => ABI + " ".repeat(bytes - Buffer.byteLength(ABI));
    await expectRefused(
      () => ethereumInterface(root, { smartContractInterface: padded(409_601), smartContractAddress: USDC }),
      3,
      "SMART_CONTRACT_INTERFACE_TOO_LARGE",
      "smartContractInterface has 409601 bytes; at most 409600 (400 KiB) are accepted: minify the JSON",
    );
    const { smartContractInterfaceId } = await ethereumInterface(root, {
      smartContractInterface: padded(409_600),
      smartContractAddress: USDC,
    });
    await root.deleteSmartContractInterface({ smartContractInterfaceId });
  });

  it.each([
    [ETHEREUM, "0x1234", "is not an Ethereum address: 0x and 40 hex digits (mixed case must be its EIP-55 checksum)"],
    // USDC's checksum with one letter's case changed.
    [
      ETHEREUM,
      "0xa0B86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
      "is not an Ethereum address: 0x and 40 hex digits (mixed case must be its EIP-55 checksum)",
    ],
    [SOLANA, "JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV", "is not a Solana program id: the base58 text of 32 bytes"],
    [SOLANA, "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "is not a Solana program id: the base58 text of 32 bytes"],
  ])("%s address %s: SMART_CONTRACT_ADDRESS_INVALID", async (type, address, reason) => {
    await expectRefused(
      () => ethereumInterface(root, { type, smartContractAddress: address, smartContractInterface: type === SOLANA ? IDL : ABI }),
      3,
      "SMART_CONTRACT_ADDRESS_INVALID",
      `smartContractAddress "${address}" ${reason}`,
    );
  });

  it.each([
    [
      "without types",
      { instructions: [{ name: "a", accounts: [], args: [] }] },
      'types must be a list (add "types": [] to an IDL that defines none)',
    ],
    [
      "with an argument type it does not define",
      { instructions: [{ name: "a", accounts: [], args: [{ name: "x", type: { defined: "Order" } }] }], types: [] },
      "instructions[0].args[0].type: type Order is not defined in types",
    ],
    [
      "with an unknown primitive",
      { instructions: [{ name: "a", accounts: [], args: [{ name: "x", type: "u512" }] }], types: [] },
      'instructions[0].args[0].type: "u512" is not an IDL type this server reads (bool, u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, f32, f64, string, bytes, publicKey, pubkey)',
    ],
    ["as an ABI-like list", [{ type: "function" }], "must be a JSON object with instructions and types (an Anchor IDL)"],
    [
      "with two instructions that cannot be told apart",
      {
        instructions: [
          { name: "a", discriminator: [1, 2], accounts: [], args: [] },
          { name: "b", discriminator: [1, 2, 3], accounts: [], args: [] },
        ],
        types: [],
      },
      "instructions[1] (b): its discriminator and a's cannot be told apart (one begins the other)",
    ],
  ])("a Solana IDL %s: SMART_CONTRACT_INTERFACE_INVALID", async (_, idl, reason) => {
    await expectRefused(
      () => ethereumInterface(root, { type: SOLANA, smartContractAddress: JUPITER, smartContractInterface: JSON.stringify(idl) }),
      3,
      "SMART_CONTRACT_INTERFACE_INVALID",
      `smartContractInterface is not a Solana (Anchor) IDL: ${reason}`,
    );
  });

  it("a second interface for the same address (in any letter case): SMART_CONTRACT_INTERFACE_ALREADY_EXISTS", async () => {
    const [existing] = (await root.getSmartContractInterfaces({})).smartContractInterfaces;
    await expectRefused(
      () =>
        ethereumInterface(root, { smartContractAddress: "0x1111111111111111111111111111111111111111".toUpperCase().replace("0X", "0x") }),
      6,
      "SMART_CONTRACT_INTERFACE_ALREADY_EXISTS",
      `smart contract interface ${existing!.smartContractInterfaceId} is already bound to 0x1111111111111111111111111111111111111111: delete it first to upload another`,
    );
  });

  it("an empty label: REQUEST_INVALID", async () => {
    await expectRefused(
      () => ethereumInterface(root, { label: "  ", smartContractAddress: USDC }),
      3,
      "REQUEST_INVALID",
      "label must not be empty",
    );
  });

  it("deleting an interface the organization does not have: SMART_CONTRACT_INTERFACE_NOT_FOUND", async () => {
    const id = "00000000-0000-7000-8000-000000000000";
    await expectRefused(
      () => root.deleteSmartContractInterface({ smartContractInterfaceId: id }),
      5,
      "SMART_CONTRACT_INTERFACE_NOT_FOUND",
      `smart contract interface ${id} not found in this organization`,
    );
  });

  it("a type the API does not have is refused by the request schema, before any activity is recorded", async () => {
    const before = await h.snapshot();
    await expect(ethereumInterface(root, { type: "SMART_CONTRACT_INTERFACE_TYPE_TRON", smartContractAddress: USDC })).rejects.toMatchObject(
      {
        code: 3,
        message: expect.stringContaining("SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM, SMART_CONTRACT_INTERFACE_TYPE_SOLANA"),
      },
    );
    expect(await h.snapshot()).toBe(before);
  });
});
