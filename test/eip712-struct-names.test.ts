// EIP-712 struct names beyond Solidity identifiers: Hyperliquid names its types
// `HyperliquidTransaction:ApproveAgent`, and ethers and viem hash them. Signed here through
// @turnkey/viem and @turnkey/ethers as an application signs them, each signature recovered with viem's
// and ethers' own hashing; judged by policies under the name the request declares. A name is refused
// only where it would make EIP-712's type encoding stand for more than one set of types — each such
// character is sent and refused, with only the failed activity recorded.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccount } from "@turnkey/viem";
import { TurnkeySigner } from "@turnkey/ethers";
import { createWalletClient, http as viemHttp, recoverTypedDataAddress, verifyTypedData, type Hex } from "viem";
import { arbitrum } from "viem/chains";
import { TypedDataEncoder, verifyTypedData as ethersVerifyTypedData } from "ethers";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness } from "./helpers/harness.js";
import { ethereumAccountOrganization, type Member } from "./helpers/organizations.js";

type Client = ReturnType<Harness["sdk"]>;

let h: Harness;
let root: Client;
let alice: Member;
let address: Hex;
let organizationId: string;

const AGENT = "0x279f28cbbf5bd83c568ff6b599420b473319c25f";
const OTHER_AGENT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

// Hyperliquid's user-signed actions, as its Python SDK (hyperliquid/utils/signing.py) signs them:
// the domain is HyperliquidSignTransaction on the chain the signature names (Arbitrum One, 42161, or
// Arbitrum Sepolia, 421614), and the message carries fields the types do not declare (`type`,
// `signatureChainId`), which are neither hashed nor shown to policies.
const hyperliquidDomain = (chainId: number) => ({
  name: "HyperliquidSignTransaction",
  version: "1",
  chainId,
  verifyingContract: "0x0000000000000000000000000000000000000000" as Hex,
});
const APPROVE_AGENT = {
  "HyperliquidTransaction:ApproveAgent": [
    { name: "hyperliquidChain", type: "string" },
    { name: "agentAddress", type: "address" },
    { name: "agentName", type: "string" },
    { name: "nonce", type: "uint64" },
  ],
};
const USD_SEND = {
  "HyperliquidTransaction:UsdSend": [
    { name: "hyperliquidChain", type: "string" },
    { name: "destination", type: "string" },
    { name: "amount", type: "string" },
    { name: "time", type: "uint64" },
  ],
};
const approveAgent = (agentAddress: string) => ({
  type: "approveAgent",
  signatureChainId: "0xa4b1",
  hyperliquidChain: "Mainnet",
  agentAddress,
  agentName: "Mobile QR",
  nonce: 1751566432540n,
});
const usdSend = {
  type: "usdSend",
  signatureChainId: "0x66eee",
  hyperliquidChain: "Testnet",
  destination: "0x0d1d9635d0640821d15e323ac8adadfa9c111414",
  amount: "1.5",
  time: 1716531066415n,
};

beforeAll(async () => {
  h = await startHarness();
  const made = await ethereumAccountOrganization(h, "hyperliquid");
  ({ root, alice } = made);
  organizationId = made.org.organizationId;
  address = made.address as Hex;
});
afterAll(() => h?.close());

/** The signature recovers to the account by viem's hashing and by ethers' (which takes the types without EIP712Domain). */
async function recoversEverywhere(
  typed: { domain: any; types: Record<string, unknown>; primaryType: string; message: any },
  signature: Hex,
) {
  expect(await recoverTypedDataAddress({ ...typed, signature } as any)).toBe(address);
  expect(await verifyTypedData({ ...typed, address, signature } as any)).toBe(true);
  const { EIP712Domain: _, ...types } = typed.types;
  expect(ethersVerifyTypedData(typed.domain, types as any, typed.message, signature)).toBe(address);
}

describe("Hyperliquid's typed data, signed through the official clients", () => {
  it("@turnkey/viem: ApproveAgent on Arbitrum One and Sepolia, UsdSend; by a wallet client and by the account itself", async () => {
    const account = await createAccount({ client: root as any, organizationId: organizationId, signWith: address });
    const walletClient = createWalletClient({ account, chain: arbitrum, transport: viemHttp("http://127.0.0.1:1") });
    for (const chainId of [42161, 421614]) {
      const typed = {
        domain: hyperliquidDomain(chainId),
        types: APPROVE_AGENT,
        primaryType: "HyperliquidTransaction:ApproveAgent",
        message: approveAgent(AGENT),
      };
      // A wallet client declares EIP712Domain from the domain, as applications sign.
      await recoversEverywhere(typed, await walletClient.signTypedData(typed as any));
    }
    // The account alone sends the types as given: the domain is hashed when EIP712Domain declares it.
    const typed = {
      domain: hyperliquidDomain(421614),
      types: {
        EIP712Domain: [
          { name: "name", type: "string" },
          { name: "version", type: "string" },
          { name: "chainId", type: "uint256" },
          { name: "verifyingContract", type: "address" },
        ],
        ...USD_SEND,
      },
      primaryType: "HyperliquidTransaction:UsdSend",
      message: usdSend,
    };
    await recoversEverywhere(typed, await account.signTypedData(typed as any));
  });

  it("@turnkey/ethers: TurnkeySigner.signTypedData of ApproveAgent and UsdSend", async () => {
    const signer = new TurnkeySigner({ client: root as any, organizationId: organizationId, signWith: address });
    const agent = approveAgent(AGENT);
    const signature = (await signer.signTypedData(hyperliquidDomain(42161), APPROVE_AGENT, agent)) as Hex;
    await recoversEverywhere(
      { domain: hyperliquidDomain(42161), types: APPROVE_AGENT, primaryType: "HyperliquidTransaction:ApproveAgent", message: agent },
      signature,
    );
    const sent = (await signer.signTypedData(hyperliquidDomain(421614), USD_SEND, usdSend)) as Hex;
    await recoversEverywhere(
      { domain: hyperliquidDomain(421614), types: USD_SEND, primaryType: "HyperliquidTransaction:UsdSend", message: usdSend },
      sent,
    );
  });

  it("policies read the primary type and message under the declared name; a denied agent is not signed", async () => {
    await root.createPolicy({
      policyName: "alice approves one agent",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${alice.userId}')`,
      condition:
        "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN' && " +
        `eth.eip_712.primary_type == 'HyperliquidTransaction:ApproveAgent' && eth.eip_712.message['agentAddress'] == '${AGENT}' && ` +
        "eth.eip_712.domain.chain_id == 42161",
      notes: "",
    });
    const signer = new TurnkeySigner({ client: alice.client as any, organizationId: organizationId, signWith: address });
    const allowed = (await signer.signTypedData(hyperliquidDomain(42161), APPROVE_AGENT, approveAgent(AGENT))) as Hex;
    expect(ethersVerifyTypedData(hyperliquidDomain(42161), APPROVE_AGENT, approveAgent(AGENT), allowed)).toBe(address);
    for (const attempt of [
      () => signer.signTypedData(hyperliquidDomain(42161), APPROVE_AGENT, approveAgent(OTHER_AGENT)),
      () => signer.signTypedData(hyperliquidDomain(421614), APPROVE_AGENT, approveAgent(AGENT)),
      () => signer.signTypedData(hyperliquidDomain(42161), USD_SEND, usdSend),
    ]) {
      const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, { message: expect.stringContaining("OUTCOME_DENY_IMPLICIT") });
      expect(failure).toMatchObject({ code: 7 });
    }
  });
});

