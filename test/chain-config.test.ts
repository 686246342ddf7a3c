// SIGIL_CHAIN_ASSETS (a JSON file read and checked at start) and the Solana spellings of
// SIGIL_CHAIN_RPC_URLS: every rule refuses its bad value with a message naming the variable and
// what is wrong, and what is accepted reaches the Config as the API names it.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, canonicalCaip2, loadConfig } from "../src/config.js";

let dir: string;
const file = (name: string, content: unknown) => {
  const at = path.join(dir, name);
  fs.writeFileSync(at, typeof content === "string" ? content : JSON.stringify(content));
  return at;
};
const USDC = { caip19: "eip155:1/erc20:0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", symbol: "USDC", name: "USD Coin", decimals: 6 };

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-chain-config-"));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe("Solana clusters in SIGIL_CHAIN_RPC_URLS", () => {
  it("reads an alias and a whole genesis hash as the cluster's CAIP-2 id", () => {
    const config = loadConfig({
      SIGIL_CHAIN_RPC_URLS: "solana:devnet=http://127.0.0.1:8899,solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d=https://rpc.example",
    });
    expect(config.chains.rpcUrls).toEqual({
      "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1": "http://127.0.0.1:8899",
      "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": "https://rpc.example",
    });
    expect(canonicalCaip2("solana:mainnet")).toBe("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
    expect(canonicalCaip2("eip155:1")).toBe("eip155:1");
  });

  it("refuses a cluster named twice, once by its alias", () => {
    expect(() =>
      loadConfig({ SIGIL_CHAIN_RPC_URLS: "solana:devnet=http://a.example,solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1=http://b.example" }),
    ).toThrow(/: solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1 is named twice$/);
  });
});

