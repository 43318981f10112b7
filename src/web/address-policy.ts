/**
 * @module web/address-policy
 * Which IP addresses the guarded fetch may connect to, as pure address arithmetic on `ipaddr.js` values: no strings
 * are split by hand, so every notation ipaddr understands (and the WHATWG URL parser produces) is judged the same way.
 * An address is public only when ipaddr calls it `unicast` and it is in none of the extra ranges below; IPv6 forms that
 * carry an IPv4 address (mapped, translated, NAT64, 6to4, IPv4-compatible) are judged by the IPv4 address inside.
 */
import ipaddr from 'ipaddr.js';
import { AgentryError } from '../errors.js';

type IPv4 = ipaddr.IPv4;
type IPv6 = ipaddr.IPv6;
type Cidr<T> = [T, number];
type RangeList<T> = Record<string, Cidr<T>[]>;

const v4 = (cidr: string): Cidr<IPv4> => ipaddr.IPv4.parseCIDR(cidr);
const v6 = (cidr: string): Cidr<IPv6> => ipaddr.IPv6.parseCIDR(cidr);

/**
 * Ranges checked before ipaddr's own `range()`, either because ipaddr does not block them (cloud metadata answers
 * on addresses that would otherwise be link-local or private, but deserve their own name in messages) or because
 * ipaddr lumps them under a vaguer name (`reserved`).
 */
const V4_NAMED: RangeList<IPv4> = {
  // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle; Alibaba Cloud.
  cloudMetadata: [v4('169.254.169.254/32'), v4('100.100.100.200/32')],
  benchmarking: [v4('198.18.0.0/15')],
  documentation: [v4('192.0.2.0/24'), v4('198.51.100.0/24'), v4('203.0.113.0/24')],
};

const V6_NAMED: RangeList<IPv6> = {
  // AWS's IPv6 instance metadata endpoint.
  cloudMetadata: [v6('fd00:ec2::254/128')],
  documentation: [v6('2001:db8::/32'), v6('3fff::/20')],
  // RFC 8215 local-use NAT64: the embedded IPv4 position depends on the operator's prefix, and the prefix is never
  // globally routed, so the whole range is refused rather than decoded.
  nat64LocalUse: [v6('64:ff9b:1::/48')],
};

// The well-known NAT64 prefix (RFC 6052) puts the IPv4 address in the last 32 bits.
const NAT64_WELL_KNOWN = v6('64:ff9b::/96');
// Deprecated IPv4-compatible addresses (::a.b.c.d); ipaddr calls them unicast, yet they carry an IPv4 address.
const IPV4_COMPATIBLE = v6('::/96');

/** ipaddr range names renamed for messages; every other non-`unicast` name is used as ipaddr spells it. */
const RENAMED: Record<string, string> = { deprecatedSiteLocal: 'siteLocal' };

const PHRASES: Record<string, string> = {
  loopback: 'a loopback address',
  private: 'a private address',
  linkLocal: 'a link-local address',
  carrierGradeNat: 'a carrier-grade NAT (shared) address',
  multicast: 'a multicast address',
  unspecified: 'an unspecified address',
  broadcast: 'the broadcast address',
  benchmarking: 'a benchmarking address',
  documentation: 'a documentation address',
  reserved: 'a reserved address',
  cloudMetadata: 'a cloud metadata address',
  uniqueLocal: 'a unique-local (private) address',
  siteLocal: 'a site-local (private) address',
  teredo: 'a Teredo tunnel address',
  nat64LocalUse: 'a local-use NAT64 address',
  invalid: 'not a valid IP address',
};

/**
 * The name of the blocked range `ip` falls in (`'loopback'`, `'private'`, `'linkLocal'`, `'carrierGradeNat'`,
 * `'multicast'`, `'unspecified'`, `'broadcast'`, `'benchmarking'`, `'documentation'`, `'reserved'`,
 * `'cloudMetadata'`, `'uniqueLocal'`, `'siteLocal'`, `'teredo'`, …), or `null` when the address is public.
 * A string that is not an IP address is `'invalid'`: refusing is the safe answer.
 *
 * @example
 * classifyAddress('10.0.0.5'); // 'private'
 * classifyAddress('::ffff:7f00:1'); // 'loopback' (IPv4-mapped 127.0.0.1)
 * classifyAddress('93.184.215.14'); // null
 */
export function classifyAddress(ip: string): string | null {
  if (!ipaddr.isValid(ip)) return 'invalid';
  const addr = ipaddr.parse(ip);
  return addr.kind() === 'ipv4' ? classifyIPv4(addr as IPv4) : classifyIPv6(addr as IPv6);
}

