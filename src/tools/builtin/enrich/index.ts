/**
 * @module tools/builtin/enrich
 * `enrich` (README.md#tools): fills in typed fields for a list of entities. One research child per entity (tools
 * `web_search`, `read_page`, `submit_result`) runs in one wave, in parallel; each submits, for every field, a value with
 * its citations and a confidence, and every other value it found when the pages it read disagree. The runtime then
 * coerces each value to its field's type and keeps it only with a citation whose excerpt is on a page a child of this
 * call read (tools/citations.ts); anything else is `null` with a `reason`, never invented. Checked values that differ
 * are reported as `conflicts` (see rows.ts for why no winner is picked).
 *
 * Durability: the wave is a spawn group of the call, keyed by the call, so a re-run (on wake-up or after a crash)
 * re-attaches to the same children: finished ones are neither run again nor lost, the rest resume where they were.
 * There is one phase only: the rows are computed from the children's stored results and the stored pages each time the
 * wave is found done. `ctx.state` keeps only the id of the artifact a table too large for the model is stored in.
 */
import { z } from 'zod';
import { CitationChecker } from '../../citations.js';
import { defineTool, type ChildTask, type Tool, type ToolContext } from '../../define-tool.js';
import { MODEL_OUTPUT_CHARS, firstThatFit, keepWholeOutput, requireWebSearch } from '../research/output.js';
import type { ResearchToolOptions, ShownInPart } from '../research/output.js';
import { citedUrls, runWave } from '../research/waves.js';
import { FIELD_TYPES } from './coerce.js';
import { enrichGoal, enrichInstructions } from './prompts.js';
import { assembleRow, childResultSchema, type EnrichRow } from './rows.js';

export { coerceValue, sameValueKey, FIELD_TYPES, type FieldType, type FieldValue } from './coerce.js';
export type { EnrichCitation, EnrichConflict, EnrichFieldResult, EnrichRow } from './rows.js';

export const ENRICH_TOOL_NAME = 'enrich';
export const MAX_ENTITIES = 1_000;
export const MAX_FIELDS = 20;

/**
 * What one child may spend, by the number of fields: steps are enforced (the child's step limit), searches and pages
 * are asked for in its instructions. 3 fields: 16 steps, about 4 searches and 6 pages.
 */
export function childBudget(fieldCount: number): { steps: number; searches: number; pages: number } {
  return {
    steps: Math.min(60, 10 + 2 * fieldCount),
    searches: Math.min(12, 2 + Math.ceil(fieldCount / 2)),
    pages: Math.min(15, 3 + fieldCount),
  };
}

const Entity = z.object({
  name: z.string().trim().min(1).max(500).describe('The entity, as precisely as you can name it'),
  url: z
    .url({ protocol: /^https?$/ })
    .max(2_000)
    .optional()
    .describe("The entity's own page, when known: researched first"),
});

const Field = z.object({
  // Field names become property names of the children's result schema: model APIs accept only these characters there.
  name: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,64}$/, 'letters, digits, _ . or - (at most 64 characters)')
    // A row's fields are a plain object, where this name would set the prototype instead of a field.
    .refine((name) => name !== '__proto__', 'a field may not be named __proto__')
    .describe('The key of this field in each row, e.g. founded_year'),
  description: z.string().trim().min(1).max(1_000).describe('What to find, e.g. "the year the company was founded"'),
  type: z.enum(FIELD_TYPES).describe('string, number, boolean, date (YYYY-MM-DD) or url'),
});

const Input = z.object({
  entities: z.array(Entity).min(1).max(MAX_ENTITIES).describe('The entities to enrich (one research child each)'),
  fields: z
    .array(Field)
    .min(1)
    .max(MAX_FIELDS)
    .refine((fields) => new Set(fields.map((f) => f.name)).size === fields.length, 'field names must be unique')
    .describe('The fields to find for every entity'),
});

export { MODEL_OUTPUT_CHARS };