describe("SIGIL_CHAIN_ASSETS", () => {
  it("reads the assets of each chain, an alias read as its cluster", () => {
    const mint = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
    const assets = file("good.json", {
      "eip155:1": [
        USDC,
        { caip19: "eip155:1/slip44:60", symbol: "ETH", name: "Ether", decimals: 18, logoUrl: "https://logo.example/eth.png" },
      ],
      "solana:mainnet": [{ caip19: `solana:mainnet/token:${mint}`, symbol: "USDC", name: "USD Coin", decimals: 6, stable: true }],
    });
    expect(loadConfig({ SIGIL_CHAIN_ASSETS: assets }).chains.assets).toEqual({
      "eip155:1": [
        USDC,
        { caip19: "eip155:1/slip44:60", symbol: "ETH", name: "Ether", decimals: 18, logoUrl: "https://logo.example/eth.png" },
      ],
      "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": [
        { caip19: `solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp/token:${mint}`, symbol: "USDC", name: "USD Coin", decimals: 6, stable: true },
      ],
    });
    expect(loadConfig({}).chains.assets).toEqual({});
  });

  const PREFIX = "SIGIL_CHAIN_ASSETS must be the path of a JSON file";
  const cases: [string, unknown, RegExp][] = [
    ["not JSON", "{ eip155:1 ", / \(it is not JSON: /],
    ["not an object", [USDC], / \(its JSON is not an object\)$/],
    ["a key that is not a chain", { mainnet: [USDC] }, /: "mainnet" is not an eip155 or solana CAIP-2 chain id$/],
    ["a chain of another namespace", { "cosmos:cosmoshub-4": [] }, /: "cosmos:cosmoshub-4" is not an eip155 or solana CAIP-2 chain id$/],
    [
      "a chain listed twice",
      { "solana:devnet": [], "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1": [] },
      /: solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1 is listed twice$/,
    ],
    ["a value that is not a list", { "eip155:1": USDC }, /: the value of eip155:1 is not a list of assets$/],
    ["an asset that is not an object", { "eip155:1": ["USDC"] }, /: eip155:1\[0\] is not an object$/],
    ["an unknown field", { "eip155:1": [{ ...USDC, price: 1 }] }, /: eip155:1\[0\] has fields no asset has: price$/],
    ["no caip19", { "eip155:1": [{ symbol: "X", name: "X", decimals: 1 }] }, /: eip155:1\[0\] has no caip19$/],
    [
      "a caip19 of another chain",
      { "eip155:1": [{ ...USDC, caip19: USDC.caip19.replace("eip155:1", "eip155:10") }] },
      /: eip155:1\[0\] caip19 "eip155:10\/erc20:0x.*" is not an asset of eip155:1 \(erc20:0x<contract> or slip44:<coin type> after "eip155:1\/"\)$/,
    ],
    [
      "a contract that is not an address",
      { "eip155:1": [{ ...USDC, caip19: "eip155:1/erc20:0x1234" }] },
      /: eip155:1\[0\] caip19 "eip155:1\/erc20:0x1234" is not an asset of eip155:1/,
    ],
    [
      "an SPL mint on an EVM chain",
      { "eip155:1": [{ ...USDC, caip19: "eip155:1/token:EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v" }] },
      /is not an asset of eip155:1/,
    ],
    [
      "an ERC-20 on Solana",
      { "solana:devnet": [USDC].map((a) => ({ ...a, caip19: "solana:devnet/erc20:0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48" })) },
      /is not an asset of solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1 \(token:<mint> or slip44:<coin type>/,
    ],
    [
      "an asset listed twice",
      { "eip155:1": [USDC, { ...USDC, caip19: USDC.caip19.toLowerCase() }] },
      /: eip155:1\[1\] repeats eip155:1\/erc20:0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48$/,
    ],
    ["no symbol", { "eip155:1": [{ ...USDC, symbol: "" }] }, /: eip155:1\[0\] needs a symbol of 1 to 32 characters$/],
    ["no name", { "eip155:1": [{ ...USDC, name: " " }] }, /: eip155:1\[0\] needs a name of 1 to 100 characters$/],
    [
      "decimals out of range",
      { "eip155:1": [{ ...USDC, decimals: 256 }] },
      /: eip155:1\[0\] needs decimals, a whole number from 0 to 255$/,
    ],
    [
      "decimals that are not whole",
      { "eip155:1": [{ ...USDC, decimals: 6.5 }] },
      /: eip155:1\[0\] needs decimals, a whole number from 0 to 255$/,
    ],
    [
      "a logo that is not https",
      { "eip155:1": [{ ...USDC, logoUrl: "http://logo.example/x.png" }] },
      /: eip155:1\[0\] has a logoUrl that is not an https:\/\/ URL$/,
    ],
    [
      "a stable that is not a boolean",
      { "eip155:1": [{ ...USDC, stable: "yes" }] },
      /: eip155:1\[0\] has a stable that is not true or false$/,
    ],
    [
      "two native coins",
      {
        "eip155:1": [
          { caip19: "eip155:1/slip44:60", symbol: "ETH", name: "Ether", decimals: 18 },
          { caip19: "eip155:1/slip44:61", symbol: "ETC", name: "Classic", decimals: 18 },
        ],
      },
      /: eip155:1 lists more than one native asset \(slip44\)$/,
    ],
  ];
  for (const [label, content, message] of cases) {
    it(`refuses ${label}`, () => {
      const at = file(`${label.replace(/\W+/g, "-")}.json`, content);
      let error: unknown;
      try {
        loadConfig({ SIGIL_CHAIN_ASSETS: at });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as Error).message.startsWith(PREFIX)).toBe(true);
      expect((error as Error).message).toMatch(message);
    });
  }

  it("refuses a file that cannot be read, naming why", () => {
    expect(() => loadConfig({ SIGIL_CHAIN_ASSETS: path.join(dir, "missing.json") })).toThrow(
      /SIGIL_CHAIN_ASSETS must be .* \(it cannot be read: ENOENT\)$/,
    );
  });
});
