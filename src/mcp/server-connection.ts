/**
 * @module mcp/server-connection
 * One configured MCP server, shared by every agent of the runtime: started on first use, watched, respawned, closed.
 *
 * What the issue trackers of other MCP clients are full of, and how this file answers it:
 * - a server that never finishes `initialize`: the start has a timeout (15 s by default), after which the process is
 *   killed and the server is marked failed with the tail of its stderr;
 * - a stdio server that dies: its exit is noticed at once (the transport closes when the process does), so calls in
 *   flight fail at once with the server's name, its exit code or signal and its stderr tail, not at a timeout;
 * - reconnects: the next call respawns it, after a backoff that doubles up to a cap; after `max_crashes` failures in a
 *   row it is marked failed for a while, and calls fail at once instead of spawning (no CPU spent on a crash loop);
 * - leaks: a new process is spawned only after the old one has exited, so there are never two; close() waits until
 *   the process is gone;
 * - cancel: a call's AbortSignal and timeout go to the SDK, which sends `notifications/cancelled`; the server is kept;
 * - long calls: every call carries a progress token; progress is passed on and resets the call's timeout;
 * - Streamable HTTP servers that restart: a request the server answers 404 (or 400 naming the session) starts a new
 *   session, and a read-only or idempotent call is sent again once; a lost response stream is checked with a ping,
 *   and a server that is gone fails the calls in flight at once instead of at their timeout;
 * - tools that need task-based execution (`execution.taskSupport: "required"`) run as MCP tasks: created, polled
 *   (their status message passed on), cancelled with the call, their result fetched;
 * - what a server asks of the client: `roots` (as configured), `sampling` (the calling agent's model, one billed
 *   turn, only for servers that opt in; the request is the agent's whose call's response stream it came on
 *   (Streamable HTTP), and a stdio server runs one agent's calls at a time, so there it is the running agent's),
 *   `elicitation` (the embedding application's handler, else declined).
 */
import type { ChildProcess } from 'node:child_process';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { CallToolResult, Progress, Tool as McpTool } from '@modelcontextprotocol/sdk/types.js';
import type { McpServerConfig } from './config.js';
import { answerServerRequests, clientCapabilities, type CallInFlight, type McpClientHost } from './server-requests.js';
import { AgentTurns } from './agent-turns.js';
import { CALL_TOKEN_META, CallAttribution } from './http-attribution.js';
import { whyLine } from './stderr.js';
import { callToolAsTask } from './task-call.js';

/** The SDK's JSON-RPC error codes that matter here (`ErrorCode` of `@modelcontextprotocol/sdk/types.js`). */
const CONNECTION_CLOSED = -32000;
const REQUEST_TIMEOUT = -32001;

/** How long the ping that checks a server after its response stream broke may take. */
const PROBE_TIMEOUT_MS = 5_000;

/** The SDK's client side, loaded when a server first starts: it takes ~0.3 s to load, which `import 'agentry-runtime'` need not pay. */
async function loadSdk() {
  const [client, stdio, http, types] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/stdio.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    import('@modelcontextprotocol/sdk/types.js'),
  ]);
  return {
    Client: client.Client,
    types,
    StdioClientTransport: stdio.StdioClientTransport,
    StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
  };
}
type Sdk = Awaited<ReturnType<typeof loadSdk>>;
let sdk: Promise<Sdk> | undefined;

function errorCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** Bytes of a server's stderr kept for error messages. */
const STDERR_TAIL_BYTES = 4096;
/** A server that ran this long before it exited is not in a crash loop: the count of failures in a row starts again. */
const STABLE_AFTER_MS = 10_000;

export type ServerState =
  /** Not started yet: starts on first use. */
  | 'idle'
  | 'starting'
  | 'ready'
  /** Its process exited or its connection closed; the next call starts it again. */
  | 'exited'
  /** Failed to start, or crashed too often in a row: calls fail at once until `retryAt`. */
  | 'failed'
  | 'closed';

