/**
 * Which network addresses the gateway may call upstream. A project admin chooses a
 * model's `upstream_base_url`, so without this check an admin of one tenant could make
 * the gateway call the service's own network: loopback, private ranges, the cloud
 * metadata endpoint (169.254.169.254). The check runs twice: on the URL when a model is
 * created or changed (literal addresses, localhost names, and what a name resolves to
 * then), and on every connection after DNS resolution (a name may resolve elsewhere at
 * call time). `UPSTREAM_ALLOW_PRIVATE=1` turns both off, for the mock upstream of the
 * demo and the tests. The same checks guard webhook endpoints (src/webhooks/), which
 * name their own field in a refusal (UrlSubject).
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/** Ranges refused, each with the name the refusal gives it. */
const ranges: [name: string, family: 'ipv4' | 'ipv6', network: string, prefix: number][] = [
  ['an unspecified ("this network")', 'ipv4', '0.0.0.0', 8],
  ['a private', 'ipv4', '10.0.0.0', 8],
  ['a shared (carrier-grade NAT)', 'ipv4', '100.64.0.0', 10],
  ['a loopback', 'ipv4', '127.0.0.0', 8],
  ['a link-local (cloud metadata)', 'ipv4', '169.254.0.0', 16],
  ['a private', 'ipv4', '172.16.0.0', 12],
  ['a reserved', 'ipv4', '192.0.0.0', 24],
  ['a private', 'ipv4', '192.168.0.0', 16],
  ['a reserved (benchmarking)', 'ipv4', '198.18.0.0', 15],
  ['a multicast', 'ipv4', '224.0.0.0', 4],
  ['a reserved', 'ipv4', '240.0.0.0', 4],
  ['an unspecified', 'ipv6', '::', 128],
  ['a loopback', 'ipv6', '::1', 128],
  // IPv4-compatible addresses (deprecated); `::` and `::1` above are more precise.
  ['a reserved', 'ipv6', '::', 96],
  ['a unique-local (private)', 'ipv6', 'fc00::', 7],
  ['a link-local', 'ipv6', 'fe80::', 10],
  ['a site-local (private)', 'ipv6', 'fec0::', 10],
  ['a multicast', 'ipv6', 'ff00::', 8],
];

const lists = ranges.map(([name, family, network, prefix]) => {
  const list = new BlockList();
  list.addSubnet(network, prefix, family);
  return { name, list };
});

/** The 8 groups of an IPv6 address (`::` expanded, a dotted IPv4 tail converted). */
function ipv6Groups(address: string): number[] {
  let text = address.replace(/%.*$/, '');
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[1].split('.').map(Number);
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, null];
  const parse = (s: string) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  const h = parse(head);
  if (tail === null) return h;
  const t = parse(tail);
  return [...h, ...Array<number>(8 - h.length - t.length).fill(0), ...t];
}

/**
 * The IPv4 address an IPv6 address carries and routes to: IPv4-mapped (`::ffff:a.b.c.d`),
 * IPv4-translated (`::ffff:0:a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`).
 * Null for any other.
 */
function embeddedIpv4(address: string): string | null {
  const g = ipv6Groups(address);
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && g[5] === 0xffff) return v4(g[6], g[7]);
  if (zeros(0, 4) && g[4] === 0xffff && g[5] === 0) return v4(g[6], g[7]);
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return v4(g[6], g[7]);
  if (g[0] === 0x2002) return v4(g[1], g[2]);
  return null;
}

/**
 * What kind of non-public address this is (`"a loopback"`...), or null for a public one.
 * Not an IP address at all: null.
 */
function privateRange(address: string): string | null {
  const family = isIP(address);
  if (family === 0) return null;
  if (family === 6) {
    const v4 = embeddedIpv4(address);
    if (v4 !== null) return privateRange(v4);
  }
  const type = family === 4 ? 'ipv4' : 'ipv6';
  return lists.find((l) => l.list.check(address, type))?.name ?? null;
}

