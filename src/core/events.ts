/**
 * @module core/events
 * The typed events a runtime emits, on eventemitter3. Events are emitted after the change they report is committed
 * to storage, so a listener that reads the agent back sees at least that state.
 */
import { EventEmitter } from 'eventemitter3';
import type { AgentRow } from '../storage/adapter.js';
import type { Agent, AgentStatus, Message } from './schemas.js';

export interface AgentEvents {
  'agent.created': (event: { agent: Agent }) => void;
  'agent.status': (event: { agent: Agent; previous: AgentStatus }) => void;
  'agent.progress': (event: { agent: Agent }) => void;
  'agent.message': (event: { agent_id: string; message: Message }) => void;
  'agent.deleted': (event: { agent_id: string }) => void;
  'credits.charged': (event: {
    account_id: string;
    agent_id: string;
    kind: 'model' | 'tool';
    item: string;
    /** Credits debited. */
    credits: number;
    tokens_in: number;
    tokens_out: number;
  }) => void;
  /**
   * A monitored page changed in a way that matters (the monitor's condition, if any, said so). The owning agent got an
   * ASSISTANT message with the summary and is woken with the change as the result of its `monitor` wait.
   */
  'monitor.changed': (event: {
    agent_id: string;
    monitor_id: string;
    url: string;
    diff_summary: string;
    changed_at: string;
  }) => void;
  /**
   * A monitor's check failed: its selector matched nothing (every time), or the site failed several checks in a row
   * (once per run of failures, not on every check).
   */
  'monitor.error': (event: {
    agent_id: string;
    monitor_id: string;
    url: string;
    error: string;
    failures: number;
  }) => void;
  /** Something failed outside any agent's control (storage, a bug); the runtime keeps going. */
  error: (event: { error: unknown; agent_id?: string }) => void;
}

export type AgentEventName = keyof AgentEvents;

export class RuntimeEvents extends EventEmitter<AgentEvents> {
  /**
   * Runtime-internal observers of every status change, given the storage row: they run on hot paths (10,000 children
   * finishing), so they skip building the public record that `agent.status` listeners get.
   */
  readonly statusHooks: Array<(row: AgentRow, previous: AgentStatus) => void> = [];
}
