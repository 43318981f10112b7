/**
 * Artifacts over HTTP: `GET /api/agents/{id}/artifacts/{artifact_id}` serves the bytes a tool kept, byte for byte,
 * to the agent's account only — through the router, through `startServer` (plain, and with its poll thread, whose
 * relay must carry binary bodies unchanged) and through the typed client.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  defineTool,
  memoryStorage,
  sqliteStorage,
  type StorageAdapter,
  type Tool,
} from 'agentry-runtime';
import { AgentryClient, AgentryClientError } from 'agentry-runtime/client';
import {
  buildOpenApiDocument,
  createFetchHandler,
  startServer,
  type FetchHandler,
  type RunningServer,
} from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { expectError, type Reply } from './conformance.js';
import { tempDir } from './helpers.js';

/** A PNG signature and header-ish bytes, every byte value ≥ 0x80 among them: a text relay would mangle them. */
const PNG = new Uint8Array([
  0x89,
  0x50,
  0x4e,
  0x47,
  0x0d,
  0x0a,
  0x1a,
  0x0a,
  0x00,
  0x00,
  0x00,
  0x0d,
  0x49,
  0x48,
  0x44,
  0x52,
  ...Array.from({ length: 256 }, (_, i) => 255 - i),
]);
const RESUME_NAME = 'résumé 📄.txt';
const RESUME_TEXT = 'Curriculum vitæ — ünïcödé ✓\n';
const MISSING = '00000000-0000-4000-8000-000000000000';

const keepFiles = defineTool({
  name: 'keep_files',
  description: 'Keeps a picture, a résumé and an oddly typed file with the agent.',
  input: z.object({}),
  idempotent: false,
  async run(_input, ctx) {
    const png = await ctx.artifacts.put({ name: 'chart "final".png', mime_type: 'image/png', data: PNG });
    const resume = await ctx.artifacts.put({
      name: RESUME_NAME,
      mime_type: 'text/plain; charset=utf-8',
      data: RESUME_TEXT,
    });
    const odd = await ctx.artifacts.put({ name: 'odd\r\nx-evil: 1', mime_type: 'text/html\r\nx-evil: 1', data: '<b>' });
    return { png, resume, odd };
  },
});

interface Fixture {
  runtime: AgentRuntime;
  keys: { a: string; b: string };
  agentId: string;
  artifacts: { png: string; resume: string; odd: string };
}

async function openFixture(storage: StorageAdapter): Promise<Fixture> {
  const runtime = await AgentRuntime.open({
    storage,
    tools: [keepFiles as Tool],
    model: scriptedModel({
      turns: (_request, { turnIndex }) =>
        turnIndex === 0 ? { toolCalls: [{ name: 'keep_files', input: {} }] } : { text: 'Kept.' },
    }),
  });
  const a = await runtime.accounts.create({ name: 'a', credits: 100 });
  const b = await runtime.accounts.create({ name: 'b', credits: 100 });
  const { agent_id } = await runtime.create({ goal: 'Keep some files', accountId: a.account.account_id });
  const done = await runtime.waitFor(agent_id);
  expect(done.status).toBe('COMPLETED');
  const listed = (await runtime.get(agent_id)).agent.artifacts ?? [];
  const idOf = (name: string) => listed.find((x) => x.name === name)!.artifact_id;
  return {
    runtime,
    keys: { a: a.apiKey!.key, b: b.apiKey!.key },
    agentId: agent_id,
    artifacts: { png: idOf('chart "final".png'), resume: idOf(RESUME_NAME), odd: idOf('odd\r\nx-evil: 1') },
  };
}

/** A way to reach the routes: the router itself, or a real server by its URL. */
interface Reach {
  fixture: Fixture;
  base: string;
  fetch: (request: Request) => Promise<Response>;
}

/** One request; the body is kept as bytes (and parsed as JSON when it is). */
async function send(
  reach: Reach,
  key: string | null,
  method: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<Reply & { bytes: Uint8Array }> {
  const all = { ...headers, ...(key === null ? {} : { 'x-api-key': key }) };
  const response = await reach.fetch(new Request(reach.base + path, { method, headers: all }));
  const bytes = new Uint8Array(await response.arrayBuffer());
  const text = new TextDecoder().decode(bytes);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json, bytes };
}

