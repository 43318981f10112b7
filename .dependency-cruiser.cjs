/**
 * The layering of src/, checked on every `npm run lint` (docs/architecture.md, "Layers", says the same in words;
 * test/architecture/layers.test.ts checks that both name the same rules).
 *
 * From the bottom up:
 * - base: src/base/, src/errors.ts and src/version.ts. Shared basics (the status table, the clock, parseArgs, ...)
 *   that import nothing else of agentry.
 * - contracts: the extension-point interfaces and the vocabulary every layer speaks (the records' schemas, the events,
 *   the telemetry hooks). They import only base and each other.
 * - core: src/core/, the runtime. It imports only base and the contracts, so it never picks a backend, a tool or a
 *   transport: the package entry does.
 * - adapters: the implementations behind the contracts (storage backends, model providers, web, browser, sandbox,
 *   messaging). They import base, the contracts and each other, never core's internals.
 * - tools: the citation check and the built-in tools. They reach the runtime through the tool platform they are
 *   given (tools/platform.ts), never core's internals.
 * - outer: http, mcp, client and observability sit on core's public API; they never choose a backend themselves.
 * - entry: src/index.ts, src/builtins.ts, src/testing/ and src/cli/ wire everything; nothing below imports them.
 *
 * Type-only imports count everywhere, cycles included (`tsPreCompilationDeps`): `import type` is erased at run time,
 * but a module that needs another's types still cannot be read, changed or moved without it, and an `import type`
 * turns into a value import with one edit.
 */

/** The bottom layer. */
const BASE = '^src/(base/|errors\\.ts$|version\\.ts$)';

/** The extension points, and the vocabulary the layers share. */
const CONTRACT_FILES = [
  'src/storage/adapter.ts',
  'src/storage/workers.ts',
  'src/storage/search.ts',
  'src/models/provider.ts',
  'src/models/thinking.ts',
  'src/models/model-ids.ts',
  'src/tools/define-tool.ts',
  'src/tools/platform.ts',
  'src/tools/tool-source.ts',
  'src/tools/registry.ts',
  'src/tools/monitors.ts',
  'src/sandbox/sandbox.ts',
  'src/web/search-provider.ts',
  'src/messaging/message-transport.ts',
  'src/core/schemas.ts',
  'src/core/events.ts',
  'src/core/telemetry.ts',
];
const CONTRACTS = `^(${CONTRACT_FILES.map((f) => f.replace(/[.]/g, '\\.')).join('|')})$`;

const CORE = '^src/core/';
const ADAPTERS = '^src/(storage|models|web|browser|sandbox|messaging)/';
const TOOLS = '^src/tools/';
const OUTER = '^src/(http|mcp|client|observability)/';
const ENTRY = '^src/(index\\.ts|builtins\\.ts)$';
/** Concrete backends: the package entry chooses them, nothing below it. */
const BACKENDS = '^src/(storage/(sqlite|postgres)/|storage/memory\\.ts$|models/anthropic\\.ts$|observability/otel)';

/* global module -- a CommonJS file: dependency-cruiser loads its config with require(). */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import circles, type-only imports included: each module can be read and tested without its users.',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'base-imports-only-base',
      severity: 'error',
      comment: 'base/ (with errors.ts and version.ts) is the bottom layer: it imports nothing else of agentry.',
      from: { path: BASE },
      to: { path: '^src/', pathNot: BASE },
    },
    {
      name: 'contracts-import-only-base-and-contracts',
      severity: 'error',
      comment: 'An extension-point interface imports only base and other interfaces, never an implementation.',
      from: { path: CONTRACTS },
      to: { path: '^src/', pathNot: [BASE, CONTRACTS] },
    },
    {
      name: 'core-imports-only-base-and-contracts',
      severity: 'error',
      comment:
        'core/ imports no backend, tool, transport or CLI: only base, the extension-point interfaces and itself. ' +
        'The package entry (src/index.ts) chooses the defaults.',
      from: { path: CORE },
      to: { path: '^src/', pathNot: [BASE, CONTRACTS, CORE] },
    },
    {
      name: 'adapters-not-core',
      severity: 'error',
      comment: "Adapters implement the contracts; they never reach into core's internals.",
      from: { path: ADAPTERS, pathNot: CONTRACTS },
      to: { path: CORE, pathNot: CONTRACTS },
    },
    {
      name: 'adapters-not-upper-layers',
      severity: 'error',
      comment: 'Adapters never import a tool, a transport, observability, the entry points, testing or the CLI.',
      from: { path: ADAPTERS },
      to: { path: [TOOLS, OUTER, ENTRY, '^src/(testing|cli)/'], pathNot: CONTRACTS },
    },
    {
      name: 'tools-not-core',
      severity: 'error',
      comment: "Tools reach the runtime through the platform they are given (tools/platform.ts), not core's internals.",
      from: { path: TOOLS, pathNot: CONTRACTS },
      to: { path: CORE, pathNot: CONTRACTS },
    },
    {
      name: 'tools-not-upper-layers',
      severity: 'error',
      comment:
        'Tools never import a transport, observability, a concrete backend, the entry points, testing or the CLI.',
      from: { path: TOOLS },
      to: { path: [OUTER, BACKENDS, ENTRY, '^src/(testing|cli)/'] },
    },
    {
      name: 'outer-not-backends',
      severity: 'error',
      comment:
        'http, mcp, client and observability work on whatever the runtime was opened with: they never open a ' +
        'storage or model backend themselves.',
      from: { path: OUTER, pathNot: '^src/observability/otel' },
      to: { path: BACKENDS },
    },
    {
      name: 'entry-only-from-cli',
      severity: 'error',
      comment:
        'The package entry (index.ts, builtins.ts) wires everything; only the CLI and the entry itself import it.',
      from: { path: '^src/', pathNot: ['^src/cli/', ENTRY] },
      to: { path: ENTRY },
    },
    {
      name: 'testing-only-from-cli',
      severity: 'error',
      comment:
        'The shipped test doubles (agentry-runtime/testing) are never part of the runtime; the CLI demo uses them.',
      from: { path: '^src/', pathNot: '^src/(testing|cli)/' },
      to: { path: '^src/testing/' },
    },
    {
      name: 'no-cli',
      severity: 'error',
      comment: 'Nothing imports the CLI; it is the top, and uses the public API.',
      from: { path: '^src/', pathNot: '^src/cli/' },
      to: { path: '^src/cli/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    // One line per broken rule, with the import that breaks it.
    reporterOptions: { text: { highlightFocused: true } },
  },
};
