// Where a request may come from: the IP allowlists of an organization and of its API keys
// (docs/ip-allowlists.md), read and applied right after a stamp names its key. Every signed request
// pays for this check, so the lists are read by primary key in the very statement that finds an API
// key (auth/authenticate.ts), and never cached: a change made through another server process sharing
// the database applies to the very next request.
import ipaddr from "ipaddr.js";
import type { Db } from "../store/handles.js";
import { serviceError } from "../errors.js";

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

export type Address = ipaddr.IPv4 | ipaddr.IPv6;

/**
 * IPv6 text with its last 32 bits written as dotted IPv4, rewritten in hex (undefined when the dotted
 * part is not an IPv4 address). ipaddr.js reads every such address as IPv4-mapped (::203.0.113.5 as
 * ::ffff:203.0.113.5, which would make an IPv6 client an IPv4 one), so it is only ever given hex.
 */
function hexTail(text: string): string | undefined {
  const last = text.lastIndexOf(":");
  const dotted = text.slice(last + 1);
  if (!dotted.includes(".")) return text;
  if (!ipaddr.IPv4.isValidFourPartDecimal(dotted)) return undefined;
  const [a = 0, b = 0, c = 0, d = 0] = ipaddr.IPv4.parse(dotted).octets;
  return `${text.slice(0, last + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
}

/** An address read strictly, or undefined: dotted four-part decimal IPv4, or IPv6 without a zone
 * (::a.b.c.d is the IPv6 address whose last 32 bits those are, never the IPv4 address). */
export function parseAddress(text: string): Address | undefined {
  if (ipaddr.IPv4.isValidFourPartDecimal(text)) return ipaddr.IPv4.parse(text);
  if (!text.includes(":") || text.includes("%")) return undefined;
  const hex = hexTail(text);
  return hex !== undefined && ipaddr.IPv6.isValid(hex) ? ipaddr.IPv6.parse(hex) : undefined;
}

/** The IPv4 address an IPv4-mapped IPv6 address (::ffff:a.b.c.d, and only that form) stands for. */
const unmapped = (address: Address): Address =>
  address.kind() === "ipv6" && (address as ipaddr.IPv6).isIPv4MappedAddress() ? (address as ipaddr.IPv6).toIPv4Address() : address;

export interface Block {
  /** The block's first address (host bits cleared). */
  network: Address;
  prefix: number;
}

/**
 * A block read from text (a bare address is a block of one), or why it is not one. An IPv4-mapped
 * block (::ffff:a.b.c.d/N, N of 96 or more) is the IPv4 block it maps, /N-96: clients with such
 * addresses are matched as IPv4, so that is the only way it can ever match.
 */
export function parseBlock(text: string): Block | string {
  const slash = text.indexOf("/");
  const addressText = slash < 0 ? text : text.slice(0, slash);
  const prefixText = slash < 0 ? undefined : text.slice(slash + 1);
  const address = parseAddress(addressText);
  if (!address) return "is not an IPv4 or IPv6 address followed by a prefix length";
  const bits = address.kind() === "ipv4" ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText))
    return "has no prefix length after the slash (0 to 32 for IPv4, 0 to 128 for IPv6)";
  // /020 is /20 to some readers and octal 16 to others (as 010 in an IPv4 address is 8 to inet_aton).
  if (prefixText !== undefined && /^0\d/.test(prefixText))
    return `has a prefix length with a leading zero: write /${Number(prefixText)}, not /${prefixText}`;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (prefix > bits) return `has a prefix length above ${bits}, the most an ${bits === 32 ? "IPv4" : "IPv6"} block may have`;
  const mapped = unmapped(address);
  if (mapped !== address && prefix >= 96) return blockOf(mapped, prefix - 96);
  return blockOf(address, prefix);
}

function blockOf(address: Address, prefix: number): Block {
  const mask = (address.kind() === "ipv4" ? ipaddr.IPv4 : ipaddr.IPv6).subnetMaskFromPrefixLength(prefix).toByteArray();
  const network = ipaddr.fromByteArray(address.toByteArray().map((byte, i) => byte & mask[i]!));
  return { network, prefix };
}

/**
 * A CIDR block as a rule stores it, or why it is not one. Addresses are read strictly (parseAddress),
 * host bits are cleared (192.168.1.100/24 is 192.168.1.0/24), an IPv4-mapped block is stored as the
 * IPv4 block it maps (parseBlock), and a block wider than WIDEST_PREFIX is refused.
 */
export function normalizeCidr(text: string): NormalizedCidr | string {
  if (!text.includes("/")) return "is not a CIDR block (an address, a slash and a prefix length, e.g. 192.168.1.0/24 or 2001:db8::/48)";
  const block = parseBlock(text);
  if (typeof block === "string") return block;
  const family = block.network.kind();
  const widest = WIDEST_PREFIX[family];
  // An IPv4-mapped block was read as the IPv4 block it maps: say so, or /100 being "wider than /20" puzzles.
  const mapped = family === "ipv4" && text.includes(":") ? " (an IPv4-mapped block ::ffff:a.b.c.d/N is the IPv4 block /N-96)" : "";
  if (block.prefix < widest)
    return `is wider than /${widest}, the widest ${family === "ipv4" ? "IPv4" : "IPv6"} block a rule may name${mapped}`;
  return { cidr: `${block.network.toString()}/${block.prefix}`, family };
}

/** An IPv6 address with its zone id (RFC 4007: fe80::1%eth0, what Node reports for a link-local peer). */
const ZONED = /^([0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)%[^%\s]+$/;

/** A client's address as rules are matched against it: IPv4-mapped IPv6 (::ffff:10.0.0.1, what a
 * dual-stack socket reports) read as the IPv4 address, and a link-local peer's zone id (%eth0, which
 * names the interface it came in on) dropped, since a zone says nothing of who the peer is and rules
 * cannot name one; undefined when it is not an address at all. */
export function clientAddress(text: string | undefined): Address | undefined {
  const zoned = text === undefined ? null : ZONED.exec(text);
  const address = text === undefined ? undefined : parseAddress(zoned ? zoned[1]! : text);
  return address && unmapped(address);
}

const inBlock = (address: Address, block: Block) => block.network.kind() === address.kind() && address.match(block.network, block.prefix);

function matches(address: Address, rules: StoredRule[]): boolean {
  return rules.some((rule) => {
    const block = parseBlock(rule.cidr);
    return typeof block !== "string" && inBlock(address, block);
  });
}

/**
 * Whether an address is a trusted proxy's (SIGIL_TRUSTED_PROXIES), as Fastify asks of the TCP peer and
 * then of each X-Forwarded-For hop from the right. Read with parseAddress, not by Fastify's proxy-addr,
 * whose ipaddr.js takes ::10.0.0.1 (an IPv6 peer) for 10.0.0.1 and would let it forge the header.
 */
export function trustedProxyTest(blocks: string[]): (address: string) => boolean {
  const parsed = blocks.map((text) => {
    const block = parseBlock(text);
    if (typeof block === "string") throw new Error(`trusted proxy ${text} ${block}`);
    return block;
  });
  return (text) => {
    const address = clientAddress(text);
    return address !== undefined && parsed.some((block) => inBlock(address, block));
  };
}

/** One list as enforcing it reads it. */
export interface EnforcedList {
  enabled: number | null;
  on_evaluation_error: string;
  rules: string;
}

/** The two lists that may apply to a request: its organization's own, and its API key's (each null when absent). */
export interface ApplicableLists {
  organization: EnforcedList | null;
  key: EnforcedList | null;
}

/** One list of a left join (rules is NOT NULL in the table: null means no list). */
export function joinedList(enabled: number | null, onEvaluationError: string | null, rules: string | null): EnforcedList | null {
  return rules === null ? null : { enabled, on_evaluation_error: onEvaluationError!, rules };
}

/**
 * An API key of a parent organization that a request's key also is (the same public key on the same
 * curve, registered again as a sub-organization's credential: a delegated-access set-up), with the
 * lists that key is held to. The key material is the parent's API key wherever it stamps, so a
 * request it stamps as the sub-organization's credential is held to these lists as well: naming the
 * sub-organization does not step around them.
 */
export interface ParentKeyLists {
  organizationId: string;
  apiKeyId: string;
  lists: ApplicableLists;
}

/** The curve an API key of `credentialType` is on; every other key that signs as an API key does (an
 * attested stamp's, a login's) is P-256. */
export const curveOfCredential = (credentialType: string) =>
  credentialType === "CREDENTIAL_TYPE_API_KEY_SECP256K1"
    ? "API_KEY_CURVE_SECP256K1"
    : credentialType === "CREDENTIAL_TYPE_API_KEY_ED25519"
      ? "API_KEY_CURVE_ED25519"
      : "API_KEY_CURVE_P256";

/**
 * The API key of the parent of `organizationId` with this public key and curve, and its lists; null
 * when the organization is top-level or its parent holds no such key. One read, for the roads whose
 * key did not come with its candidates (read-only sessions, attested stamps, retries, invitations).
 */
export async function readParentKeyLists(db: Db, organizationId: string, publicKey: string, curve: string): Promise<ParentKeyLists | null> {
  const row = await db
    .selectFrom("organizations as o")
    .innerJoin("api_keys as k", "k.organization_id", "o.parent_organization_id")
    .leftJoin("ip_allowlists as organization_list", (join) =>
      join.onRef("organization_list.organization_id", "=", "k.organization_id").on("organization_list.api_key_id", "=", ORGANIZATION_LIST),
    )
    .leftJoin("ip_allowlists as key_list", (join) =>
      join.onRef("key_list.organization_id", "=", "k.organization_id").onRef("key_list.api_key_id", "=", "k.id"),
    )
    .select([
      "k.id",
      "k.organization_id",
      "organization_list.enabled as organization_list_enabled",
      "organization_list.on_evaluation_error as organization_list_on_evaluation_error",
      "organization_list.rules as organization_list_rules",
      "key_list.enabled as key_list_enabled",
      "key_list.on_evaluation_error as key_list_on_evaluation_error",
      "key_list.rules as key_list_rules",
    ])
    .where("o.id", "=", organizationId)
    .where("k.public_key", "=", publicKey.toLowerCase())
    .where("k.curve", "=", curve)
    .executeTakeFirst();
  if (!row) return null;
  return {
    organizationId: row.organization_id,
    apiKeyId: row.id,
    lists: {
      organization: joinedList(row.organization_list_enabled, row.organization_list_on_evaluation_error, row.organization_list_rules),
      key: joinedList(row.key_list_enabled, row.key_list_on_evaluation_error, row.key_list_rules),
    },
  };
}

/** The lists `apiKeyId` ("" for none) of `organizationId` is held to: one read by primary key of at most two rows. */
export async function readIpAllowlists(db: Db, organizationId: string, apiKeyId: string): Promise<ApplicableLists> {
  const rows = await db
    .selectFrom("ip_allowlists")
    .select(["api_key_id", "enabled", "on_evaluation_error", "rules"])
    .where("organization_id", "=", organizationId)
    .where("api_key_id", "in", apiKeyId ? [ORGANIZATION_LIST, apiKeyId] : [ORGANIZATION_LIST])
    .execute();
  return {
    organization: rows.find((r) => r.api_key_id === ORGANIZATION_LIST) ?? null,
    key: (apiKeyId && rows.find((r) => r.api_key_id === apiKeyId)) || null,
  };
}

/**
 * Refuses (IP_NOT_ALLOWED) a request coming from `client` (the address the HTTP layer read, or
 * undefined) unless `lists` — those of the credential's own organization, and of its API key — let it
 * in. API keys (session keys included) and read-only sessions are held to them (heldToIpAllowlists): a
 * passkey's stamp is a person at a browser, as the product's dashboard is, and is never refused, so a
 * root user with a passkey can always reach a locked-out organization. A sub-organization has no lists
 * of its own use here: a parent's key naming one of its sub-organizations is held to the parent's lists
 * all the same, and so is the parent's key material registered again as a sub-organization's
 * credential (ParentKeyLists). A key's list is enforced only while the organization's list is enabled.
 */
export function applyIpAllowlists(lists: ApplicableLists, organizationId: string, apiKeyId: string, client: string | undefined): void {
  const organizationList = lists.organization;
  // A key's list is enforced only while the organization's list is enabled (the product's rule).
  if (organizationList?.enabled !== 1) return;
  const keyList = apiKeyId ? lists.key : null;
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

/**
 * Reads the lists of `organizationId` that apply to `apiKeyId` and applies them (applyIpAllowlists).
 * `apiKeyId` "" checks the organization's list alone (a request whose key is not registered yet: an
 * invitation's acceptance). An API key's stamp brings its lists with it (authenticate reads them with
 * the key, in the same statement) and is checked without this read.
 */
export async function enforceIpAllowlist(db: Db, organizationId: string, apiKeyId: string, client: string | undefined): Promise<void> {
  applyIpAllowlists(await readIpAllowlists(db, organizationId, apiKeyId), organizationId, apiKeyId, client);
}

/** Whether a principal's requests are held to IP allowlists: API keys are, and so is every read-only
 * session (X-Session), a passkey's included: its bearer token, unlike a passkey's stamp, can be replayed
 * by whoever copies it. Only a passkey's own WebAuthn stamp is not held. */
export const heldToIpAllowlists = (principal: { scheme: string; credentialType: string }) =>
  principal.scheme === "SESSION" || principal.credentialType !== "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR";