function clientOf(reach: Reach, apiKey: string): AgentryClient {
  return new AgentryClient({
    baseUrl: reach.base,
    apiKey,
    fetch: ((input: RequestInfo | URL, init?: RequestInit) => reach.fetch(new Request(input, init))) as typeof fetch,
  });
}

/** Everything the route promises, against one way of reaching it. */
function describeDownloads(name: string, reachOf: () => Reach): void {
  describe(`artifact downloads: ${name}`, () => {
    const f = () => reachOf().fixture;
    const get = (key: string | null, path: string, method = 'GET', headers: Record<string, string> = {}) =>
      send(reachOf(), key, method, path, headers);
    const artifactPath = (artifactId: string, agentId = f().agentId) =>
      `/api/agents/${agentId}/artifacts/${artifactId}`;

    it('lists them in agent.artifacts of GET /api/agents/{id}', async () => {
      const r = await get(f().keys.a, `/api/agents/${f().agentId}`);
      expect(r.status).toBe(200);
      const listed = r.json.agent.artifacts as Array<Record<string, unknown>>;
      expect(listed.map((x) => x.name)).toEqual(['chart "final".png', RESUME_NAME, 'odd\r\nx-evil: 1']);
      expect(listed[0]).toMatchObject({ artifact_id: f().artifacts.png, mime_type: 'image/png', size: PNG.byteLength });
      expect(Object.keys(listed[0]!).sort()).toEqual(['artifact_id', 'created_at', 'mime_type', 'name', 'size']);
    });

    it("serves the owner's key the bytes unchanged, with the download headers", async () => {
      const r = await get(f().keys.a, artifactPath(f().artifacts.png));
      expect(r.status, r.text).toBe(200);
      expect(r.bytes).toEqual(PNG);
      expect(r.headers.get('content-type')).toBe('image/png');
      expect(r.headers.get('content-length')).toBe(String(PNG.byteLength));
      expect(r.headers.get('content-disposition')).toBe(
        `attachment; filename="chart _final_.png"; filename*=UTF-8''chart%20%22final%22.png`,
      );
      expect(r.headers.get('x-content-type-options')).toBe('nosniff');
      expect(r.headers.get('cache-control')).toBe('private, no-cache');
      expect(r.headers.get('etag')).toBe(`"${f().artifacts.png}"`);
      expect(r.headers.get('content-security-policy')).toBe("default-src 'none'; sandbox");
      expect(r.headers.get('x-request-id')).toBeTruthy();
    });

    it('encodes a non-ASCII name per RFC 6266 / 8187, with an ASCII fallback', async () => {
      const r = await get(f().keys.a, artifactPath(f().artifacts.resume));
      expect(r.status).toBe(200);
      expect(r.text).toBe(RESUME_TEXT);
      expect(r.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      expect(r.headers.get('content-disposition')).toBe(
        `attachment; filename="r_sum_ _.txt"; filename*=UTF-8''${encodeURIComponent(RESUME_NAME)}`,
      );
    });

    it('serves a malformed media type as application/octet-stream; a name cannot add a header', async () => {
      const r = await get(f().keys.a, artifactPath(f().artifacts.odd));
      expect(r.status).toBe(200);
      expect(r.text).toBe('<b>');
      expect(r.headers.get('content-type')).toBe('application/octet-stream');
      expect(r.headers.get('x-evil')).toBeNull();
      expect(r.headers.get('content-disposition')).toBe('attachment; filename="oddx-evil: 1"');
    });

    it('HEAD answers the headers and the length without the bytes; If-None-Match gets 304', async () => {
      const head = await get(f().keys.a, artifactPath(f().artifacts.png), 'HEAD');
      expect(head.status).toBe(200);
      expect(head.bytes.byteLength).toBe(0);
      expect(head.headers.get('content-length')).toBe(String(PNG.byteLength));
      expect(head.headers.get('content-type')).toBe('image/png');
      const etag = head.headers.get('etag')!;
      const again = await get(f().keys.a, artifactPath(f().artifacts.png), 'GET', { 'if-none-match': etag });
      expect(again.status).toBe(304);
      expect(again.bytes.byteLength).toBe(0);
      expect(again.headers.get('etag')).toBe(etag);
      const other = await get(f().keys.a, artifactPath(f().artifacts.png), 'GET', { 'if-none-match': '"x"' });
      expect(other.status).toBe(200);
      expect(other.bytes).toEqual(PNG);
    });

    it("is 404 for another account's key, exactly like a missing agent", async () => {
      const r = await get(f().keys.b, artifactPath(f().artifacts.png));
      expectError(r, 404, 'not_found');
      const missing = await get(f().keys.b, artifactPath(f().artifacts.png, MISSING));
      expectError(missing, 404, 'not_found');
      expect(r.json.error.message.replace(f().agentId, MISSING)).toBe(missing.json.error.message);
      expect(r.text).not.toContain(f().artifacts.png);
      // Even a matching If-None-Match learns nothing: the account is checked before anything else.
      const etag = `"${f().artifacts.png}"`;
      expect((await get(f().keys.b, artifactPath(f().artifacts.png), 'GET', { 'if-none-match': etag })).status).toBe(
        404,
      );
      expect((await get(f().keys.b, artifactPath(f().artifacts.png), 'HEAD')).status).toBe(404);
    });

    it('is 404 for an unknown or malformed artifact id, a malformed agent id and paths around the route', async () => {
      expectError(await get(f().keys.a, artifactPath(MISSING)), 404, 'not_found');
      expectError(await get(f().keys.a, artifactPath('not-a-uuid')), 404, 'not_found');
      expectError(await get(f().keys.a, artifactPath(f().artifacts.png, 'nope')), 404, 'not_found');
      expectError(await get(f().keys.a, `/api/agents/${f().agentId}/artifacts`), 404, 'not_found');
      expectError(await get(f().keys.a, `${artifactPath(f().artifacts.png)}/more`), 404, 'not_found');
    });

    it('is 401 without a key or with an unknown one, and 405 with Allow for other methods', async () => {
      expectError(await get(null, artifactPath(f().artifacts.png)), 401, 'unauthorized');
      expectError(await get('agk_unknown', artifactPath(f().artifacts.png)), 401, 'unauthorized');
      for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
        const r = await get(f().keys.a, artifactPath(f().artifacts.png), method);
        expectError(r, 405, 'method_not_allowed');
        expect(r.headers.get('allow')).toBe('GET, HEAD');
      }
    });

    it("the typed client's getArtifact returns the same bytes, name and media type", async () => {
      const client = clientOf(reachOf(), f().keys.a);
      const png = await client.getArtifact(f().agentId, f().artifacts.png);
      expect(png).toEqual({ name: 'chart "final".png', mime_type: 'image/png', data: PNG });
      const resume = await client.getArtifact(f().agentId, f().artifacts.resume);
      expect(resume.name).toBe(RESUME_NAME);
      expect(resume.mime_type).toBe('text/plain; charset=utf-8');
      expect(new TextDecoder().decode(resume.data)).toBe(RESUME_TEXT);
      for (const [key, artifactId] of [
        [f().keys.b, f().artifacts.png],
        [f().keys.a, MISSING],
      ] as const) {
        const error = await clientOf(reachOf(), key)
          .getArtifact(f().agentId, artifactId)
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(AgentryClientError);
        expect(error).toMatchObject({ code: 'not_found', status: 404 });
        expect((error as AgentryClientError).request_id).toMatch(/^\S+$/);
      }
    });
  });
}