/** How the last process ended. */
interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Options of a call. */
export interface CallOptions {
  /** Cancels the request (the server is told with `notifications/cancelled`). */
  signal?: AbortSignal;
  /** @default the server's `tool_timeout_ms`; progress (or a task's new status) starts it again */
  timeoutMs?: number;
  /** The agent the call is for: a sampling request that comes with it is answered by that agent's model. */
  agentId?: string;
  /** Told of the server's progress notifications and of a task's status messages. */
  onProgress?: (progress: { progress?: number; total?: number; message?: string }) => void;
  /**
   * The tool is read-only or idempotent: after a restart of a Streamable HTTP server lost the session, the call is
   * sent again once on a new one.
   */
  idempotent?: boolean;
  /** W3C trace context of the calling span, sent as `_meta.traceparent`. */
  traceparent?: string;
}

export class McpServerConnection {
  state: ServerState = 'idle';
  /** Why it failed or last exited, for `agentry tools` and errors. */
  failure: string | undefined;
  /** The server's tools as it last listed them (kept while it is down, so agents keep seeing them). */
  tools: McpTool[] = [];
  /**
   * Set from a `notifications/tools/list_changed` until the new list is in. The notification comes before the result
   * of the call that changed the tools (one ordered stream), so the step after that call waits for the new list.
   */
  refreshing: Promise<void> | undefined;
  /** Processes spawned so far (tests and `agentry tools` read it). */
  spawns = 0;
  private client: Client | undefined;
  private child: ChildProcess | undefined;
  private starting: Promise<Client> | undefined;
  private stderrTail = '';
  private lastExit: ExitInfo | undefined;
  private exitedAt = 0;
  private readyAt = 0;
  /** Failed starts and exits in a row (reset by a successful call or a long run). */
  private crashes = 0;
  /** When a failed server may be tried again. */
  retryAt = 0;
  /** Resolves when the current process has exited (stdio only). */
  private processGone: Promise<void> = Promise.resolve();
  /** Ends a backoff wait early (close() does not wait out a 30 s backoff). */
  private endWait: (() => void) | undefined;
  /** Calls in flight (a sampling request is answered by the model of the agent they belong to). */
  private readonly inFlight = new Set<CallInFlight>();
  /** On a stdio server with `sampling`: whose calls may run (see agent-turns.ts). */
  readonly turns = new AgentTurns();
  /** On a Streamable HTTP server: the calls whose streams the server's requests came on (http-attribution.ts). */
  private readonly attribution = new CallAttribution();
  /** Why the connection is being dropped (an HTTP session that ended), for the `closed` handler. */
  private dropReason: string | undefined;
  /** A ping checking the server after a response stream broke (one at a time). */
  private probing: Promise<void> | undefined;

  constructor(
    readonly config: McpServerConfig,
    /** Told when the server's tool list changed (a start, or `notifications/tools/list_changed`). */
    private readonly onToolsChanged: () => void,
    private readonly clientInfo = { name: 'agentry', version: '0.1.0' },
    /** Answers the server's sampling and elicitation requests; read when a request comes. */
    private readonly host: McpClientHost = {},
  ) {}

  /**
   * Whether the server runs `tools/call` as tasks (its `tasks.requests.tools.call` capability): without it, a tool
   * that requires task-based execution cannot be called, and is left out.
   */
  get runsToolTasks(): boolean {
    const tasks = this.client?.getServerCapabilities()?.tasks as
      { requests?: { tools?: { call?: unknown } } } | undefined;
    return this.client === undefined ? this.toolTasks : tasks?.requests?.tools?.call !== undefined;
  }
  /** The last answer of {@link runsToolTasks} while connected (kept while the server is down). */
  private toolTasks = false;

  /** The last lines the server wrote to stderr (stdio), for diagnosis. */
  get stderr(): string {
    return this.stderrTail;
  }

  /** `stdio: <command> <args>` or `http: <url>`, for messages. */
  get description(): string {
    const c = this.config;
    return c.transport === 'stdio' ? `stdio: ${[c.command, ...c.args].join(' ')}` : `http: ${c.url}`;
  }

