/**
 * @module tools/builtin/research/output
 * What the research tools (deep_research, find_all, enrich) share about their output and options. An output too large
 * for one tool result is kept whole as a JSON artifact of the calling agent, and the model is shown what fits with the
 * artifact's id; each tool decides what fits (report, entities, rows) and how it says so. The artifact's id is kept in
 * the call's durable state, so a re-run of a finished call (after a crash) does not store the output twice.
 */
import { AgentryError } from '../../../errors.js';
import type { ToolContext } from '../../define-tool.js';

/** See `maxOutputChars` of {@link ResearchToolOptions}. */
export const MODEL_OUTPUT_CHARS = 40_000;

/** The options of each research tool. */
export interface ResearchToolOptions {
  /** Credits per call, besides what its children spend. @default 1 (find_all: 2) */
  price?: number;
  /** What to set, when the children's web_search has no backend: each call then fails at once with it. */
  missing?: string | null;
  /**
   * Characters of output the model is shown at most; a larger output is kept whole as an artifact.
   * @default 40_000 (below the runtime's default `limits.maxToolResultChars`, 50,000, which would cut the JSON)
   */
  maxOutputChars?: number;
}

/** Fails the call at once when the children's web_search has no backend (`options.missing`). */
export function requireWebSearch(toolName: string, options: ResearchToolOptions): void {
  if (options.missing) throw new AgentryError('not_configured', `${toolName} needs web_search: ${options.missing}`);
}

/**
 * What an output carries besides its own fields when the model is shown only part of it. A type, not an interface:
 * a tool's output must be assignable to `Record<string, unknown>`.
 */
export type ShownInPart = {
  /** Set when not everything is shown: the artifact with the whole output as JSON (`runtime.getArtifact`). */
  artifact_id?: string;
  /** Set when not everything is shown: says so, for the model. */
  note?: string;
};

/** The whole output's artifact, or why it could not be stored (over the artifact limits). */
export type KeptOutput = { artifact_id: string } | { not_kept: string };

/**
 * Stores the whole output (`data`, JSON) as an artifact named `name`, once: `state` is the call's durable state, and
 * the artifact's id is saved in it beside what is already there. A state that already has an id gives it back.
 */
export async function keepWholeOutput(
  ctx: ToolContext,
  state: { artifact_id?: string },
  name: string,
  data: string,
): Promise<KeptOutput> {
  if (state.artifact_id !== undefined) return { artifact_id: state.artifact_id };
  let artifact_id: string;
  try {
    ({ artifact_id } = await ctx.artifacts.put({ name, mime_type: 'application/json', data }));
  } catch (err) {
    // Over the artifact limits: the model still gets what fits, and is told why there is no more.
    return { not_kept: (err instanceof Error ? err.message : String(err)).slice(0, 200) };
  }
  // The artifact is stored: the model gets its id even if the id cannot be saved (a re-run would store it again).
  await ctx.state.set({ ...state, artifact_id }).catch(() => {});
  return { artifact_id };
}

/** The first `items` whose JSON, one comma each, fits in `room` characters. */
export function firstThatFit<T>(items: readonly T[], room: number): T[] {
  const fit: T[] = [];
  for (const item of items) {
    room -= JSON.stringify(item).length + 1;
    if (room < 0) break;
    fit.push(item);
  }
  return fit;
}
