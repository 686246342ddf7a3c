// The assets of a chain as the API names them (CAIP-19, https://chainagnostic.org/CAIPs/caip-19): its
// native coin (`<caip2>/slip44:<coin type>`, SLIP-44 coin types: 60 ether, 966 POL, 714 BNB, 501 SOL)
// and the tokens a deployment lists in SIGIL_CHAIN_ASSETS (`<caip2>/erc20:<contract>`,
// `<caip2>/token:<mint>`). A chain whose native coin is not known here, and not listed, has none.
import { formatUnits } from "viem";
import type { ConfiguredAsset } from "../config.js";

export interface AssetMetadata {
  caip19: string;
  symbol: string;
  name: string;
  decimals: number;
  logoUrl?: string;
  stable?: boolean;
}

const ETHER = { slip44: 60, symbol: "ETH", name: "Ethereum", decimals: 18 };
const POL = { slip44: 966, symbol: "POL", name: "Polygon", decimals: 18 };
const BNB = { slip44: 714, symbol: "BNB", name: "BNB", decimals: 18 };

/** The native coin of the chains whose coin is certain; others are listed by the deployment (SIGIL_CHAIN_ASSETS). */
const NATIVE_COINS: Record<string, { slip44: number; symbol: string; name: string; decimals: number }> = {
  "eip155:1": ETHER,
  "eip155:11155111": ETHER,
  "eip155:8453": ETHER,
  "eip155:84532": ETHER,
  "eip155:10": ETHER,
  "eip155:11155420": ETHER,
  "eip155:42161": ETHER,
  "eip155:421614": ETHER,
  "eip155:137": POL,
  "eip155:80002": POL,
  "eip155:56": BNB,
  "eip155:97": BNB,
  // Not the API's: the chain id Hardhat's and Anvil's local nodes run by default, whose coin is ether.
  "eip155:31337": ETHER,
};
const SOL = { slip44: 501, symbol: "SOL", name: "Solana", decimals: 9 };

const isNative = (asset: { caip19: string }) => asset.caip19.includes("/slip44:");

/** The chain's native coin: the one SIGIL_CHAIN_ASSETS lists for it, else the built-in one, if any. */
export function nativeAsset(caip2: string, configured: Record<string, ConfiguredAsset[]>): AssetMetadata | undefined {
  const listed = configured[caip2]?.find(isNative);
  if (listed) return listed;
  const coin = caip2.startsWith("solana:") ? SOL : NATIVE_COINS[caip2];
  return coin && { caip19: `${caip2}/slip44:${coin.slip44}`, symbol: coin.symbol, name: coin.name, decimals: coin.decimals };
}

/** Every asset of the chain: the native coin first, then the tokens in the order they are listed. */
export function chainAssets(caip2: string, configured: Record<string, ConfiguredAsset[]>): AssetMetadata[] {
  const native = nativeAsset(caip2, configured);
  return [...(native ? [native] : []), ...(configured[caip2] ?? []).filter((asset) => !isNative(asset))];
}

/** What a token's CAIP-19 id points at: the ERC-20 contract or the SPL mint. */
export function tokenReference(asset: { caip19: string }): { kind: "erc20" | "token"; address: string } | undefined {
  const match = /\/(erc20|token):(.+)$/.exec(asset.caip19);
  return match ? { kind: match[1] as "erc20" | "token", address: match[2]! } : undefined;
}

/** An amount in atomic units as a decimal number of whole units ("1.5"), for display only. */
export const displayAmount = (amount: bigint, decimals: number) => formatUnits(amount, decimals);