/** "a private address", "a loopback address", … for a name returned by {@link classifyAddress}. */
export function describeRange(range: string): string {
  return PHRASES[range] ?? `a special-purpose (${range}) address`;
}

function classifyIPv4(addr: IPv4): string | null {
  const named = ipaddr.subnetMatch(addr, V4_NAMED, 'none');
  if (named !== 'none') return named;
  const range = addr.range();
  return range === 'unicast' ? null : range;
}

function classifyIPv6(addr: IPv6): string | null {
  const named = ipaddr.subnetMatch(addr, V6_NAMED, 'none');
  if (named !== 'none') return named;
  const range = addr.range();
  if (range === 'unspecified' || range === 'loopback') return range;
  const embedded = embeddedIPv4(addr, range);
  if (embedded) return classifyIPv4(embedded);
  // Teredo lands here on purpose: its IPv4 address is obfuscated and reached through a relay, so it is refused whole.
  if (range === 'unicast') return null;
  return RENAMED[range] ?? range;
}

/** The IPv4 address an IPv6 address carries, for the forms where the network would deliver to that IPv4 host. */
function embeddedIPv4(addr: IPv6, range: string): IPv4 | undefined {
  const bytes = addr.toByteArray();
  if (range === 'ipv4Mapped' || range === 'rfc6145' || addr.match(NAT64_WELL_KNOWN) || addr.match(IPV4_COMPATIBLE)) {
    return ipaddr.fromByteArray(bytes.slice(12, 16)) as IPv4;
  }
  // 6to4 (RFC 3056): 2002:AABB:CCDD::/48 tunnels to AA.BB.CC.DD.
  if (range === '6to4') return ipaddr.fromByteArray(bytes.slice(2, 6)) as IPv4;
  return undefined;
}

/** The parsed form of an allow list: host names (exact or `*.suffix`) and networks opened although private. */
export interface AllowList {
  /** True when `host` (a name from a URL) is listed, exactly or under a `*.` wildcard entry. */
  allowsHost(host: string): boolean;
  /** True when `ip` lies inside a listed network; an IPv4-mapped IPv6 address also matches its IPv4 network. */
  allowsAddress(ip: string): boolean;
}

// Host name labels as they appear after the WHATWG URL parser lowercased them; `_` occurs in real-world names.
const HOST_NAME = /^(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*$/;

/**
 * Parses allow entries: host names (`localhost`, `api.internal.example`, `*.internal.example` for any subdomain),
 * IP addresses (`10.0.0.5`, `::1`, `[::1]`) and CIDRs (`127.0.0.1/32`, `fd00::/8`). Blank entries are skipped;
 * anything else throws `invalid_request` naming the entry.
 *
 * @example
 * const allow = parseAllowList(['127.0.0.1/32', 'localhost']);
 * allow.allowsAddress('127.0.0.1'); // true
 * allow.allowsHost('localhost'); // true
 */
export function parseAllowList(entries: readonly string[]): AllowList {
  const hosts = new Set<string>();
  const suffixes: string[] = [];
  const networks: Cidr<IPv4 | IPv6>[] = [];
  for (const raw of entries) {
    const entry = raw.trim().toLowerCase().replace(/\.$/, '');
    if (entry === '') continue;
    const bare = entry.startsWith('[') && entry.endsWith(']') ? entry.slice(1, -1) : entry;
    if (ipaddr.isValidCIDR(bare)) networks.push(ipaddr.parseCIDR(bare));
    else if (ipaddr.isValid(bare)) {
      const addr = ipaddr.parse(bare);
      networks.push([addr, addr.kind() === 'ipv4' ? 32 : 128]);
    } else if (HOST_NAME.test(entry)) {
      if (entry.startsWith('*.')) suffixes.push(entry.slice(1));
      else hosts.add(entry);
    } else {
      throw new AgentryError(
        'invalid_request',
        `Invalid fetch allow entry ${JSON.stringify(raw)}: expected a host name (e.g. localhost or *.internal.example), ` +
          'an IP address or a CIDR (e.g. 127.0.0.1/32)',
      );
    }
  }
  return {
    allowsHost(host) {
      const name = host.toLowerCase().replace(/\.$/, '');
      return hosts.has(name) || suffixes.some((suffix) => name.endsWith(suffix));
    },
    allowsAddress(ip) {
      if (networks.length === 0 || !ipaddr.isValid(ip)) return false;
      const addr = ipaddr.parse(ip);
      const forms: (IPv4 | IPv6)[] = [addr];
      if (addr.kind() === 'ipv6' && (addr as IPv6).isIPv4MappedAddress()) forms.push((addr as IPv6).toIPv4Address());
      return forms.some((form) => networks.some(([net, bits]) => form.kind() === net.kind() && form.match(net, bits)));
    },
  };
}
