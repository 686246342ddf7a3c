// Where a request may come from: the IP allowlists of an organization and of its API keys
// (docs/ip-allowlists.md), read and applied right after a stamp names its key. Every signed request
// pays for this check, so it is one read by primary key of at most two small rows, never cached: a
// change made through another server process sharing the database applies to the very next request.
import ipaddr from "ipaddr.js";
import type { Db } from "../store/handles.js";
import { serviceError } from "../errors.js";
import type { Principal } from "./authenticate.js";

/** The `api_key_id` of an organization's own list. */
export const ORGANIZATION_LIST = "";

/** The widest block a rule may name: /20 of IPv4, /48 of IPv6 (the product's limits). */
export const WIDEST_PREFIX = { ipv4: 20, ipv6: 48 } as const;

export interface StoredRule {
  cidr: string;
  label: string;
  /** Milliseconds since the epoch, as a decimal string (the API's form). */
  createdAt: string;
}

export type EvaluationErrorMode = "ALLOW" | "DENY";

export interface NormalizedCidr {
  /** The block with its host bits cleared, in its canonical text form. */
  cidr: string;
  family: "ipv4" | "ipv6";
}

/**
 * A CIDR block as a rule stores it, or why it is not one. Addresses are read strictly (dotted four-part
 * decimal IPv4; IPv6 without a zone), host bits are cleared (192.168.1.100/24 is 192.168.1.0/24), and
 * a block wider than WIDEST_PREFIX is refused.
 */
export function normalizeCidr(text: string): NormalizedCidr | string {
  const slash = text.indexOf("/");
  if (slash < 0) return "is not a CIDR block (an address, a slash and a prefix length, e.g. 192.168.1.0/24 or 2001:db8::/48)";
  const address = text.slice(0, slash);
  const prefixText = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText)) return "has no prefix length after the slash (0 to 32 for IPv4, 0 to 128 for IPv6)";
  const prefix = Number(prefixText);
  if (ipaddr.IPv4.isValidFourPartDecimal(address)) {
    if (prefix > 32) return "has a prefix length above 32, the most an IPv4 block may have";
    if (prefix < WIDEST_PREFIX.ipv4) return `is wider than /${WIDEST_PREFIX.ipv4}, the widest IPv4 block a rule may name`;
    return { cidr: `${ipaddr.IPv4.networkAddressFromCIDR(`${address}/${prefix}`).toString()}/${prefix}`, family: "ipv4" };
  }
  if (!address.includes("%") && ipaddr.IPv6.isValid(address)) {
    if (prefix > 128) return "has a prefix length above 128, the most an IPv6 block may have";
    if (prefix < WIDEST_PREFIX.ipv6) return `is wider than /${WIDEST_PREFIX.ipv6}, the widest IPv6 block a rule may name`;
    return { cidr: `${ipaddr.IPv6.networkAddressFromCIDR(`${address}/${prefix}`).toString()}/${prefix}`, family: "ipv6" };
  }
  return "is not an IPv4 or IPv6 address followed by a prefix length";
}

/** A client's address as rules are matched against it: IPv4-mapped IPv6 (::ffff:10.0.0.1, what a
 * dual-stack socket reports) read as the IPv4 address; undefined when it is not an address at all. */
export function clientAddress(text: string | undefined): ipaddr.IPv4 | ipaddr.IPv6 | undefined {
  if (!text || !ipaddr.isValid(text) || text.includes("%")) return undefined;
  return ipaddr.process(text);
}

function matches(address: ipaddr.IPv4 | ipaddr.IPv6, rules: StoredRule[]): boolean {
  return rules.some((rule) => {
    const [network, prefix] = ipaddr.parseCIDR(rule.cidr);
    return network.kind() === address.kind() && address.match(network, prefix);
  });
}

/**
 * Refuses (IP_NOT_ALLOWED) a request of `principal` coming from `client` (the address the HTTP layer
 * read, or undefined) unless the lists in force let it in. Only API keys are held to them (session keys
 * included): a passkey stamp is a person at a browser, as the product's dashboard is, and is never
 * refused, so a root user with a passkey can always reach a locked-out organization. The lists are the
 * credential's own organization's: a sub-organization has none, and a parent's key naming one of its
 * sub-organizations is held to the parent's lists all the same. `apiKeyId` "" checks the
 * organization's list alone (a request whose key is not registered yet: an invitation's acceptance).
 */
export async function enforceIpAllowlist(db: Db, organizationId: string, apiKeyId: string, client: string | undefined): Promise<void> {
  const rows = await db
    .selectFrom("ip_allowlists")
    .select(["api_key_id", "enabled", "on_evaluation_error", "rules"])
    .where("organization_id", "=", organizationId)
    .where("api_key_id", "in", apiKeyId ? [ORGANIZATION_LIST, apiKeyId] : [ORGANIZATION_LIST])
    .execute();
  const organizationList = rows.find((r) => r.api_key_id === ORGANIZATION_LIST);
  // A key's list is enforced only while the organization's list is enabled (the product's rule).
  if (organizationList?.enabled !== 1) return;
  const keyList = apiKeyId ? rows.find((r) => r.api_key_id === apiKeyId) : undefined;
  const keyRules = keyList ? (JSON.parse(keyList.rules) as StoredRule[]) : [];
  // A key's list with no rules falls back to the organization's.
  const [list, rules, whose] =
    keyList && keyRules.length > 0
      ? [keyList, keyRules, `API key ${apiKeyId}'s IP allowlist`]
      : [organizationList, JSON.parse(organizationList.rules) as StoredRule[], `the IP allowlist of organization ${organizationId}`];
  const address = clientAddress(client);
  if (!address) {
    if (list.on_evaluation_error === "ALLOW") return;
    throw serviceError(
      "IP_NOT_ALLOWED",
      `the request's source address could not be determined, and ${whose} denies such requests (onEvaluationError DENY)`,
    );
  }
  if (!matches(address, rules)) {
    throw serviceError("IP_NOT_ALLOWED", `requests from ${address.toString()} are not allowed by ${whose}`);
  }
}

/** Whether a principal's requests are held to IP allowlists: API keys are, passkeys are not. */
export const heldToIpAllowlists = (principal: Principal) => principal.credentialType !== "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR";
