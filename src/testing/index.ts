/**
 * @module agentry-runtime/testing
 * Test doubles shipped with agentry: a scripted model, a fake clock, and a local server that speaks the Anthropic
 * Messages API.
 */
export { scriptedModel, scriptedTokenizer, DEFAULT_SCRIPTED_USAGE } from './scripted-model.js';
export type {
  ScriptedModel,
  ScriptedModelOptions,
  ScriptedTokenizer,
  ScriptedTurn,
  Script,
  ScriptContext,
} from './scripted-model.js';
export { fakeClock } from './fake-clock.js';
export type { FakeClock } from './fake-clock.js';
export * from './fake-anthropic.js';
export { prefixDigest, thinkingSigner } from './fake-anthropic-thinking.js';
export type { ThinkingSigner, FakeThinkingReply, ThinkingCheckedRequest } from './fake-anthropic-thinking.js';
export * from './fake-anthropic-cache.js';
