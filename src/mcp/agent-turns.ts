/**
 * @module mcp/agent-turns
 * Calls of one agent at a time on a server that may ask for sampling. MCP does not say which call a server's
 * `sampling/createMessage` comes with, and the answer is a billed turn of one agent's model: with calls of two agents
 * in flight it could only be refused (or billed to a guess). So on such a server the agents take turns: the calls of
 * the agent whose turn it is run together (as many as it makes), another agent's calls wait, and once an agent is
 * waiting, the running agent's new calls queue behind it (first come, first served: no agent holds the server by
 * calling again and again). Each call is bounded by its timeout, so a wait is too. Servers without sampling do not
 * take turns.
 */

interface Waiter {
  agentId: string;
  start(): void;
}

/** Whose turn it is on one connection, and who waits. */
export class AgentTurns {
  private owner: string | undefined;
  private running = 0;
  private readonly queue: Waiter[] = [];

  /** Agents waiting for their turn (tests read it). */
  get waiting(): number {
    return this.queue.length;
  }

  /**
   * Resolves when `agentId`'s call may be sent; the caller must call the returned `done` once the call has ended.
   * Rejects with the signal's reason when it aborts while waiting.
   */
  async take(agentId: string, signal?: AbortSignal): Promise<() => void> {
    if (this.owner === undefined || (this.owner === agentId && this.queue.length === 0)) {
      this.owner = agentId;
      this.running++;
      return this.done();
    }
    signal?.throwIfAborted();
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        agentId,
        start: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        const at = this.queue.indexOf(waiter);
        if (at >= 0) this.queue.splice(at, 1);
        reject(signal!.reason instanceof Error ? signal!.reason : new Error('aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.queue.push(waiter);
    });
    return this.done();
  }

  private done(): () => void {
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      if (--this.running > 0) return;
      this.owner = undefined;
      const next = this.queue[0];
      if (!next) return;
      // The next agent's turn: every call of it that waits starts now.
      this.owner = next.agentId;
      for (let i = 0; i < this.queue.length;) {
        const waiter = this.queue[i]!;
        if (waiter.agentId !== next.agentId) i++;
        else {
          this.queue.splice(i, 1);
          this.running++;
          waiter.start();
        }
      }
    };
  }
}