  /** The pid of the live server process (stdio), or null. */
  get pid(): number | null {
    return this.child && this.child.exitCode === null && this.child.signalCode === null
      ? (this.child.pid ?? null)
      : null;
  }

  /**
   * Connects (spawning the process for stdio) unless it is connected; concurrent callers share one start. Rejects
   * with the reason when the start fails or the server is marked failed.
   */
  start(): Promise<Client> {
    if (this.state === 'closed') return Promise.reject(this.error('is shut down'));
    if (this.state === 'ready' && this.client) return Promise.resolve(this.client);
    this.starting ??= this.connect().finally(() => (this.starting = undefined));
    return this.starting;
  }

  /**
   * Calls a tool by the server's name for it. Errors name the server (and, for a dead process, how it ended). A tool
   * whose listing says `execution.taskSupport: "required"` runs as an MCP task.
   */
  async callTool(name: string, args: Record<string, unknown>, options: CallOptions = {}): Promise<CallToolResult> {
    const signal = options.signal;
    signal?.throwIfAborted();
    const timeoutMs = options.timeoutMs ?? this.config.toolTimeoutMs;
    // A server that may ask for sampling must be able to tell whose model answers. Over Streamable HTTP its request
    // comes on the call's own response stream, which the call's token in `_meta` identifies (http-attribution.ts);
    // over stdio nothing does, so there agents take turns (agent-turns.ts).
    const sampling = this.config.sampling && options.agentId !== undefined;
    const token = sampling && this.config.transport === 'http' ? this.attribution.newToken() : undefined;
    const endTurn = sampling && token === undefined ? await this.turns.take(options.agentId!, signal) : undefined;
    const call: CallInFlight = { agentId: options.agentId, signal, samples: 0, token };
    this.inFlight.add(call);
    try {
      // The trace goes on at the server when tracing is on: MCP's `_meta` carries W3C trace context by convention.
      const meta = {
        ...(options.traceparent !== undefined ? { traceparent: options.traceparent } : {}),
        ...(token !== undefined ? { [CALL_TOKEN_META]: token } : {}),
      };
      const traceMeta = Object.keys(meta).length > 0 ? { _meta: meta } : {};
      for (let attempt = 0; ; attempt++) {
        const client = await (signal ? raceAbort(this.start(), signal) : this.start());
        try {
          const tool = this.tools.find((t) => t.name === name);
          const result =
            tool?.execution?.taskSupport === 'required'
              ? await callToolAsTask(client, (await (sdk ??= loadSdk())).types, name, args, {
                  ...options,
                  timeoutMs,
                  fail: (what) => this.error(what),
                })
              : ((await client.callTool({ name, arguments: args, ...traceMeta }, undefined, {
                  ...(signal ? { signal } : {}),
                  timeout: timeoutMs,
                  // A tool that reports progress is alive: each report starts its timeout again.
                  onprogress: (p: Progress) => options.onProgress?.(p),
                  resetTimeoutOnProgress: true,
                })) as CallToolResult);
          this.crashes = 0;
          return result;
        } catch (err) {
          if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : err;
          if (attempt === 0 && notSent(err)) continue; // the connection closed before the request left: start again
          if (this.isSessionGone(err)) {
            // The server forgot the session (it restarted): it did not take the request. A new session is started;
            // the call is sent again once if sending it twice cannot hurt.
            this.drop(client, 'ended the session (the server restarted); a new one starts with the next call');
            if (attempt === 0 && options.idempotent) continue;
            throw this.error(
              `had restarted and lost the session when ${name} was sent: the server did not take the call. A new ` +
                'session starts with the next call; call it again if it is still needed.',
            );
          }
          throw this.callError(name, err, timeoutMs);
        }
      }
    } finally {
      this.inFlight.delete(call);
      if (token !== undefined) this.attribution.ended(token);
      endTurn?.();
    }
  }

