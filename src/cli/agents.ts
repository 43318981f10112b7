/**
 * @module cli/agents
 * `agentry agents list | show <id> | artifacts <id> | outbox <id> | pause <id> | resume <id> | delete <id>` on the
 * serve account (or `--account`).
 *
 * These act on the database through a runtime that steps nothing itself. A running `agentry serve` on the same
 * SQLite file sees the new status at once, but only the process that runs an agent can abort its in-flight model
 * call: a pause from here takes effect when that call returns, and an agent resumed from here is picked up by serve
 * on its next start. For live agents, prefer the HTTP routes.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { AGENT_STATUSES, AgentryError, type AgentRuntime, type AgentStatus, type ArtifactInfo } from '../index.js';
import {
  ACCOUNT_OPTIONS,
  formatCredits,
  openAdminRuntime,
  parseCommandArgs,
  positionals,
  requireAccount,
  resolveDb,
  table,
  UsageError,
  subcommandError,
} from './common.js';

export const usage = `Usage: agentry agents <subcommand>   [--db <path>] [--account <id>] [--json]

  list [--status S] [--limit N] [--cursor C]   agents, newest first, with the start of their goal
       [--roots | --parent <id>] [--q TEXT]   roots only, or one agent's children; goals containing TEXT
  show <id>                                    status and transcript
  artifacts <id> [--out <dir>]                 what its tools kept; with --out, write each one to <dir>
                                               (created; names made safe, clashes get -2, -3, …)
  outbox <id>                                  the e-mails and SMS its message_person calls tried, and how each
                                               ended (sent, failed, unknown: may have been sent before a crash)
  pause <id>                                   pause (and its sub-agents)
  resume <id>                                  resume a paused or out-of-credits agent
  delete <id>                                  delete with sub-agents and transcript

With a running \`agentry serve\` on the same database, prefer the HTTP routes for live agents: only the serving
process can abort an in-flight model call, and it picks up a resume made here on its next start.`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...ACCOUNT_OPTIONS,
    status: { type: 'string' },
    limit: { type: 'string' },
    cursor: { type: 'string' },
    roots: { type: 'boolean' },
    parent: { type: 'string' },
    q: { type: 'string' },
    out: { type: 'string' },
  });
  const [sub, ...params] = rest;
  const subcommands = ['list', 'show', 'artifacts', 'outbox', 'pause', 'resume', 'delete'];
  if (sub === undefined || !subcommands.includes(sub)) throw subcommandError(sub, usage, subcommands);
  if (values.out !== undefined && sub !== 'artifacts') throw new UsageError('--out goes with `agents artifacts`');
  if (values.out !== undefined && values.out.trim() === '') throw new UsageError('--out needs a directory');
  if (values.status !== undefined && !(AGENT_STATUSES as readonly string[]).includes(values.status)) {
    throw new UsageError(`--status must be one of ${AGENT_STATUSES.join(', ')}`);
  }
  if ((values.roots || values.parent !== undefined || values.q !== undefined) && sub !== 'list') {
    throw new UsageError('--roots, --parent and --q go with `agents list`');
  }
  if (values.roots && values.parent !== undefined) throw new UsageError('--roots and --parent exclude each other');
  if (values.limit !== undefined && !/^\d{1,4}$/.test(values.limit))
    throw new UsageError('--limit must be an integer from 1 to 1000');
  const db = resolveDb(values.db);
  const runtime = await openAdminRuntime(db);
  try {
    const accountId = await requireAccount(runtime.accounts, values.account, db);
    const scope = { accountId };
    if (sub === 'list') {
      positionals(params, [], usage);
      const page = await runtime.list({
        ...scope,
        ...(values.status === undefined ? {} : { status: values.status as AgentStatus }),
        ...(values.limit === undefined ? {} : { limit: Number(values.limit) }),
        ...(values.cursor === undefined ? {} : { cursor: values.cursor }),
        ...(values.roots ? { parentId: null } : {}),
        ...(values.parent === undefined ? {} : { parentId: values.parent }),
        ...(values.q === undefined ? {} : { q: values.q }),
      });
      if (values.json) console.log(JSON.stringify(page));
      else if (page.data.length === 0) console.log('No agents.');
      else {
        console.log(
          table([
            ['ID', 'STATUS', 'PROGRESS', 'TOKENS', 'MESSAGES', 'PARENT', 'GOAL'],
            ...page.data.map((a) => [
              a.agent_id,
              a.status,
              `${Math.round(a.progress * 100)}%`,
              String(a.token_count),
              String(a.message_count),
              a.parent_id ?? '-',
              oneLine(a.goal, 60),
            ]),
          ]),
        );
        if (page.truncated) console.log('The search stopped at its bounds: narrow it to see every match.');
        if (page.has_more) console.log(`More: agentry agents list --cursor ${page.next_cursor}`);
      }
      return 0;
    }
    const [id] = positionals(params, ['id'], usage);
    if (sub === 'show') {
      const { agent, messages } = await runtime.get(id!, scope);
      if (values.json) console.log(JSON.stringify({ agent, messages }));
      else {
        console.log(
          table([
            ['id', agent.agent_id],
            ['status', agent.status],
            ['progress', `${Math.round(agent.progress * 100)}%`],
            ['message', agent.status_message],
            ['model', agent.model],
            ['tokens', String(agent.token_count)],
            ['credits', formatCredits(agent.credits_spent)],
            ['created', agent.created_at],
            ['updated', agent.updated_at],
            ...(agent.artifacts?.length
              ? [['artifacts', `${agent.artifacts.length} (agentry agents artifacts ${agent.agent_id})`]]
              : []),
            ...(agent.outbox
              ? [
                  [
                    'messages',
                    `${agent.outbox.sent} sent, ${agent.outbox.failed} failed, ${agent.outbox.unknown} unknown ` +
                      `(agentry agents outbox ${agent.agent_id})`,
                  ],
                ]
              : []),
            ...(agent.monitors ?? []).map((m) => [
              'monitor',
              `${m.url} every ${m.interval_s} s, ${m.status}, ${m.changes} change(s), next check ` +
                `${m.next_check_at ?? '-'}${m.last_error ? `, last error: ${m.last_error}` : ''}`,
            ]),
          ]),
        );
        console.log('');
        for (const m of messages) console.log(`[${m.timestamp}] ${m.role}: ${m.text}`);
      }
      return 0;
    }
    if (sub === 'artifacts') {
      const { agent } = await runtime.get(id!, scope);
      const artifacts = agent.artifacts ?? [];
      if (values.out !== undefined) {
        const written = await writeArtifacts(runtime, agent.agent_id, artifacts, values.out, scope, (file) => {
          if (!values.json) console.log(`Wrote ${file.path} (${file.size} bytes)`);
        });
        if (values.json) console.log(JSON.stringify({ artifacts: written }));
        else if (written.length === 0) console.log(`Agent ${agent.agent_id} has no artifacts.`);
        return 0;
      }
      if (values.json) console.log(JSON.stringify({ artifacts }));
      else if (artifacts.length === 0) console.log(`Agent ${agent.agent_id} has no artifacts.`);
      else {
        console.log(
          table([
            ['ID', 'SIZE', 'TYPE', 'CREATED', 'NAME'],
            ...artifacts.map((a) => [
              a.artifact_id,
              String(a.size),
              printable(a.mime_type),
              a.created_at,
              printable(a.name),
            ]),
          ]),
        );
      }
      return 0;
    }
    if (sub === 'outbox') {
      const outbox = await runtime.outbox(id!, scope);
      if (values.json) console.log(JSON.stringify({ outbox }));
      else if (outbox.length === 0) console.log(`Agent ${id} has sent no messages.`);
      else {
        console.log(
          table([
            ['MESSAGE', 'STATUS', 'CHANNEL', 'TO', 'CREATED', 'DETAIL'],
            ...outbox.map((m) => [
              m.message_id,
              m.status,
              m.channel,
              printable(m.to),
              m.created_at,
              printable(m.error ?? m.provider_id ?? ''),
            ]),
          ]),
        );
      }
      return 0;
    }
    if (sub === 'delete') {
      const result = await runtime.delete(id!, scope);
      console.log(values.json ? JSON.stringify(result) : `Deleted agent ${result.agent_id}.`);
      return 0;
    }
    const agent = sub === 'pause' ? await runtime.pause(id!, scope) : await runtime.resume(id!, scope);
    console.log(values.json ? JSON.stringify({ agent }) : `Agent ${agent.agent_id}: ${agent.status}.`);
    return 0;
  } finally {
    await runtime.close();
  }
}

/** An artifact written by `agents artifacts --out`: its listing plus where its bytes went. */
export type WrittenArtifact = ArtifactInfo & { path: string };

