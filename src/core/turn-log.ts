/**
 * @module core/turn-log
 * Reading the saved turn log: a turn is stored as the JSON of its content blocks, and the step works out what to do
 * next from them (the tool calls the last turn asked for) and sends them to the model as messages.
 */
import type { ContentBlock, ModelMessage, ToolUseBlock } from '../models/provider.js';
import type { TurnRow } from '../storage/adapter.js';

/** The content blocks of a saved turn. */
export function parseBlocks(content: string): ContentBlock[] {
  return JSON.parse(content) as ContentBlock[];
}

/** A saved turn as the model sees it. */
export function toModelMessage(turn: TurnRow): ModelMessage {
  return { role: turn.role, content: parseBlocks(turn.content) };
}

/** The tool calls a saved turn asked for, in order. */
export function toolUsesOf(turn: TurnRow): ToolUseBlock[] {
  return parseBlocks(turn.content).filter((b): b is ToolUseBlock => b.type === 'tool_use');
}
