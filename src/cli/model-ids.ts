/**
 * @module cli/model-ids
 * What the CLI says about the upstream model behind each public model: `agentry tools` lists them, `agentry serve`
 * warns at start when the server does not list one (every agent of that model would fail at its first call).
 */
import type { ModelProvider } from '../index.js';
import type { ResolvedModelId } from '../models/model-ids.js';
import { MODEL_ENV_VARS } from '../models/model-ids.js';

/** The provider's resolved ids, or none when it cannot say (another provider, the demo model). */
export async function resolvedModelIds(model: ModelProvider): Promise<ResolvedModelId[]> {
  if (model.resolveModels === undefined) return [];
  try {
    return await model.resolveModels();
  } catch {
    return [];
  }
}

/** One line per public model: `svc-1-lite  claude-haiku-4-5  (listed by the server)`. */
export function formatModelIds(ids: ResolvedModelId[]): string {
  const width = Math.max(0, ...ids.map((id) => id.model.length));
  return ids
    .map((id) => {
      const state =
        id.listed === undefined
          ? 'not checked'
          : id.listed
            ? 'listed by the server'
            : `NOT listed by the server: set ${MODEL_ENV_VARS[id.model] ?? 'anthropicProvider({ models })'}`;
      return `${id.model.padEnd(width)}  ${id.upstream}  (${state})`;
    })
    .join('\n');
}

/** Warning lines for `agentry serve`: one per upstream id the server does not list. */
export function unlistedModelWarnings(ids: ResolvedModelId[]): string[] {
  return ids
    .filter((id) => id.listed === false)
    .map(
      (id) =>
        `agentry: warning: the upstream model ${JSON.stringify(id.upstream)} behind ${id.model} is not listed by the ` +
        `Anthropic API (GET /v1/models); its agents will fail. Set ${MODEL_ENV_VARS[id.model] ?? 'another id'} ` +
        `(AGENTRY_MODEL_LITE / AGENTRY_MODEL_ULTRA).`,
    );
}