  /** A Streamable HTTP answer that says the server does not know the session: 404, or a 400 that names it. */
  private isSessionGone(err: unknown): boolean {
    if (this.config.transport !== 'http' || !(err instanceof Error) || err.name === 'McpError') return false;
    const status = errorCode(err);
    return status === 404 || (status === 400 && /session/i.test(err.message));
  }

  /** Ends a connection whose session the server no longer has (or that is gone); calls in flight fail at once. */
  private drop(client: Client, reason: string): void {
    if (this.client !== client) return;
    this.dropReason = reason;
    void client.close().catch(() => undefined);
  }

  /**
   * The transport reported an error. A Streamable HTTP response stream that broke may come back (the SDK resumes
   * it), or the server may be gone: a ping decides, and a server that does not answer it, or no longer knows the
   * session, is dropped, failing the calls in flight at once rather than at their timeout.
   */
  private transportError(client: Client, err: Error): void {
    if (this.config.transport !== 'http' || this.client !== client || this.state !== 'ready') return;
    const message = err.message;
    if (this.isSessionGone(err)) {
      // After the request that got this answer has seen it (it decides whether to send again), not before: dropping
      // now would fail it as "connection closed", its outcome unknown.
      setImmediate(() =>
        this.drop(client, 'ended the session (the server restarted); a new one starts with the next call'),
      );
      return;
    }
    if (!/SSE stream disconnected|reconnect|fetch failed|ECONNREFUSED|terminated/i.test(message)) return;
    this.probing ??= client
      .ping({ timeout: PROBE_TIMEOUT_MS })
      .then(
        () => undefined,
        (pingError: unknown) => {
          const why = this.isSessionGone(pingError)
            ? 'ended the session (the server restarted); a new one starts with the next call'
            : `went away (${messageOf(pingError)}); it is connected again on the next call`;
          this.drop(client, why);
        },
      )
      .finally(() => (this.probing = undefined));
  }
  /** Closes the connection and waits until the server process is gone. */
  async close(): Promise<void> {
    if (this.state === 'closed') return;
    const wasStarting = this.state === 'starting';
    this.state = 'closed';
    this.endWait?.();
    // A server still starting is not waited for (its initialize may take its whole timeout): it is stopped now.
    if (wasStarting) {
      if (this.child && this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
      void this.client?.close().catch(() => undefined);
    }
    await this.starting?.catch(() => undefined);
    await this.disconnect();
  }

  private async connect(): Promise<Client> {
    const now = Date.now();
    if (this.state === 'failed' && now < this.retryAt) {
      throw this.error(
        `failed: ${this.failure ?? 'unknown'} (tried again in ${Math.ceil((this.retryAt - now) / 1000)} s)`,
      );
    }
    // A respawn waits out the backoff, counted from the exit: a crash loop spends its time asleep, not spawning.
    if (this.crashes > 0) {
      const delay = Math.min(this.config.backoffMs * 2 ** (this.crashes - 1), this.config.maxBackoffMs);
      const wait = this.exitedAt + delay - now;
      if (wait > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, wait);
          this.endWait = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.endWait = undefined;
      }
    }
    // Never two processes: the last one must be gone before the next is spawned.
    await this.processGone;
    if (this.state === 'closed') throw this.error('is shut down');
    this.state = 'starting';
    this.stderrTail = '';
    this.lastExit = undefined;
    const loaded = await (sdk ??= loadSdk());
    const { Client, StdioClientTransport, StreamableHTTPClientTransport } = loaded;
    const client = new Client(this.clientInfo, { capabilities: clientCapabilities(this.config, this.host) });
    answerServerRequests(client, loaded.types, {
      config: this.config,
      host: this.host,
      inFlight: this.inFlight,
      attribution: this.attribution,
    });
    client.onerror = (err) => this.transportError(client, err);
    client.setNotificationHandler(loaded.types.ToolListChangedNotificationSchema, () => {
      if (this.client !== client || this.state !== 'ready') return;
      const refresh: Promise<void> = this.listTools(client)
        .then((tools) => {
          if (this.client !== client) return;
          this.tools = tools;
          this.onToolsChanged();
        })
        .catch(() => undefined) // the old list stays; the next change or start lists again
        .finally(() => {
          if (this.refreshing === refresh) this.refreshing = undefined;
        });
      this.refreshing = refresh;
    });
    const transport = this.transport(StdioClientTransport, StreamableHTTPClientTransport);
    // The SDK closes the transport when the process exits: that is how a death is noticed at once.
    client.onclose = () => this.closed(client);
    this.client = client;
    try {
      await client.connect(transport, { timeout: this.config.startupTimeoutMs });
      const tools = await this.listTools(client);
      if ((this.state as ServerState) === 'closed') throw this.error('is shut down');
      this.tools = tools;
      this.toolTasks = this.runsToolTasks;
      this.state = 'ready';
      this.failure = undefined;
      this.readyAt = Date.now();
      this.onToolsChanged();
      return client;
    } catch (err) {
      const reason =
        errorCode(err) === REQUEST_TIMEOUT
          ? `did not finish initialize within ${this.config.startupTimeoutMs} ms`
          : `did not start: ${messageOf(err)}`;
      this.client = undefined;
      // How it ended by itself, if it did: not the kill that follows.
      const exit = this.exitText();
      // A server that does not answer is not healthy: it is killed, not left behind.
      await this.disconnect(client);
      this.crashes++;
      this.exitedAt = Date.now();
      if ((this.state as ServerState) !== 'closed') {
        this.state = 'failed';
        this.failure = `${reason}${exit}${this.stderrText()}`;
        // Below the crash limit the next call tries again after the backoff; at it, calls fail at once for a while.
        this.retryAt = this.crashes >= this.config.maxCrashes ? this.exitedAt + this.config.crashCooldownMs : 0;
      }
      throw this.error(this.failure ?? reason);
    }
  }

