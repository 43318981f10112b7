/**
 * @module cli/demo-model
 * The model of `agentry serve --demo`: the scripted stand-in `npm run demo` uses (`scriptedModel` from
 * agentry-runtime/testing), here answering any goal, so the HTTP API can be tried offline without a key. Every agent plans,
 * "thinks" for a few seconds (long enough to poll, pause and resume it by hand), and completes with an answer that
 * says plainly it came from a stand-in, not from research.
 */
import type { ModelRequest } from '../models/provider.js';
import { scriptedModel, type ScriptedModel, type ScriptedTurn } from '../testing/index.js';

/** How long each of the stand-in's two turns takes: a model's pace, so an agent can be watched while ACTIVE. */
export const DEMO_TURN_MS = 3_000;

function goalOf(request: ModelRequest): string {
  const first = request.messages[0]?.content[0];
  return first && first.type === 'text' ? first.text : '';
}

/**
 * The stand-in: turn 0 writes a two-step plan, turn 1 answers. Sub-agents and tools are not used.
 *
 * @example
 * const runtime = await AgentRuntime.open({ model: demoModel() });
 */
export function demoModel(options: { turnMs?: number } = {}): ScriptedModel {
  const delayMs = options.turnMs ?? DEMO_TURN_MS;
  return scriptedModel({
    record: false,
    turns: (request, { turnIndex }): ScriptedTurn => {
      if (turnIndex === 0) {
        return {
          text: 'Demo mode: a scripted stand-in plays the model. I will plan, then answer.',
          toolCalls: [
            {
              name: 'update_plan',
              input: {
                steps: [
                  { title: 'Read the goal', status: 'done' },
                  { title: 'Write the answer', status: 'in_progress' },
                ],
              },
            },
          ],
          usage: { inputTokens: 1_200, outputTokens: 80 },
          delayMs,
        };
      }
      const goal = goalOf(request).replace(/\s+/g, ' ').trim().slice(0, 200);
      return {
        text:
          `[demo] This answer comes from agentry's scripted stand-in, not from a model: nothing was researched for ` +
          `"${goal}". Restart \`agentry serve\` without --demo and with ANTHROPIC_API_KEY set to run agents on Claude.`,
        usage: { inputTokens: 1_500, outputTokens: 60 },
        delayMs,
      };
    },
  });
}
