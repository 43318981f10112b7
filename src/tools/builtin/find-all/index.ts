/**
 * @module tools/builtin/find-all
 * `find_all` (README.md#tools): find the entities that fit an objective, each with checked evidence. Two waves of
 * research children, each a spawn group of the call, with the phase kept in the call's durable state:
 *
 * 1. generate — two independent generators (one starts from lists, one hunts entity by entity) submit candidates with
 *    evidence. Each quote goes through the citation check; the candidates are merged by normalised name and by page or
 *    registrable domain (dedupe.ts), excluded ones are left out, and those left without a checked quote are dropped.
 *    The candidate set is then saved: a crash after this point never generates again.
 * 2. verify — one child per candidate, in parallel, checks every match condition; a condition counts as met only with
 *    a checked quote, and an entity is kept only if it meets them all. Without conditions there is no second wave.
 *
 * Beside what it found, it estimates how many entities there are (capture–recapture over what each generator found
 * that matched), so a caller knows how much it probably missed.
 */
import { z } from 'zod';
import { CitationChecker, type CheckedCitation } from '../../citations.js';
import { ToolSuspension, defineTool, type ChildTask, type Tool, type ToolContext } from '../../define-tool.js';
import { MODEL_OUTPUT_CHARS, firstThatFit, keepWholeOutput, requireWebSearch } from '../research/output.js';
import type { ResearchToolOptions, ShownInPart } from '../research/output.js';
import { citedUrls, runWave } from '../research/waves.js';
import type { CandidateSubmission, MergedCandidate, mergeCandidates as MergeCandidates } from './dedupe.js';
import {
  GENERATOR_INSTRUCTIONS,
  GENERATOR_STEPS,
  VERIFIER_INSTRUCTIONS,
  VERIFIER_STEPS,
  generatorGoal,
  verifierGoal,
} from './prompts.js';

export const FIND_ALL_TOOL_NAME = 'find_all';

/** What one call may ask for and spend on. */
export const FIND_ALL_LIMITS = {
  /** Entities returned by default, and at most. */
  defaultLimit: 20,
  maxLimit: 200,
  /** Model turns of a generator, and of a verifier. */
  generatorSteps: GENERATOR_STEPS,
  verifierSteps: VERIFIER_STEPS,
  /** Candidates a generator may submit; those past its target are not verified. */
  maxCandidatesPerGenerator: 400,
} as const;

const Condition = z.object({
  name: z.string().trim().min(1).max(100).describe('A short name, e.g. "cooperative"'),
  description: z.string().trim().min(1).max(1_000).describe('What must be true of an entity, in a sentence'),
});

const Input = z.object({
  objective: z.string().trim().min(3).max(2_000).describe('What to find, e.g. "software companies in Lyon"'),
  entity_type: z.string().trim().min(1).max(200).optional().describe('The kind of entity, e.g. "company"'),
  match_conditions: z
    .array(Condition)
    .max(10)
    .refine((cs) => new Set(cs.map((c) => c.name.toLowerCase())).size === cs.length, 'condition names must differ')
    .optional()
    .describe('Conditions every entity returned must meet, each checked with evidence'),
  limit: z
    .number()
    .int()
    .min(1)
    .max(FIND_ALL_LIMITS.maxLimit)
    .default(FIND_ALL_LIMITS.defaultLimit)
    .describe('Entities to return at most'),
  exclude: z
    .array(z.object({ name: z.string().trim().min(1).max(300), url: z.string().max(2_000).optional() }))
    .max(1_000)
    .optional()
    .describe('Entities already known, left out of the result'),
});

const Quote = z.object({ url: z.string().max(2_000), excerpt: z.string().max(2_000) });
const Candidates = z.object({
  candidates: z
    .array(
      z.object({
        name: z.string().min(1).max(300),
        url: z.string().max(2_000),
        description: z.string().max(2_000),
        evidence: z.array(Quote).max(5),
      }),
    )
    .max(FIND_ALL_LIMITS.maxCandidatesPerGenerator),
});
const Verdict = z.object({
  matched_conditions: z
    .array(z.object({ name: z.string().max(100), met: z.boolean(), evidence: z.array(Quote).max(5) }))
    .max(20),
});

/** A checked quote: `runtime.pageSnapshot(content_sha256).slice(span.start, span.end)` is its excerpt. */
export type Evidence = {
  url: string;
  title: string;
  excerpt: string;
  retrieved_at: string;
  content_sha256: string;
  span: { start: number; end: number };
};