/** The agent is deleted: its artifacts answer 404 like anything that never existed. */
async function expectGoneAfterDelete(reach: Reach): Promise<void> {
  const { fixture } = reach;
  const path = `/api/agents/${fixture.agentId}/artifacts/${fixture.artifacts.png}`;
  expect((await send(reach, fixture.keys.a, 'GET', path)).status).toBe(200);
  const deleted = await send(reach, fixture.keys.a, 'DELETE', `/api/agents/${fixture.agentId}`);
  expect(deleted.status).toBe(200);
  expectError(await send(reach, fixture.keys.a, 'GET', path), 404, 'not_found');
  expect((await send(reach, fixture.keys.a, 'HEAD', path)).status).toBe(404);
  await expect(fixture.runtime.getArtifact(fixture.agentId, fixture.artifacts.png)).rejects.toMatchObject({
    code: 'not_found',
  });
}

describe('over memory storage', () => {
  let fixture: Fixture;
  let handle: FetchHandler;
  let server: RunningServer;
  beforeAll(async () => {
    fixture = await openFixture(memoryStorage());
    handle = createFetchHandler(fixture.runtime, { rateLimit: false });
    server = await startServer(fixture.runtime, { port: 0, rateLimit: false });
    expect(server.pollThread).toBe(false);
  });
  afterAll(async () => {
    await server?.close();
    await fixture?.runtime.close();
  });
  const router = (): Reach => ({ fixture, base: 'http://agentry.test', fetch: handle });

  describeDownloads('createFetchHandler', router);
  describeDownloads('startServer (node:http)', () => ({ fixture, base: server.url, fetch: (r) => fetch(r) }));

  it('a deleted agent takes its artifacts with it', () => expectGoneAfterDelete(router()));
});

