import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import { classifyAddress, parseAllowList } from '../../src/web/address-policy.js';
import { createGuardedFetch, FetchRefusedError, type GuardedFetch } from '../../src/web/guarded-fetch.js';

const MB = 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 'a');
// 50 MB of zeros compresses to about 50 KB: a decompression bomb small enough to build once per run.
const BOMB = zlib.gzipSync(Buffer.alloc(50 * MB));

// ---------------------------------------------------------------------------------------------------------------
// Safety net: tests must never send traffic to anything but loopback, even if the guard under test were broken.
// undici calls net.connect at request time, so a spy on it sees (and stops) every outgoing connection.
// ---------------------------------------------------------------------------------------------------------------
const isLoopback = (host: unknown) => host === '127.0.0.1' || host === '::1' || host === '::ffff:127.0.0.1';
const connects: string[] = [];
const violations: string[] = [];
const realConnect = net.connect;
vi.spyOn(net, 'connect').mockImplementation(((options: net.NetConnectOpts & { host?: string }, ...rest: unknown[]) => {
  const host = String(options.host);
  connects.push(host);
  const lookup = 'lookup' in options ? options.lookup : undefined;
  if (lookup) {
    // A name: let the connection through only if the addresses it is pinned to are loopback.
    options = {
      ...options,
      lookup: (hostname, lookupOptions, callback) =>
        lookup(hostname, lookupOptions, (err, address, family) => {
          const addresses = Array.isArray(address) ? address.map((a) => a.address) : [address];
          if (!err && !addresses.every(isLoopback)) {
            violations.push(`${hostname} -> ${addresses.join(', ')}`);
            return callback(new Error('test safety net: not loopback'), '');
          }
          callback(err, address, family);
        }),
    };
  } else if (!isLoopback(host)) {
    violations.push(host);
    throw new Error(`test safety net: refused to connect to ${host}`);
  }
  return (realConnect as (...args: unknown[]) => net.Socket)(options, ...rest);
}) as typeof net.connect);

// ---------------------------------------------------------------------------------------------------------------
// One loopback server with a route per behaviour.
// ---------------------------------------------------------------------------------------------------------------
let server: http.Server;
let port: number;
let base: string;
/** Bytes the /forever route wrote before the client hung up. */
let foreverSent = 0;
let foreverClosed: Promise<void> = Promise.resolve();
/** Requests the server saw, for asserting what reached it. */
const seen: Array<{ path: string; host: string | undefined; method: string; authorization: string | undefined }> = [];

function route(req: http.IncomingMessage, res: http.ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://localhost');
  seen.push({
    path: url.pathname,
    host: req.headers.host,
    method: req.method ?? '',
    authorization: req.headers.authorization,
  });
  const redirect = (status: number, location: string) => res.writeHead(status, { location }).end();
  switch (url.pathname) {
    case '/hello':
      res.end('hello');
      return;
    case '/echo': {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ method: req.method, headers: req.headers, body }));
      });
      return;
    }
    case '/chain': {
      // /chain?n=3 redirects three times, then answers.
      const n = Number(url.searchParams.get('n'));
      if (n > 0) redirect(302, `/chain?n=${n - 1}`);
      else res.end('end of chain');
      return;
    }
    case '/redirect':
      // /redirect?to=URL&status=303
      redirect(Number(url.searchParams.get('status') ?? 302), url.searchParams.get('to') ?? '/hello');
      return;
    case '/forever': {
      // Streams 64 KB chunks, honouring backpressure, until 50 MB are sent or the client goes away.
      foreverSent = 0;
      foreverClosed = new Promise((resolve) => res.on('close', resolve));
      const write = () => {
        while (foreverSent < 50 * MB && !res.destroyed) {
          foreverSent += CHUNK.length;
          if (!res.write(CHUNK)) return void res.once('drain', write);
        }
        res.end();
      };
      write();
      return;
    }
    case '/slow': {
      // A byte every 20 ms, never ending.
      res.writeHead(200, { 'content-type': 'text/plain' });
      const timer = setInterval(() => res.write('.'), 20);
      res.on('close', () => clearInterval(timer));
      return;
    }
    case '/hang':
      // Never answers; the socket is destroyed when the client gives up.
      return;
    case '/bomb':
      res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip', 'content-length': BOMB.length });
      res.end(BOMB);
      return;
    case '/gzip': {
      const text = 'hello, compressed world';
      res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip' });
      res.end(zlib.gzipSync(text));
      return;
    }
    default:
      res.writeHead(404).end('not found');
  }
}