describe("struct names viem's own check refuses but EIP-712's encoding reads one way", () => {
  it("are signed as ethers and eth-account hash them: a leading digit, - / @ ' and letters beyond ASCII", async () => {
    const signer = new TurnkeySigner({ client: root as any, organizationId: organizationId, signWith: address });
    const types = {
      "1inch-Order/v2@venue": [
        { name: "maker", type: "address" },
        { name: "legs", type: "Jambe'é[2]" },
      ],
      "Jambe'é": [{ name: "amount", type: "uint256" }],
    };
    const message = { maker: AGENT, legs: [{ amount: 1n }, { amount: 2n }] };
    const domain = { name: "Venue", chainId: 1 };
    const signature = (await signer.signTypedData(domain, types, message)) as Hex;
    expect(ethersVerifyTypedData(domain, types, message, signature)).toBe(address);
    expect(TypedDataEncoder.from(types).encodeType("1inch-Order/v2@venue")).toBe(
      "1inch-Order/v2@venue(address maker,Jambe'é[2] legs)Jambe'é(uint256 amount)",
    );
  });
});

describe("struct names that would make the type encoding ambiguous are refused, nothing else recorded", () => {
  const field = [{ name: "x", type: "uint256" }];
  const signTyped = (name: string, extra: Record<string, unknown> = {}) =>
    root.signRawPayload({
      signWith: address,
      payload: JSON.stringify({
        types: { EIP712Domain: [{ name: "name", type: "string" }], [name]: field, ...extra },
        primaryType: name,
        domain: { name: "D" },
        message: { x: 1 },
      }),
      encoding: "PAYLOAD_ENCODING_EIP712",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
  const expectRefused = async (attempt: () => Promise<unknown>, message: string) => {
    const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, { code: 3, message: expect.stringContaining(message) });
    expect(failure).toMatchObject({ code: 3, details: [expect.objectContaining({ turnkeyErrorCode: "REQUEST_INVALID" })] });
  };

  it("why: a name holding ( encodes exactly as another set of types (ethers' encoder)", () => {
    const nested = { A: [{ name: "b", type: "B" }], B: [{ name: "x", type: "uint256" }] };
    expect(TypedDataEncoder.from({ "A(B b)B": field }).encodeType("A(B b)B")).toBe(TypedDataEncoder.from(nested).encodeType("A"));
  });

  it("( ) , [ ] . whitespace, a character beyond U+FFFF, an unpaired surrogate, the empty name", async () => {
    const cases: [string, string][] = [
      ["A(B b)B", 'contains "(", which EIP-712\'s type encoding uses as punctuation'],
      ["Order)", 'contains ")"'],
      ["Order,uint256 y", 'contains ","'],
      ["Order[2]", 'contains "["'],
      ["Order]", 'contains "]"'],
      ["Lib.Kind", 'contains ".", which readers of ABI types take for an enum'],
      ["Order Book", "contains whitespace (U+0020)"],
      ["Order\tBook", "contains whitespace (U+0009)"],
      ["Order\u00a0Book", "contains whitespace (U+00A0)"],
      ["Order\u{1F4D6}", "contains a character beyond U+FFFF (U+1F4D6)"],
      ["Order\ud800", "contains an unpaired UTF-16 surrogate"],
      ["", 'the struct name "" is empty'],
    ];
    for (const [name, message] of cases) await expectRefused(() => signTyped(name), message);
  });

  it("names that read as elementary types: address, bool, string, bytes, function, int, uint, uint7, bytes0, bytes33", async () => {
    for (const name of ["address", "bool", "string", "bytes", "function", "int", "uint", "uint7", "int256", "bytes0", "bytes33"])
      await expectRefused(() => signTyped(name), "is the name of an elementary type");
  });

  it("a refused name in a struct the message does not reach is refused too (its encoding would be hashed)", async () => {
    await expectRefused(() => signTyped("Order", { "Unused item": field }), 'the struct name "Unused item" contains whitespace');
  });
});
