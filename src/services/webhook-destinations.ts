// Where webhooks may point: the operator's destination policy, and the checks of a URL and of the
// addresses its host resolves to. Both sides use them: the webhook operations when a URL is set
// (operations/webhooks/webhooks.ts), the dispatcher again when it dials (webhook-dispatcher.ts), since
// a name may resolve differently later.
import dns from "node:dns/promises";
import net from "node:net";
import ipaddr from "ipaddr.js";
import { serviceError } from "../errors.js";

/** Which destinations the operator lets webhooks reach besides public ones. */
export interface DestinationPolicy {
  allowLoopback: boolean;
  allowPrivate: boolean;
}

/** Cloud metadata services that sit in ranges an operator may otherwise allow (private, CGNAT). */
const METADATA_ADDRESSES = new Set(["100.100.100.200", "fd00:ec2::254"]);

/** Why an address may not be dialled under `policy`, or undefined if it may. */
export function forbiddenAddress(address: string, policy: DestinationPolicy): string | undefined {
  if (!ipaddr.isValid(address)) return `${address} is not an IP address`;
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === "ipv6") {
    const v6 = parsed as ipaddr.IPv6;
    // IPv4-mapped (::ffff:a.b.c.d) and the deprecated IPv4-compatible (::a.b.c.d) forms are judged
    // as the IPv4 address they carry.
    if (v6.isIPv4MappedAddress()) parsed = v6.toIPv4Address();
    else if (v6.parts.slice(0, 6).every((part) => part === 0) && (v6.parts[6] !== 0 || v6.parts[7]! > 1))
      parsed = ipaddr.fromByteArray(v6.toByteArray().slice(12));
  }
  if (METADATA_ADDRESSES.has(parsed.toNormalizedString()) || METADATA_ADDRESSES.has(parsed.toString()))
    return `${address} is a cloud metadata address, which webhooks never reach`;
  const range = parsed.range();
  if (range === "unicast") return undefined;
  if (range === "loopback")
    return policy.allowLoopback ? undefined : `${address} is a loopback address (allow with SIGIL_WEBHOOK_ALLOW_LOOPBACK=true)`;
  if (["private", "uniqueLocal", "carrierGradeNat"].includes(range))
    return policy.allowPrivate ? undefined : `${address} is a private address (allow with SIGIL_WEBHOOK_ALLOW_PRIVATE=true)`;
  // Link-local (cloud metadata services live there), unspecified, multicast, broadcast, reserved…
  return `${address} is a ${range} address, which webhooks never reach`;
}

/** The checks of a webhook URL that need no network: http(s), no credentials, and, when the host
 * is an address, one the policy allows. Returns the URL as stored. */
export function webhookUrl(raw: string, policy: DestinationPolicy, field: string): string {
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch {
    throw serviceError("WEBHOOK_URL_INVALID", `${field} must be an http or https URL, got "${raw}"`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw serviceError("WEBHOOK_URL_INVALID", `${field} must be an http or https URL, got ${url.protocol}`);
  if (url.username || url.password) throw serviceError("WEBHOOK_URL_INVALID", `${field} must not carry credentials (user:password@)`);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (net.isIP(host)) {
    const problem = forbiddenAddress(host, policy);
    if (problem) throw serviceError("WEBHOOK_DESTINATION_FORBIDDEN", `${field}: ${problem}`);
  }
  return url.toString();
}

/**
 * Checks a webhook URL when it is set: `webhookUrl`, and a host name must resolve only to addresses
 * the policy allows. Runs before the activity's transaction (it waits on DNS); the dispatcher checks
 * the addresses again when it dials, since a name may resolve differently later.
 */
export async function checkDestination(raw: string, policy: DestinationPolicy, field: string): Promise<string> {
  const checked = webhookUrl(raw, policy, field);
  const url = new URL(checked);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (net.isIP(host)) return checked;
  let addresses: string[];
  try {
    addresses = (await dns.lookup(host, { all: true, verbatim: true })).map((a) => a.address);
  } catch {
    throw serviceError("WEBHOOK_URL_INVALID", `${field}: the host ${host} does not resolve`);
  }
  for (const address of addresses) {
    const problem = forbiddenAddress(address, policy);
    if (problem) throw serviceError("WEBHOOK_DESTINATION_FORBIDDEN", `${field}: ${url.host} resolves to ${problem}`);
  }
  return checked;
}

/** A URL for logs and the delivery log: scheme, host and path, never the query (tokens live there). */
export function redactedUrl(raw: string): string {
  try {
    const url = new URL(raw);
    return `${url.protocol}//${url.host}${url.pathname}${url.search ? "?…" : ""}`;
  } catch {
    return "<not a URL>";
  }
}