beforeAll(async () => {
  server = http.createServer(route);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
});

const fetches: GuardedFetch[] = [];
afterAll(async () => {
  await Promise.all(fetches.map((f) => f.close()));
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  vi.restoreAllMocks();
  expect(violations).toEqual([]);
});

afterEach(() => {
  seen.length = 0;
});

/** A fake resolver: names from `table` resolve to the listed addresses; every call is counted. */
function fakeLookup(table: Record<string, string[] | ((call: number) => string[])>) {
  const calls: string[] = [];
  const lookup = async (hostname: string) => {
    calls.push(hostname);
    const entry = table[hostname];
    if (!entry) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    const addresses = typeof entry === 'function' ? entry(calls.filter((c) => c === hostname).length) : entry;
    return addresses.map((address) => ({ address, family: address.includes(':') ? (6 as const) : (4 as const) }));
  };
  return { lookup, calls };
}

function guarded(options: Parameters<typeof createGuardedFetch>[0] = {}): GuardedFetch {
  const f = createGuardedFetch({ env: {}, ...options });
  fetches.push(f);
  return f;
}

async function refusal(promise: Promise<unknown>): Promise<FetchRefusedError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FetchRefusedError);
  return err as FetchRefusedError;
}

// ---------------------------------------------------------------------------------------------------------------
describe('classifyAddress', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.0.1', 'private'],
    ['169.254.1.1', 'linkLocal'],
    ['169.254.169.254', 'cloudMetadata'],
    ['100.100.100.200', 'cloudMetadata'],
    ['100.64.0.1', 'carrierGradeNat'],
    ['224.0.0.251', 'multicast'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['255.255.255.255', 'broadcast'],
    ['198.18.0.1', 'benchmarking'],
    ['198.19.255.255', 'benchmarking'],
    ['192.0.2.1', 'documentation'],
    ['203.0.113.9', 'documentation'],
    ['240.0.0.1', 'reserved'],
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:a9fe:a9fe', 'cloudMetadata'],
    ['::ffff:0:a00:1', 'private'], // IPv4-translated (RFC 6145)
    ['::7f00:1', 'loopback'], // IPv4-compatible
    ['64:ff9b::7f00:1', 'loopback'], // NAT64 well-known prefix
    ['64:ff9b::a00:1', 'private'],
    ['64:ff9b:1::1', 'nat64LocalUse'],
    ['2002:7f00:1::', 'loopback'], // 6to4
    ['2002:c0a8:101::1', 'private'],
    ['2001::1', 'teredo'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'],
    ['fe80::1', 'linkLocal'],
    ['fe80::1%eth0', 'linkLocal'],
    ['fd00::1', 'uniqueLocal'],
    ['fc00::1', 'uniqueLocal'],
    ['fd00:ec2::254', 'cloudMetadata'],
    ['fec0::1', 'siteLocal'],
    ['ff02::1', 'multicast'],
    ['2001:db8::1', 'documentation'],
    ['2001:2::1', 'benchmarking'],
    ['not an address', 'invalid'],
  ])('%s is %s', (ip, range) => {
    expect(classifyAddress(ip)).toBe(range);
  });

  it.each([
    '8.8.8.8',
    '93.184.215.14',
    '2606:4700:4700::1111',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
    '2002:808:808::1',
  ])('%s is public', (ip) => {
    expect(classifyAddress(ip)).toBeNull();
  });
});