export type FoundEntity = {
  name: string;
  url: string;
  description: string;
  evidence: Evidence[];
  matched_conditions: Array<{ name: string; met: boolean; evidence: Evidence[] }>;
};

export type FindAllResult = {
  entities: FoundEntity[];
  /** Distinct candidates the generators proposed (spellings of one entity merged, excluded ones left out). */
  candidates_considered: number;
  /** Of those, the ones dropped because what was claimed about them failed the citation check. */
  dropped: number;
  /** Capture–recapture estimate of how many entities match; absent when the generators found none in common. */
  estimated_total?: number;
  /** Set when not every entity is shown: how many entities the result has. */
  entities_total?: number;
} & ShownInPart;

export { MODEL_OUTPUT_CHARS };

/** Where a call is, kept in its durable state; no state yet means it is generating. */
interface VerifyPhase {
  phase: 'verify';
  candidates: Array<MergedCandidate<Evidence>>;
  candidates_considered: number;
  dropped: number;
  /** The artifact a result too large for the model was kept in, once stored. */
  artifact_id?: string;
}

/**
 * The find_all tool. Its children use web_search and read_page, which must be in the runtime (they are built in).
 *
 * @example
 * const runtime = await AgentRuntime.open(); // find_all is built in; web_search needs a search provider
 */
export function findAllTool(options: ResearchToolOptions = {}): Tool<z.input<typeof Input>> {
  return defineTool({
    name: FIND_ALL_TOOL_NAME,
    description:
      'Find all the entities (companies, people, places, products …) that fit an objective and optional match ' +
      'conditions, with research sub-agents: two independent searches propose candidates, one sub-agent per ' +
      'candidate checks every condition, and only entities whose every condition is backed by a quote from a page ' +
      'actually read are returned, deduplicated. Also estimates how many exist in total. Slow and costly: use it for ' +
      'lists, not for one fact.',
    input: Input,
    price: options.price ?? 2,
    // Re-running re-attaches to the children each wave spawned, and the phase is in the call's durable state.
    idempotent: true,
    describe: ({ objective }) => `Finding: ${objective}`,
    async run(raw, ctx) {
      requireWebSearch(FIND_ALL_TOOL_NAME, options);
      const input = Input.parse(raw);
      const conditions = input.match_conditions ?? [];
      // tldts carries the public-suffix list: loaded on the first call, not with agentry.
      const { estimateTotal, mergeCandidates } = await import('./dedupe.js');

      const generated = (await ctx.state.get<VerifyPhase>()) ?? (await generate(ctx, input, mergeCandidates));
      if (generated instanceof ToolSuspension) return generated;
      const state = generated;

      const found = (
        entities: Array<{ candidate: MergedCandidate<Evidence>; entity: FoundEntity }>,
        dropped: number,
      ) => {
        const estimate = estimateTotal(entities.map((e) => e.candidate.found_by));
        const result: FindAllResult = {
          entities: entities.slice(0, input.limit).map((e) => e.entity),
          candidates_considered: state.candidates_considered,
          dropped,
        };
        if (estimate !== undefined) result.estimated_total = estimate;
        return shownToModel(ctx, state, result, options.maxOutputChars ?? MODEL_OUTPUT_CHARS);
      };
      const entityOf = (c: MergedCandidate<Evidence>, matched: FoundEntity['matched_conditions']): FoundEntity => ({
        name: c.name,
        url: c.url,
        description: c.description,
        evidence: c.evidence,
        matched_conditions: matched,
      });

      if (conditions.length === 0 || state.candidates.length === 0) {
        return found(
          state.candidates.map((candidate) => ({ candidate, entity: entityOf(candidate, []) })),
          state.dropped,
        );
      }

      const candidates = state.candidates;
      const wave = await runWave(
        ctx,
        'verify',
        candidates.map((c): ChildTask => ({
          goal: verifierGoal(input.objective, c, conditions),
          instructions: VERIFIER_INSTRUCTIONS,
          tools: ['web_search', 'read_page'],
          result: Verdict,
          maxSteps: FIND_ALL_LIMITS.verifierSteps,
        })),
      );
      if ('suspend' in wave) {
        return wave.suspend(
          `Checking ${candidates.length} candidate${candidates.length === 1 ? '' : 's'}: ${input.objective}`,
        );
      }
      const checker = new CitationChecker(await ctx.pagesRead({ urls: citedUrls(wave.data) }));
      const entities: Array<{ candidate: MergedCandidate<Evidence>; entity: FoundEntity }> = [];
      let dropped = state.dropped;
      candidates.forEach((candidate, i) => {
        const verdict = Verdict.safeParse(wave.data[i]).data?.matched_conditions ?? [];
        let claimedAll = true;
        const matched = conditions.map((condition) => {
          const said = verdict.find((v) => v.name.trim().toLowerCase() === condition.name.toLowerCase());
          if (!said?.met) claimedAll = false;
          const evidence = said ? checker.checkAll(said.evidence).kept.map(toEvidence) : [];
          return { name: condition.name, met: said?.met === true && evidence.length > 0, evidence };
        });
        if (matched.every((m) => m.met)) entities.push({ candidate, entity: entityOf(candidate, matched) });
        // It would have matched on the verifier's word alone: dropped for want of checked evidence, not a mismatch.
        else if (claimedAll) dropped++;
      });
      return found(entities, dropped);
    },
  });
}