export interface EnrichOutput extends ShownInPart {
  /** One row per entity, in input order; when the table is too large for the model, the first ones that fit. */
  rows: EnrichRow[];
  /** Citations the children submitted that failed the check (page never read, excerpt not on it, …). */
  dropped_citations: number;
  /** Set when not every row is shown: how many rows the table has. */
  rows_total?: number;
}

/**
 * The enrich tool. Its children use web_search and read_page, which must be in the runtime (they are built in).
 *
 * Price: a flat `price` per call (default 1 credit), plus what the children spend (model turns, searches, pages), all
 * on the caller's account and within its `max_credits`.
 *
 * @example
 * const runtime = await AgentRuntime.open(); // enrich is built in; web_search needs a search provider
 */
export function enrichTool(options: ResearchToolOptions = {}): Tool<z.input<typeof Input>> {
  return defineTool({
    name: ENRICH_TOOL_NAME,
    description:
      'Fill in typed fields (string, number, boolean, date, url) for up to 1,000 entities, one web-research ' +
      'sub-agent per entity in parallel. Each value comes with citations that were checked against pages actually ' +
      'read; a field without a checked source is null with a reason, and fields whose sources disagree are listed ' +
      'under conflicts. Use it for tables of facts about many companies, places, people or products.',
    input: Input,
    price: options.price ?? 1,
    // Re-running re-attaches to the wave's children; the rows are recomputed from what they stored.
    idempotent: true,
    describe: ({ entities, fields }) =>
      `Enriching ${entities.length} ${entities.length === 1 ? 'entity' : 'entities'} with ${fields.length} ` +
      `field${fields.length === 1 ? '' : 's'}`,
    async run(raw, ctx) {
      requireWebSearch(ENRICH_TOOL_NAME, options);
      const { entities, fields } = Input.parse(raw);
      const budget = childBudget(fields.length);
      // Shared by every child, so their stored specs are one and the same.
      const instructions = enrichInstructions(budget);
      const result = childResultSchema(fields);
      const wave = await runWave(
        ctx,
        'entities',
        entities.map((entity): ChildTask => ({
          goal: enrichGoal(entity, fields),
          instructions,
          tools: ['web_search', 'read_page'],
          result,
          maxSteps: budget.steps,
        })),
      );
      if ('suspend' in wave) {
        return wave.suspend(`Enriching ${entities.length === 1 ? entities[0]!.name : `${entities.length} entities`}`);
      }
      const checker = new CitationChecker(await ctx.pagesRead({ urls: citedUrls(wave.data) }));
      let dropped = 0;
      const rows = entities.map((entity, i) => {
        const one = assembleRow(entity, fields, wave.data[i], checker);
        dropped += one.dropped;
        return one.row;
      });
      return shownToModel(ctx, { rows, dropped_citations: dropped }, options.maxOutputChars ?? MODEL_OUTPUT_CHARS);
    },
  });
}

/**
 * The output as the model sees it. A table too large for one tool result is kept whole as a JSON artifact of the
 * calling agent, and the model is shown the rows that fit with the artifact's id. The artifact's id is kept in the
 * call's durable state, so a re-run of a finished wave (after a crash) does not store the table twice.
 */
async function shownToModel(
  ctx: ToolContext,
  output: EnrichOutput,
  maxChars: number,
): Promise<Record<string, unknown>> {
  const text = JSON.stringify(output);
  if (text.length <= maxChars) return { ...output };
  const saved = (await ctx.state.get<{ artifact_id: string }>()) ?? {};
  const kept = await keepWholeOutput(ctx, saved, 'enrich-rows.json', text);
  const total = output.rows.length;
  // Room for the envelope (counts, id, note) besides the rows.
  const rows = firstThatFit(output.rows, maxChars - 600);
  const where =
    'artifact_id' in kept
      ? `the whole table (all ${total} rows) is the JSON artifact ${kept.artifact_id}`
      : `the whole table could not be kept (${kept.not_kept})`;
  return {
    rows,
    dropped_citations: output.dropped_citations,
    rows_total: total,
    ...('artifact_id' in kept ? { artifact_id: kept.artifact_id } : {}),
    note: `Only the first ${rows.length} of ${total} rows are shown; ${where}.`,
  };
}
