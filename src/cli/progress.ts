/**
 * @module cli/progress
 * The live view of `agentry run`: on a terminal, one progress line redrawn in place with the transcript printed above
 * it; elsewhere (pipes, CI logs), one plain line per change.
 */
import type { Agent, Message } from '../core/schemas.js';

export interface ProgressOutput {
  write(text: string): void;
  /** True when the output is a terminal that understands carriage returns and erase-line. */
  isTTY: boolean;
  columns?: number;
}

const BAR_WIDTH = 24;

export class ProgressView {
  private lastLine = '';
  private drawn = false;

  constructor(private readonly out: ProgressOutput) {}

  /** Shows the agent's progress and status message. */
  update(agent: Pick<Agent, 'progress' | 'status' | 'status_message'>): void {
    const line = formatProgressLine(agent);
    if (line === this.lastLine) return;
    this.lastLine = line;
    if (this.out.isTTY) {
      const width = Math.max(20, (this.out.columns ?? 100) - 1);
      this.out.write(`\r\x1b[2K${line.slice(0, width)}`);
      this.drawn = true;
    } else {
      this.out.write(`${line}\n`);
    }
  }

  /** Prints a transcript message above the progress line. */
  message(message: Pick<Message, 'role' | 'text'>): void {
    this.clear();
    const who = message.role === 'USER' ? 'goal' : 'agent';
    this.out.write(`\n${who}: ${message.text}\n\n`);
    this.redraw();
  }

  /** Prints a plain line above the progress line. */
  note(text: string): void {
    this.clear();
    this.out.write(`${text}\n`);
    this.redraw();
  }

  /** Leaves the progress line where it is and moves below it. */
  finish(): void {
    if (this.out.isTTY && this.drawn) this.out.write('\n');
    this.drawn = false;
  }

  private clear(): void {
    if (this.out.isTTY && this.drawn) this.out.write('\r\x1b[2K');
  }

  private redraw(): void {
    if (this.out.isTTY && this.drawn) this.out.write(this.lastLine);
  }
}

export function formatProgressLine(agent: Pick<Agent, 'progress' | 'status' | 'status_message'>): string {
  const filled = Math.round(Math.min(1, Math.max(0, agent.progress)) * BAR_WIDTH);
  const bar = '#'.repeat(filled) + '-'.repeat(BAR_WIDTH - filled);
  const pct = `${Math.floor(agent.progress * 100)}%`.padStart(4);
  return `[${bar}] ${pct}  ${agent.status}  ${agent.status_message}`;
}

/**
 * A sub-agent as a person reads it: its 1-based place among the tasks it was spawned with and the tail of its id.
 * (The ids are UUID v7: siblings share their leading characters, so the head of the id says nothing.)
 */
export function subAgentLabel(agent: Pick<Agent, 'agent_id' | 'spawn_index'>): string {
  const tail = `…${agent.agent_id.slice(-8)}`;
  return agent.spawn_index === null ? `sub-agent ${tail}` : `sub-agent ${agent.spawn_index + 1} (${tail})`;
}

/** At most this many sub-agents are named as they finish; the progress line counts the rest. */
export const NAMED_SUB_AGENTS = 20;