/**
 * Writes each artifact to `outDir` (created if missing) under {@link safeFileName} of its name, made unique within
 * the run. Each file is written whole to a temporary name in `outDir` and renamed into place: a half-written file
 * never carries the final name, and a symbolic link already at that name is replaced, not followed out of `outDir`.
 * A file of the same name from an earlier run is replaced.
 */
export async function writeArtifacts(
  runtime: AgentRuntime,
  agentId: string,
  artifacts: readonly ArtifactInfo[],
  outDir: string,
  scope: { accountId: string },
  onWritten: (file: WrittenArtifact) => void = () => {},
): Promise<WrittenArtifact[]> {
  const dir = resolve(outDir);
  await mkdir(dir, { recursive: true });
  const taken = new Set<string>();
  const written: WrittenArtifact[] = [];
  for (const artifact of artifacts) {
    const path = join(dir, uniqueName(safeFileName(artifact.name), taken));
    // safeFileName leaves no separator or dot segment; this only guards that promise.
    if (dirname(path) !== dir) throw new Error(`agents artifacts: ${JSON.stringify(path)} is outside ${dir}`);
    const { data } = await runtime.getArtifact(agentId, artifact.artifact_id, scope);
    const temporary = join(dir, `.agentry-${randomUUID()}.part`);
    try {
      await writeFile(temporary, data, { flag: 'wx' });
      await rename(temporary, path);
    } catch (error) {
      await rm(temporary, { force: true }).catch(() => {});
      throw new AgentryError('invalid_request', `Could not write ${path}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const file = { ...artifact, path };
    written.push(file);
    onWritten(file);
  }
  return written;
}

// eslint-disable-next-line no-control-regex -- control characters are what it matches
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;
/** Marks that reorder the text around them: `cod.exe` can be made to display as `exe.doc`. */
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
/** Characters Windows refuses in names (`/` and `\` are separators everywhere). */
const RESERVED = /[/\\<>:"|?*]/g;
const WINDOWS_DEVICE = /^(?:con|prn|aux|nul|com\d|lpt\d)(?:\..*)?$/i;
/** Longest name written, in UTF-8 bytes: file systems keep 255, and a `-N` suffix may be added. */
const MAX_NAME_BYTES = 200;

/**
 * A file name for an artifact's name, which a tool chose and may be anything (`../../etc/passwd`): one path segment,
 * never `.` or `..` or hidden, without separators, control or bidirectional characters or what Windows refuses
 * (each becomes `_` or is dropped), at most 200 UTF-8 bytes with its extension kept, and `artifact` when nothing is
 * left.
 *
 * @example
 * safeFileName('../../etc/passwd'); // '__.._etc_passwd'
 * safeFileName('résumé 📄.txt'); // 'résumé 📄.txt'
 */
export function safeFileName(name: string): string {
  let safe = name
    .replace(LONE_SURROGATE, '\ufffd')
    .normalize('NFC')
    .replace(CONTROL, '')
    .replace(BIDI, '')
    .replace(RESERVED, '_')
    .trim()
    .replace(/^\.+/, '_') // no hidden file, and neither `.` nor `..`
    .replace(/[.\s]+$/, ''); // Windows drops trailing dots and spaces
  if (WINDOWS_DEVICE.test(safe)) safe = `_${safe}`;
  safe = truncateName(safe, MAX_NAME_BYTES);
  return safe === '' ? 'artifact' : safe;
}

/** `name` cut to `maxBytes` of UTF-8 at a code point boundary, keeping a short extension. */
function truncateName(name: string, maxBytes: number): string {
  const bytes = (s: string) => Buffer.byteLength(s, 'utf8');
  if (bytes(name) <= maxBytes) return name;
  const ext = /\.[^.]{1,16}$/.exec(name)?.[0] ?? '';
  const stem = [...name.slice(0, name.length - ext.length)];
  while (stem.length > 0 && bytes(stem.join('')) + bytes(ext) > maxBytes) stem.pop();
  return stem.join('').trimEnd() + ext;
}

/**
 * `name`, or `name-2`, `name-3`, … before its extension, whichever is not yet in `taken` (compared case-insensitively,
 * as macOS and Windows compare names); records the result.
 */
function uniqueName(name: string, taken: Set<string>): string {
  const dot = name.lastIndexOf('.');
  const [stem, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ''];
  let candidate = name;
  for (let n = 2; taken.has(candidate.toLowerCase()); n++) candidate = `${stem}-${n}${ext}`;
  taken.add(candidate.toLowerCase());
  return candidate;
}

/** Text a tool chose, fit for a terminal: control characters (escape sequences) become `?`. */
function printable(text: string): string {
  return text.replace(CONTROL, '?').replace(BIDI, '?');
}

/** A goal on one table line: whitespace runs as one space, cut to `max` characters. */
function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}
