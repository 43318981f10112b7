/**
 * @module mcp/sampling
 * A server's `sampling/createMessage` request answered by the calling agent's own model: one model turn on the
 * agent's model and account, reserved and settled through the credit gate like the agent's own turns (a ledger row
 * of kind `model`), the way the code agent's model bridge answers Claude Code. Only servers whose `mcpServers` entry
 * says `"sampling": true` may ask (the capability is declared to no other).
 *
 * What the server sends is mapped onto the runtime's content blocks: text passes; images and audio become a line
 * saying so (the runtime's turns carry text, tool calls and tool results only); the server's `systemPrompt` is the
 * turn's system prompt, after a line that says whose request it is. No tools are offered in the turn.
 */
import type { CreateMessageRequest, CreateMessageResult } from '@modelcontextprotocol/sdk/types.js';
import type { ContentBlock, ModelMessage, ModelResponse } from '../models/provider.js';
import type { PlatformServices } from '../tools/platform.js';

type SamplingParams = CreateMessageRequest['params'];

/** The request as one turn of the runtime's model, `maxTokens` capped at `maxTokensCap`. */
export function samplingTurn(server: string, params: SamplingParams, maxTokensCap: number) {
  const messages: ModelMessage[] = [];
  for (const message of params.messages) {
    const raw = message.content as unknown;
    const blocks = (Array.isArray(raw) ? raw : [raw]) as Array<{ type: string; text?: string; mimeType?: string }>;
    const content: ContentBlock[] = blocks.map((b) =>
      b.type === 'text' && typeof b.text === 'string'
        ? { type: 'text', text: b.text }
        : { type: 'text', text: `[${b.type}${b.mimeType ? ` ${b.mimeType}` : ''} omitted: agentry passes text only]` },
    );
    const last = messages.at(-1);
    if (last?.role === message.role) last.content.push(...content);
    else messages.push({ role: message.role, content });
  }
  const system = [
    `An MCP server (${server}) asks for this completion while one of your tool calls runs. Answer its request.`,
    params.systemPrompt ?? '',
  ]
    .filter(Boolean)
    .join('\n\n');
  return { system, messages, tools: [], maxTokens: Math.max(1, Math.min(params.maxTokens, maxTokensCap)) };
}

/** The model's turn as MCP's `CreateMessageResult`. */
export function samplingResult(response: ModelResponse, model: string): CreateMessageResult {
  const text = response.content
    .filter((b) => b.type === 'text')
    .map((b) => (b as { text: string }).text)
    .join('\n');
  const stopReason =
    response.stopReason === 'max_tokens'
      ? 'maxTokens'
      : response.stopReason === 'stop_sequence'
        ? 'stopSequence'
        : 'endTurn';
  return { role: 'assistant', content: { type: 'text', text }, model, stopReason };
}

/**
 * Answers a sampling request for `agentId` with one billed turn of its model. A balance that cannot pay rejects
 * (`insufficient_credits`) and leaves the agent as it is: the server sees an error, the tool call goes on.
 */
export async function answerSampling(
  services: Pick<PlatformServices, 'generate' | 'storage'>,
  server: string,
  agentId: string,
  params: SamplingParams,
  maxTokensCap: number,
  signal: AbortSignal,
): Promise<CreateMessageResult> {
  const agent = await services.storage.getAgent(agentId);
  const response = await services.generate(agentId, samplingTurn(server, params, maxTokensCap), { signal });
  return samplingResult(response, agent?.model ?? 'unknown');
}
