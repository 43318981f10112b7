/**
 * @module core/turn-log
 * Reading the saved turn log: a turn is stored as the JSON of its content blocks, and the step works out what to do
 * next from them (the tool calls the last turn asked for) and sends them to the model as messages. A turn this process
 * saved from blocks it had in hand ({@link turnFromBlocks}) reads back as those blocks, without parsing its JSON again:
 * its content is exactly their JSON, so the blocks are what a read of the log would give.
 */
import type { ContentBlock, ModelMessage, ToolUseBlock } from '../models/provider.js';
import type { TurnRow } from '../storage/adapter.js';

/** The blocks of turn rows made by {@link turnFromBlocks}, while the row lives. */
const blocksByTurn = new WeakMap<TurnRow, ContentBlock[]>();

/** The content blocks of a saved turn. */
export function parseBlocks(content: string): ContentBlock[] {
  return JSON.parse(content) as ContentBlock[];
}

/** A turn row whose content is the JSON of `blocks`, about to be saved; it reads back as `blocks` themselves. */
export function turnFromBlocks(
  agentId: string,
  idx: number,
  role: TurnRow['role'],
  blocks: ContentBlock[],
  createdAt: string,
): TurnRow {
  const turn: TurnRow = { agent_id: agentId, idx, role, content: JSON.stringify(blocks), created_at: createdAt };
  blocksByTurn.set(turn, blocks);
  return turn;
}

function blocksOf(turn: TurnRow): ContentBlock[] {
  return blocksByTurn.get(turn) ?? parseBlocks(turn.content);
}

/** A saved turn as the model sees it. */
export function toModelMessage(turn: TurnRow): ModelMessage {
  return { role: turn.role, content: blocksOf(turn) };
}

/** The tool calls a saved turn asked for, in order. */
export function toolUsesOf(turn: TurnRow): ToolUseBlock[] {
  return blocksOf(turn).filter((b): b is ToolUseBlock => b.type === 'tool_use');
}