  /** Every page of `tools/list`. */
  private async listTools(client: Client): Promise<McpTool[]> {
    const tools: McpTool[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor }, {
        timeout: this.config.startupTimeoutMs,
      });
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor);
    return tools;
  }

  private transport(
    StdioClientTransport: Sdk['StdioClientTransport'],
    StreamableHTTPClientTransport: Sdk['StreamableHTTPClientTransport'],
  ): Transport {
    const c = this.config;
    if (c.transport === 'http') {
      return new StreamableHTTPClientTransport(new URL(c.url), {
        requestInit: { headers: c.headers },
        ...(c.sampling ? { fetch: this.attribution.wrap() } : {}),
      });
    }
    const transport = new StdioClientTransport({
      command: c.command,
      args: c.args,
      env: c.env,
      ...(c.cwd !== undefined ? { cwd: c.cwd } : {}),
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
    });
    // The exit code and signal are not passed on by the transport: its child process is watched directly (a private
    // field of SDK 1.x; without it, messages only lack the exit code).
    const start = transport.start.bind(transport);
    transport.start = async () => {
      try {
        await start();
      } finally {
        const child = (transport as unknown as { _process?: ChildProcess })._process;
        if (child) this.watch(child);
      }
    };
    return transport;
  }

  private watch(child: ChildProcess): void {
    this.child = child;
    this.spawns++;
    this.processGone = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', (code, signal) => {
        this.lastExit = { code, signal };
        resolve();
      });
    });
  }

  /** The connection closed: the process exited, or the HTTP session ended. Calls in flight were failed by the SDK. */
  private closed(client: Client): void {
    if (this.client !== client) return;
    this.client = undefined;
    if (this.state === 'closed' || this.state === 'starting') return;
    this.exitedAt = Date.now();
    this.crashes = this.exitedAt - this.readyAt > STABLE_AFTER_MS ? 1 : this.crashes + 1;
    const dropped = this.dropReason;
    this.dropReason = undefined;
    this.failure = dropped ?? `exited${this.exitText()}${this.stderrText()}`;
    if (this.crashes >= this.config.maxCrashes) {
      this.state = 'failed';
      this.failure = `crashed ${this.crashes} times in a row; last ${this.failure}`;
      this.retryAt = this.exitedAt + this.config.crashCooldownMs;
    } else {
      this.state = 'exited';
    }
  }

  /** Closes the client (and so the process) and makes sure the process is gone. */
  private async disconnect(client = this.client): Promise<void> {
    const child = this.child;
    if (this.client === client) this.client = undefined;
    if (client && this.config.transport === 'http' && this.state === 'closed') await endSession(client);
    // Closing the SDK's stdio transport ends stdin and waits up to 2 s, then SIGTERM, then SIGKILL without waiting.
    const closing = client?.close().catch(() => undefined);
    if (child && child.exitCode === null && child.signalCode === null && this.state !== 'closed') {
      // A server being dropped for failing to start is killed at once: it did not answer, it will not finish cleanly.
      child.kill('SIGKILL');
    }
    await closing;
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await this.processGone;
  }

  private callError(tool: string, err: unknown, timeoutMs: number): Error {
    if (errorCode(err) === REQUEST_TIMEOUT) {
      return this.error(`did not answer ${tool} within ${timeoutMs} ms; the call was cancelled (the server is kept)`);
    }
    if (this.state === 'closed') return this.error(`was shut down during the call to ${tool}`);
    // Over HTTP a server that goes away mid-call shows as the SDK's "connection closed" or, depending on which read
    // breaks first, as a transport error with no JSON-RPC code (a broken stream, a refused fetch): the same event.
    const lost =
      errorCode(err) === CONNECTION_CLOSED || (this.config.transport === 'http' && errorCode(err) === undefined);
    if (lost && !(err instanceof McpServerError)) {
      if (this.config.transport === 'http') {
        return this.error(
          `${this.failure ?? 'closed the connection'} — during the call to ${tool}; its outcome is unknown`,
        );
      }
      return this.error(`exited during the call to ${tool}${this.exitText()}${this.stderrText()}`);
    }
    if (err instanceof McpServerError) return err;
    return this.error(`failed the call to ${tool}: ${messageOf(err)}`);
  }

  private exitText(): string {
    const e = this.lastExit;
    if (!e) return '';
    return e.signal ? ` (killed by ${e.signal})` : ` (exit code ${e.code})`;
  }

  /** `; stderr: <the line that says why>` (see {@link whyLine}), or nothing. */
  private stderrText(): string {
    const why = whyLine(this.stderrTail);
    return why ? `; stderr: ${why}` : '';
  }

  private error(what: string): McpServerError {
    return new McpServerError(this.config.name, `MCP server ${JSON.stringify(this.config.name)} ${what}`);
  }
}

/** A call or start that failed because of the server (it is down, failed to start, did not answer in time). */
export class McpServerError extends Error {
  override name = 'McpServerError';
  constructor(
    readonly server: string,
    message: string,
  ) {
    super(message);
  }
}

/** How long closing waits for a Streamable HTTP server to acknowledge the end of the session. */
const END_SESSION_MS = 1_000;

/**
 * Tells a Streamable HTTP server the session is over (`DELETE`, which the spec asks clients to send), so it frees what
 * it keeps for it; a server that does not answer within a second is not waited for.
 */
async function endSession(client: Client): Promise<void> {
  const transport = client.transport as { terminateSession?: () => Promise<void>; sessionId?: string } | undefined;
  if (!transport?.terminateSession || transport.sessionId === undefined) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    transport.terminateSession().catch(() => undefined),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, END_SESSION_MS))),
  ]);
  clearTimeout(timer);
}

/** The SDK refused to send on a connection that had closed meanwhile: nothing reached the server. */
function notSent(err: unknown): boolean {
  return err instanceof Error && err.message === 'Not connected';
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** `promise`, or the signal's reason if it aborts first (the shared start goes on for the other callers). */
function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