describe('parseAllowList', () => {
  it('matches CIDRs, bare addresses, host names and wildcards', () => {
    const allow = parseAllowList(['127.0.0.1/32', ' [::1] ', '10.0.0.0/8', 'LocalHost', '*.internal.example', '']);
    expect(allow.allowsAddress('127.0.0.1')).toBe(true);
    expect(allow.allowsAddress('::ffff:127.0.0.1')).toBe(true);
    expect(allow.allowsAddress('127.0.0.2')).toBe(false);
    expect(allow.allowsAddress('::1')).toBe(true);
    expect(allow.allowsAddress('10.200.0.1')).toBe(true);
    expect(allow.allowsAddress('192.168.0.1')).toBe(false);
    expect(allow.allowsHost('localhost')).toBe(true);
    expect(allow.allowsHost('localhost.')).toBe(true);
    expect(allow.allowsHost('db.internal.example')).toBe(true);
    expect(allow.allowsHost('internal.example')).toBe(false);
    expect(allow.allowsHost('evilinternal.example')).toBe(false);
  });

  it.each(['http://localhost', '10.0.0.0/33', 'host name', 'localhost:8080'])('refuses %j', (entry) => {
    expect(() => parseAllowList([entry])).toThrow(/Invalid fetch allow entry/);
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('createGuardedFetch refuses', () => {
  const names = fakeLookup({
    'internal.test': ['10.0.0.5'],
    'mixed.test': ['93.184.215.14', '192.168.0.10'],
    'ula.test': ['fd12:3456::1'],
    'metadata.test': ['169.254.169.254'],
    localhost: ['127.0.0.1', '::1'],
  });

  // Every URL here would be reachable (loopback server) or routed somewhere private if the guard failed.
  const forms: Array<[string, () => string, FetchRefusedError['reason']]> = [
    ['127.0.0.1', () => `http://127.0.0.1:${port}/hello`, 'address'],
    ['127.1', () => `http://127.1:${port}/hello`, 'address'],
    ['2130706433', () => `http://2130706433:${port}/hello`, 'address'],
    ['0x7f000001', () => `http://0x7f000001:${port}/hello`, 'address'],
    ['0177.0.0.1', () => `http://0177.0.0.1:${port}/hello`, 'address'],
    ['0.0.0.0', () => `http://0.0.0.0:${port}/hello`, 'address'],
    ['[::]', () => `http://[::]:${port}/hello`, 'address'],
    ['[::1]', () => `http://[::1]:${port}/hello`, 'address'],
    ['[::ffff:127.0.0.1]', () => `http://[::ffff:127.0.0.1]:${port}/hello`, 'address'],
    ['[::ffff:7f00:1]', () => `http://[::ffff:7f00:1]:${port}/hello`, 'address'],
    ['[::7f00:1] (IPv4-compatible)', () => `http://[::7f00:1]/`, 'address'],
    ['[64:ff9b::7f00:1] (NAT64)', () => 'http://[64:ff9b::7f00:1]/', 'address'],
    ['[64:ff9b:1::a00:1] (local NAT64)', () => 'http://[64:ff9b:1::a00:1]/', 'address'],
    ['[2002:7f00:1::] (6to4)', () => 'http://[2002:7f00:1::]/', 'address'],
    ['[2001::1] (Teredo)', () => 'http://[2001::1]/', 'address'],
    ['169.254.169.254', () => 'http://169.254.169.254/latest/meta-data/', 'address'],
    ['[::ffff:a9fe:a9fe]', () => 'http://[::ffff:a9fe:a9fe]/latest/meta-data/', 'address'],
    ['[fd00:ec2::254]', () => 'http://[fd00:ec2::254]/latest/meta-data/', 'address'],
    ['100.100.100.200', () => 'http://100.100.100.200/latest/meta-data/', 'address'],
    ['[fe80::1]', () => 'http://[fe80::1]/', 'address'],
    ['[fd00::1]', () => 'http://[fd00::1]/', 'address'],
    ['[fec0::1]', () => 'http://[fec0::1]/', 'address'],
    ['[ff02::1]', () => 'http://[ff02::1]/', 'address'],
    ['10.0.0.1', () => 'http://10.0.0.1/', 'address'],
    ['172.16.0.1', () => 'http://172.16.0.1/', 'address'],
    ['192.168.1.1', () => 'https://192.168.1.1/', 'address'],
    ['100.64.0.1', () => 'http://100.64.0.1/', 'address'],
    ['198.18.0.1', () => 'http://198.18.0.1/', 'address'],
    ['224.0.0.1', () => 'http://224.0.0.1/', 'address'],
    ['255.255.255.255', () => 'http://255.255.255.255/', 'address'],
    ['192.0.2.1', () => 'http://192.0.2.1/', 'address'],
    ['240.0.0.1', () => 'http://240.0.0.1/', 'address'],
    ['a name resolving to a private address', () => 'http://internal.test/', 'address'],
    ['a name resolving to one public and one private address', () => 'http://mixed.test/', 'address'],
    ['a name resolving to a unique-local IPv6 address', () => 'http://ula.test/', 'address'],
    ['a name resolving to the metadata address', () => 'http://metadata.test/', 'address'],
    ['localhost', () => `http://localhost:${port}/hello`, 'address'],
    ['credentials to a private host', () => 'http://user:secret@10.0.0.1/', 'credentials'],
    ['credentials to a public host', () => 'https://user:secret@example.com/', 'credentials'],
    ['file:', () => 'file:///etc/passwd', 'scheme'],
    ['ftp:', () => 'ftp://example.com/pub/file', 'scheme'],
    ['gopher:', () => 'gopher://127.0.0.1:6379/_INFO', 'scheme'],
    ['data:', () => 'data:text/plain,hello', 'scheme'],
    ['javascript:', () => 'javascript:alert(1)', 'scheme'],
    ['blob:', () => 'blob:https://example.com/0d3a4f2e', 'scheme'],
    ['ws:', () => 'ws://127.0.0.1/', 'scheme'],
    ['a relative URL', () => '/hello', 'invalid_url'],
  ];

  it.each(forms)('%s', async (_name, url, reason) => {
    const before = connects.length;
    const err = await refusal(guarded({ lookup: names.lookup })(url()));
    expect(err.reason).toBe(reason);
    expect(err.code).toBe('invalid_request');
    expect(AgentryError.isInstance(err)).toBe(true);
    expect(connects.length).toBe(before); // refused before any connection was attempted
    expect(seen).toEqual([]);
  });

  it('covers at least 30 address forms', () => {
    expect(forms.filter(([, , reason]) => reason === 'address').length).toBeGreaterThanOrEqual(30);
  });

  it('names the host, the address and the range, and how to allow it', async () => {
    const err = await refusal(guarded({ lookup: names.lookup })('http://internal.test/'));
    expect(err.message).toBe(
      'Refused http://internal.test/: internal.test resolves to 10.0.0.5, a private address. ' +
        'Allow it with AGENTRY_FETCH_ALLOW or the fetch allow option.',
    );
    const mixed = await refusal(guarded({ lookup: names.lookup })('http://mixed.test/'));
    expect(mixed.message).toContain('mixed.test resolves to 192.168.0.10, a private address');
    const literal = await refusal(guarded()('http://[::ffff:7f00:1]/'));
    expect(literal.message).toContain('[::ffff:7f00:1] is a loopback address');
  });

  it('does not echo credentials in the message', async () => {
    const err = await refusal(guarded()('http://user:secret@10.0.0.1/'));
    expect(err.message).not.toContain('secret');
    expect(err.message).toContain('http://10.0.0.1/');
  });

  it('refuses a redirect from an allowed page to a private address before connecting to it', async () => {
    const f = guarded({ allow: ['127.0.0.1/32'] });
    const before = connects.length;
    const err = await refusal(f(`${base}/redirect?to=${encodeURIComponent('http://10.0.0.1/admin')}`));
    expect(err.reason).toBe('address');
    expect(err.message).toContain(`Refused http://10.0.0.1/admin (redirected from ${base}/redirect?to=`);
    expect(connects.slice(before).every(isLoopback)).toBe(true);
    expect(seen.map((s) => s.path)).toEqual(['/redirect']);
  });

  it.each([
    ['file:', 'file:///etc/passwd', 'scheme'],
    ['credentials', 'http://admin:admin@127.0.0.1/', 'credentials'],
    ['a private name', 'http://internal.test/', 'address'],
    ['an invalid URL', 'http://[not-ipv6/', 'invalid_url'],
  ])('refuses a redirect to %s', async (_name, to, reason) => {
    const f = guarded({ allow: ['127.0.0.1/32'], lookup: names.lookup });
    const err = await refusal(f(`${base}/redirect?to=${encodeURIComponent(to)}`));
    expect(err.reason).toBe(reason);
  });

  it('refuses the 6th redirect and follows 5', async () => {
    const f = guarded({ allow: ['127.0.0.1/32'] });
    const five = await f(`${base}/chain?n=5`);
    expect(await five.text()).toBe('end of chain');
    expect(five.redirected).toBe(true);
    expect(five.url).toBe(`${base}/chain?n=0`);
    seen.length = 0;
    const err = await refusal(f(`${base}/chain?n=6`));
    expect(err.reason).toBe('redirects');
    expect(seen).toHaveLength(6); // the 7th request is never sent
    const strict = guarded({ allow: ['127.0.0.1/32'], maxRedirects: 0 });
    expect((await refusal(strict(`${base}/chain?n=1`))).reason).toBe('redirects');
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('createGuardedFetch allows', () => {
  it('loopback pages when 127.0.0.1/32 is allowed, in every IPv4 notation', async () => {
    const f = guarded({ allow: ['127.0.0.1/32'] });
    for (const host of ['127.0.0.1', '127.1', '2130706433', '0x7f000001', '0177.0.0.1']) {
      const res = await f(`http://${host}:${port}/hello`);
      expect(res).toBeInstanceOf(Response);
      expect(res.status).toBe(200);
      expect(res.redirected).toBe(false);
      expect(res.url).toBe(`${base}/hello`);
      expect(await res.text()).toBe('hello');
    }
  });

  it('what AGENTRY_FETCH_ALLOW opens', async () => {
    const f = guarded({ env: { AGENTRY_FETCH_ALLOW: ' 192.168.0.0/16, 127.0.0.1/32 ' } });
    expect(await (await f(`${base}/hello`)).text()).toBe('hello');
    const closed = guarded({ env: {} });
    expect((await refusal(closed(`${base}/hello`))).reason).toBe('address');
  });

  it('an allowed host name whatever it resolves to', async () => {
    const { lookup } = fakeLookup({ 'dev.internal.example': ['127.0.0.1'] });
    const f = guarded({ allow: ['*.internal.example'], lookup });
    const res = await f(`http://dev.internal.example:${port}/hello`);
    expect(await res.text()).toBe('hello');
  });

  it('a gzip body, decompressed', async () => {
    const res = await guarded({ allow: ['127.0.0.1/32'] })(`${base}/gzip`);
    expect(await res.text()).toBe('hello, compressed world');
  });

  it('sends a User-Agent, and keeps the caller’s', async () => {
    const f = guarded({ allow: ['127.0.0.1/32'] });
    const own = (await (await f(`${base}/echo`)).json()) as { headers: Record<string, string> };
    expect(own.headers['user-agent']).toMatch(/^agentry\//);
    const custom = await f(`${base}/echo`, { headers: { 'User-Agent': 'custom/1' } });
    expect(((await custom.json()) as { headers: Record<string, string> }).headers['user-agent']).toBe('custom/1');
  });

  it('redirects as browsers do: 303 turns POST into GET without body, 307 keeps both', async () => {
    const f = guarded({ allow: ['127.0.0.1/32'] });
    const post = { method: 'POST', body: 'payload', headers: { 'content-type': 'text/plain' } };
    const see = (await (await f(`${base}/redirect?status=303&to=/echo`, post)).json()) as Record<string, unknown>;
    expect(see).toMatchObject({ method: 'GET', body: '' });
    expect((see['headers'] as Record<string, string>)['content-type']).toBeUndefined();
    const temp = (await (await f(`${base}/redirect?status=307&to=/echo`, post)).json()) as Record<string, unknown>;
    expect(temp).toMatchObject({ method: 'POST', body: 'payload' });
  });

  it('posts a FormData body as multipart', async () => {
    const form = new FormData();
    form.set('field', 'value');
    const res = await guarded({ allow: ['127.0.0.1/32'] })(`${base}/echo`, { method: 'POST', body: form });
    const echo = (await res.json()) as { headers: Record<string, string>; body: string };
    expect(echo.headers['content-type']).toMatch(/^multipart\/form-data; boundary=/);
    expect(echo.body).toContain('name="field"\r\n\r\nvalue');
  });

  it('returns the redirect itself with redirect: manual', async () => {
    const res = await guarded({ allow: ['127.0.0.1/32'] })(`${base}/redirect?to=/hello`, { redirect: 'manual' });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe('/hello');
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('createGuardedFetch pins the connection', () => {
  it('to the checked address: one lookup per hop, Host is the name', async () => {
    // A rebinding resolver: loopback (allowed) the first time, a private address on every later call. Pinning means
    // the connection never asks again; the safety net above would throw if it did and got 10.0.0.1.
    const { lookup, calls } = fakeLookup({ 'pinned.test': (n) => (n === 1 ? ['127.0.0.1'] : ['10.0.0.1']) });
    const f = guarded({ allow: ['127.0.0.1/32'], lookup });
    const res = await f(`http://pinned.test:${port}/echo`);
    const echo = (await res.json()) as { headers: Record<string, string> };
    expect(echo.headers['host']).toBe(`pinned.test:${port}`);
    expect(calls).toEqual(['pinned.test']);
    // The next request resolves again and is checked again: now refused.
    const err = await refusal(f(`http://pinned.test:${port}/echo`));
    expect(err.message).toContain('pinned.test resolves to 10.0.0.1, a private address');
    expect(calls).toEqual(['pinned.test', 'pinned.test']);
  });

  it('through redirects: each hop resolved once, credentials dropped across origins', async () => {
    const { lookup, calls } = fakeLookup({ 'pinned.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] });
    const f = guarded({ allow: ['127.0.0.1/32'], lookup });
    const to = `http://other.test:${port}/echo`;
    const res = await f(`http://pinned.test:${port}/redirect?to=${encodeURIComponent(to)}`, {
      headers: { authorization: 'Bearer secret' },
    });
    const echo = (await res.json()) as { headers: Record<string, string> };
    expect(res.url).toBe(to);
    expect(res.redirected).toBe(true);
    expect(echo.headers['host']).toBe(`other.test:${port}`);
    expect(echo.headers['authorization']).toBeUndefined();
    expect(seen[0]?.authorization).toBe('Bearer secret');
    expect(calls).toEqual(['pinned.test', 'other.test']);
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('createGuardedFetch limits', () => {
  it('cuts a 50 MB body at the cap', async () => {
    const f = guarded({ allow: ['127.0.0.1/32'], maxBytes: MB });
    const res = await f(`${base}/forever`);
    const reader = res.body!.getReader();
    let received = 0;
    const err = await (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return undefined;
        received += value.byteLength;
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FetchRefusedError);
    expect((err as FetchRefusedError).reason).toBe('too_large');
    expect(received).toBeLessThanOrEqual(MB);
    await foreverClosed; // the connection was dropped, not drained
    expect(foreverSent).toBeLessThan(25 * MB);
  });

  it('applies a per-call maxBytes', async () => {
    const f = guarded({ allow: ['127.0.0.1/32'] });
    const err = await refusal((await f(`${base}/forever`, { maxBytes: 100_000 })).arrayBuffer());
    expect(err.reason).toBe('too_large');
    expect(err.message).toContain('larger than 100000 bytes');
  });

  it('refuses a gzip body whose decompressed size exceeds the cap (decompression bomb)', async () => {
    expect(BOMB.length).toBeLessThan(MB); // compressed, it is under the cap
    const res = await guarded({ allow: ['127.0.0.1/32'], maxBytes: MB })(`${base}/bomb`);
    const err = await refusal(res.arrayBuffer());
    expect(err.reason).toBe('too_large');
  });

  it('ends a never-ending slow body at the time cap', async () => {
    const started = Date.now();
    const res = await guarded({ allow: ['127.0.0.1/32'], timeoutMs: 300 })(`${base}/slow`);
    expect(res.status).toBe(200);
    const err = await refusal(res.text());
    expect(err.reason).toBe('timeout');
    expect(err.message).toContain('300 ms');
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('ends a request whose headers never come', async () => {
    const err = await refusal(guarded({ allow: ['127.0.0.1/32'] })(`${base}/hang`, { timeoutMs: 200 }));
    expect(err.reason).toBe('timeout');
  });

  it('counts a slow lookup against the time cap', async () => {
    const lookup = () => new Promise<never>(() => {});
    const err = await refusal(guarded({ lookup, timeoutMs: 100 })('http://slow-dns.test/'));
    expect(err.reason).toBe('timeout');
  });

  it('passes the caller’s abort on', async () => {
    const controller = new AbortController();
    const pending = guarded({ allow: ['127.0.0.1/32'] })(`${base}/hang`, { signal: controller.signal });
    controller.abort(new Error('caller gave up'));
    await expect(pending).rejects.toThrow('caller gave up');
  });
});

describe('createGuardedFetch options', () => {
  it.each([
    [{ maxBytes: -1 }, /maxBytes/],
    [{ timeoutMs: 1.5 }, /timeoutMs/],
    [{ maxRedirects: -1 }, /maxRedirects/],
    [{ lookup: 'dns' }, /lookup/],
    [{ allow: 'localhost' }, /allow/],
    [{ allow: ['not a host'] }, /Invalid fetch allow entry "not a host"/],
    [{ env: { AGENTRY_FETCH_ALLOW: '10.0.0.0/99' } }, /Invalid fetch allow entry "10.0.0.0\/99"/],
    [{ maxbytes: 10 }, /maxbytes/],
  ])('rejects %j', (options, message) => {
    expect(() => createGuardedFetch(options as never)).toThrow(message);
    try {
      createGuardedFetch(options as never);
    } catch (err) {
      expect(AgentryError.isInstance(err) && err.code).toBe('invalid_request');
    }
  });

  it('rejects a bad per-call limit', async () => {
    await expect(guarded()('https://example.com/', { timeoutMs: 0 })).rejects.toThrow(/timeoutMs/);
  });
});