/** The first wave: two generators, their quotes checked, their candidates merged; saved before it returns. */
async function generate(
  ctx: ToolContext,
  input: z.infer<typeof Input>,
  mergeCandidates: typeof MergeCandidates,
): Promise<VerifyPhase | ToolSuspension> {
  const conditions = input.match_conditions ?? [];
  // With conditions to meet, some candidates will fail them: ask for more than the limit.
  const target =
    conditions.length > 0 ? Math.min(input.limit * 2, FIND_ALL_LIMITS.maxCandidatesPerGenerator) : input.limit;
  const goal = generatorGoal({
    objective: input.objective,
    entityType: input.entity_type,
    conditions,
    target,
    exclude: input.exclude ?? [],
  });
  const wave = await runWave(
    ctx,
    'generate',
    GENERATOR_INSTRUCTIONS.map((instructions): ChildTask => ({
      goal,
      instructions,
      tools: ['web_search', 'read_page'],
      result: Candidates,
      maxSteps: FIND_ALL_LIMITS.generatorSteps,
    })),
  );
  if ('suspend' in wave) return wave.suspend(`Finding candidates: ${input.objective}`);
  const checker = new CitationChecker(await ctx.pagesRead({ urls: citedUrls(wave.data) }));
  const submissions = wave.data.flatMap((data, generator) =>
    (Candidates.safeParse(data).data?.candidates ?? []).slice(0, target).map((c): CandidateSubmission<Evidence> => ({
      generator,
      name: c.name,
      url: c.url,
      description: c.description,
      evidence: checker.checkAll(c.evidence).kept.map(toEvidence),
    })),
  );
  const { candidates, dropped } = mergeCandidates(submissions, input.exclude ?? []);
  const state: VerifyPhase = {
    phase: 'verify',
    candidates,
    candidates_considered: candidates.length + dropped,
    dropped,
  };
  await ctx.state.set(state);
  return state;
}

/**
 * The result as the model sees it. One too large for a tool result (200 entities, each with quotes for every
 * condition) is kept whole as a JSON artifact of the calling agent, and the model is shown the entities that fit with
 * the artifact's id; the id is kept in the call's durable state, so a re-run does not store the result twice.
 */
async function shownToModel(
  ctx: ToolContext,
  state: VerifyPhase,
  result: FindAllResult,
  maxChars: number,
): Promise<FindAllResult> {
  const text = JSON.stringify(result);
  if (text.length <= maxChars) return result;
  const kept = await keepWholeOutput(ctx, state, 'find-all-entities.json', text);
  const total = result.entities.length;
  // Room for the envelope (counts, id, note) besides the entities.
  const entities = firstThatFit(result.entities, maxChars - 600);
  const where =
    'artifact_id' in kept
      ? `all ${total} are in the JSON artifact ${kept.artifact_id}`
      : `the whole result could not be kept (${kept.not_kept})`;
  return {
    ...result,
    entities,
    entities_total: total,
    ...('artifact_id' in kept ? { artifact_id: kept.artifact_id } : {}),
    note: `Only the first ${entities.length} of ${total} entities are shown; ${where}.`,
  };
}

function toEvidence(c: CheckedCitation<z.infer<typeof Quote>>): Evidence {
  return {
    url: c.url,
    title: c.title,
    excerpt: c.excerpt,
    retrieved_at: c.retrieved_at,
    content_sha256: c.content_sha256,
    span: c.span,
  };
}