/** Thrown by the connect-time lookup; UpstreamClient reports it as kind `refused`. */
export const private_address_code = 'ERR_UPSTREAM_PRIVATE_ADDRESS';

/**
 * Whose URL a refusal is about: the field it names and what the service calls. A model's
 * upstream by default; webhook endpoints (src/webhooks/) pass their own.
 */
export interface UrlSubject {
  field: string;
  /** Who calls only public addresses: "the gateway", "webhooks". */
  caller: string;
}

const upstream_subject: UrlSubject = { field: 'upstream_base_url', caller: 'the gateway calls' };

function allowHint(subject: UrlSubject): string {
  return `${subject.caller} only public addresses (set UPSTREAM_ALLOW_PRIVATE=1 to allow private ones)`;
}

function refusal(host: string, address: string, range: string, subject: UrlSubject): string {
  const what = host === address ? address : `${host} (resolves to ${address})`;
  return `${subject.field} points at ${what}, ${range} address; ${allowHint(subject)}`;
}

/** A name that always means this machine (RFC 6761), whatever DNS says. */
function isLocalhostName(name: string): boolean {
  const n = name.toLowerCase().replace(/\.+$/, '');
  return n === 'localhost' || n.endsWith('.localhost');
}

/** The host of a URL as an address or name: without IPv6 brackets. */
function hostOf(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1');
}

/**
 * Why the gateway must not call this base URL, or null when it may. Literal addresses in
 * every form that URL parsing normalises (`http://2130706433`, `http://0x7f.1`,
 * `http://[::ffff:127.0.0.1]`) are checked as the address they become; a name is resolved
 * and refused when any of its addresses is private. A name that does not resolve now is
 * accepted: every call checks again what it resolves to then.
 */
export async function upstreamUrlRefusal(baseUrl: string, lookup: LookupFunction = dnsLookup, subject = upstream_subject): Promise<string | null> {
  const url = new URL(baseUrl);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `${subject.field} must be an http or https URL`;
  const host = hostOf(url);
  if (isIP(host)) {
    const range = privateRange(host);
    return range === null ? null : refusal(host, host, range, subject);
  }
  if (isLocalhostName(host)) return `${subject.field} points at ${host}, a loopback name; ${allowHint(subject)}`;
  const addresses = await new Promise<LookupAddress[]>((resolve) => {
    lookup(host, { all: true }, (err, result) => resolve(err || typeof result === 'string' ? [] : result));
  });
  for (const { address } of addresses) {
    const range = privateRange(address);
    if (range !== null) return refusal(host, address, range, subject);
  }
  return null;
}

/** The refusal of a literal IP host at call time (a connection to it makes no lookup). */
export function literalHostRefusal(url: URL, subject = upstream_subject): string | null {
  const host = hostOf(url);
  if (!isIP(host)) return null;
  const range = privateRange(host);
  return range === null ? null : refusal(host, host, range, subject);
}

/**
 * A `lookup` for net/tls connections that resolves with `lookup` and fails, before any
 * connection is made, when any address of the name is private: a name that resolves both
 * ways is as suspect as one that resolves only inward.
 */
export function publicOnlyLookup(lookup: LookupFunction = dnsLookup, subject = upstream_subject): LookupFunction {
  return (hostname, options, callback) => {
    lookup(hostname, { ...options, all: true }, (err, result) => {
      if (err) return callback(err, '');
      const all = typeof result === 'string' ? [] : result;
      for (const { address } of all) {
        const range = privateRange(address);
        if (range !== null) return callback(Object.assign(new Error(refusal(hostname, address, range, subject)), { code: private_address_code }), '');
      }
      if (options.all) return callback(null, all);
      if (all.length === 0) return callback(Object.assign(new Error(`no address for ${hostname}`), { code: 'ENOTFOUND' }), '');
      return callback(null, all[0].address, all[0].family);
    });
  };
}