describe('over SQLite, through the poll thread', () => {
  let dir: ReturnType<typeof tempDir>;
  let fixture: Fixture;
  let server: RunningServer;
  beforeAll(async () => {
    dir = tempDir('agentry-artifacts-');
    fixture = await openFixture(sqliteStorage({ path: path.join(dir.dir, 'agentry.db') }));
    server = await startServer(fixture.runtime, { port: 0, rateLimit: false });
    expect(server.pollThread).toBe(true);
  });
  afterAll(async () => {
    await server?.close();
    await fixture?.runtime.close();
    dir?.remove();
  });
  const reach = (): Reach => ({ fixture, base: server.url, fetch: (r) => fetch(r) });

  describeDownloads('startServer (poll thread)', reach);

  it('a deleted agent takes its artifacts with it', () => expectGoneAfterDelete(reach()));
});

describe('the OpenAPI document and the client, without a server', () => {
  it('documents the route as getArtifact with a binary body', () => {
    const doc = buildOpenApiDocument({ basePath: '/v1' }) as {
      paths: Record<string, { get?: { operationId: string; responses: Record<string, any> } }>;
    };
    const get = doc.paths['/v1/api/agents/{id}/artifacts/{artifact_id}']?.get;
    expect(get?.operationId).toBe('getArtifact');
    expect(get?.responses['200'].content).toEqual({
      'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
    });
    expect(Object.keys(get!.responses)).toEqual(expect.arrayContaining(['200', '304', '401', '404', '429']));
  });

  it('getArtifact reads the name from either form of Content-Disposition, or gives null', async () => {
    const answers: Array<[string | null, string | null]> = [
      ['attachment; filename=plain.txt', 'plain.txt'],
      ['attachment; filename="say \\"hi\\".txt"', 'say "hi".txt'],
      ['attachment; FILENAME*=utf-8\'en\'%C3%A9t%C3%A9.txt; filename="ete.txt"', 'été.txt'],
      ['attachment; filename="fallback.txt"; filename*=UTF-8\'\'%E0%A4%A', 'fallback.txt'],
      ['attachment', null],
      [null, null],
    ];
    for (const [header, name] of answers) {
      const client = new AgentryClient({
        baseUrl: 'http://agentry.test',
        apiKey: 'agk_x',
        fetch: (async () =>
          new Response(new Uint8Array([0xff, 0x00]), {
            headers: header === null ? {} : { 'content-disposition': header },
          })) as unknown as typeof fetch,
      });
      const got = await client.getArtifact(MISSING, MISSING);
      expect(got.name, String(header)).toBe(name);
      expect(got.data).toEqual(new Uint8Array([0xff, 0x00]));
      expect(got.mime_type).toBe('application/octet-stream');
    }
  });
});
