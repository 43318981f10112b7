/**
 * @module tools/builtin/deep-research
 * `deep_research` (README.md#tools): research children search and read the web and submit a cited Markdown report; the
 * runtime then keeps only the citations whose excerpt is on a page a child of this call read, and removes the [n]
 * markers of the others from the report.
 *
 * `quick` and `standard` run one researcher. `deep` runs in three waves, each a spawn group of its own, with the phase
 * kept in the call's durable state so that a crash resumes at its phase: a planner splits the topic into
 * sub-questions, one researcher per sub-question works in parallel, and a writer merges their *checked* findings into
 * the report.
 */
import { z } from 'zod';
import { defineTool, type ChildTask, type Tool, type ToolContext } from '../../define-tool.js';
import { MODEL_OUTPUT_CHARS, firstThatFit, keepWholeOutput, requireWebSearch } from '../research/output.js';
import type { ResearchToolOptions, ShownInPart } from '../research/output.js';
import { runWave } from '../research/waves.js';
import { CitationChecker } from '../../citations.js';
import {
  PLANNER_INSTRUCTIONS,
  PLANNER_STEPS,
  WRITER_INSTRUCTIONS,
  WRITER_STEPS,
  planGoal,
  researchGoal,
  researcherInstructions,
  writeGoal,
} from './prompts.js';

export const DEEP_RESEARCH_TOOL_NAME = 'deep_research';

/** What each depth may spend. Steps are enforced (the child's step limit); searches and pages are asked for. */
export const DEPTHS = {
  quick: { researchers: 'one', steps: 12, searches: 3, pages: 4 },
  standard: { researchers: 'one', steps: 30, searches: 6, pages: 10 },
  deep: { researchers: 'one per sub-question (2-6)', steps: 30, searches: 6, pages: 10 },
} as const;
type Depth = keyof typeof DEPTHS;

const Citation = z.object({
  n: z.number().int().min(1),
  url: z.string(),
  title: z.string().optional(),
  excerpt: z.string(),
});
const Report = z.object({ report: z.string().min(1), citations: z.array(Citation).max(200) });
const Plan = z.object({ sub_questions: z.array(z.string().min(1)).min(1).max(6) });
type Report = z.infer<typeof Report>;

const Input = z.object({
  topic: z.string().trim().min(3).max(2_000).describe('What to research'),
  depth: z
    .enum(['quick', 'standard', 'deep'])
    .default('standard')
    .describe('quick: one researcher, ~3 searches; standard: one researcher, ~6 searches; deep: parallel researchers'),
  max_sources: z.number().int().min(1).max(50).optional().describe('Pages to read at most, per researcher'),
});

/** Where a call is, kept in its durable state. */
type Phase = (
  | { phase: 'plan' }
  | { phase: 'research'; questions: string[] }
  | {
      phase: 'write';
      findings: Array<{ question: string } & Report>;
      /** Citations of the researchers that failed the check (their markers are out of the findings' reports). */
      dropped?: number;
    }
) & {
  /** The artifact an output too large for the model was kept in, once stored. */
  artifact_id?: string;
};

export { MODEL_OUTPUT_CHARS };

export type CheckedReport = {
  report: string;
  /** Each with the SHA-256 of the page text it was found in and its span there: `runtime.pageSnapshot(sha)`. */
  citations: Array<{
    n: number;
    url: string;
    title: string;
    excerpt: string;
    retrieved_at: string;
    content_sha256: string;
    span: { start: number; end: number };
  }>;
  dropped_citations: number;
  sources_read: number;
  /** Set when not every citation is shown: how many there are. */
  citations_total?: number;
} & ShownInPart;

/**
 * The deep_research tool. Its children use web_search and read_page, which must be in the runtime (they are built
 * in).
 *
 * @example
 * const runtime = await AgentRuntime.open(); // deep_research is built in; web_search needs a search provider
 */
export function deepResearchTool(options: ResearchToolOptions = {}): Tool<z.input<typeof Input>> {
  return defineTool({
    name: DEEP_RESEARCH_TOOL_NAME,
    description:
      'Research a topic on the web with research sub-agents and get a Markdown report whose every citation was ' +
      'checked against a page that was actually read (unverifiable citations are removed). Slower and costlier than ' +
      'web_search; use it for questions that need several sources.',
    input: Input,
    price: options.price ?? 1,
    // Re-running re-attaches to the children each wave spawned, and the phase is in the call's durable state.
    idempotent: true,
    describe: ({ topic }) => `Researching: ${topic}`,
    async run(raw, ctx) {
      requireWebSearch(DEEP_RESEARCH_TOOL_NAME, options);
      const input = Input.parse(raw);
      const depth: Depth = input.depth;
      const shown = (at: Phase, output: CheckedReport) =>
        shownToModel(ctx, at, output, options.maxOutputChars ?? MODEL_OUTPUT_CHARS);
      let phase =
        (await ctx.state.get<Phase>()) ??
        (depth === 'deep' ? { phase: 'plan' } : { phase: 'research', questions: [input.topic] });

      if (phase.phase === 'plan') {
        const wave = await runWave(ctx, 'plan', [
          {
            goal: planGoal(input.topic),
            instructions: PLANNER_INSTRUCTIONS,
            tools: ['web_search'],
            result: Plan,
            maxSteps: PLANNER_STEPS,
          },
        ]);
        if ('suspend' in wave) return wave.suspend(`Planning research: ${input.topic}`);
        const plan = Plan.safeParse(wave.data[0]);
        phase = { phase: 'research', questions: plan.success ? plan.data.sub_questions : [input.topic] };
        await ctx.state.set(phase);
      }

      const budget = {
        searches: DEPTHS[depth].searches,
        pages: input.max_sources ?? DEPTHS[depth].pages,
        steps: DEPTHS[depth].steps,
      };
      if (phase.phase === 'research') {
        const questions = phase.questions;
        const wave = await runWave(
          ctx,
          'research',
          questions.map((q): ChildTask => ({
            goal: researchGoal(q, input.topic),
            instructions: researcherInstructions(budget),
            tools: ['web_search', 'read_page'],
            result: Report,
            maxSteps: DEPTHS[depth].steps,
          })),
        );
        if ('suspend' in wave) {
          return wave.suspend(`Researching ${questions.length === 1 ? input.topic : `${questions.length} questions`}`);
        }
        const reports = wave.data.map((d, i) => ({
          question: questions[i]!,
          ...(Report.safeParse(d).data ?? emptyReport()),
        }));
        if (depth !== 'deep') return shown(phase, await checkReport(ctx, reports[0]!));
        // The writer sees only checked findings: what it cannot cite from them, it cannot cite at all.
        const checker = new CitationChecker(await ctx.pagesRead());
        let dropped = 0;
        const findings = reports.map((r) => {
          const { kept, dropped: lost } = checker.checkAll(r.citations);
          dropped += lost.length;
          const report = removeMarkers(r.report, new Set(kept.map((c) => c.n)));
          return { question: r.question, report, citations: kept.map(toCitation) };
        });
        phase = { phase: 'write', findings, dropped };
        await ctx.state.set(phase);
      }

      const writer = await runWave(ctx, 'write', [
        {
          goal: writeGoal(input.topic, phase.findings),
          instructions: WRITER_INSTRUCTIONS,
          tools: [],
          result: Report,
          maxSteps: WRITER_STEPS,
        },
      ]);
      if ('suspend' in writer) return writer.suspend(`Writing the report: ${input.topic}`);
      // A writer that failed or ran out of steps: the checked findings themselves, rather than nothing.
      const written = Report.safeParse(writer.data[0]).data ?? findingsReport(phase.findings);
      return shown(phase, await checkReport(ctx, written, phase.dropped ?? 0));
    },
  });
}

/** Keeps the citations the runtime can vouch for, and takes the markers of the others out of the report. */
async function checkReport(ctx: ToolContext, report: Report, droppedBefore = 0): Promise<CheckedReport> {
  const pages = await ctx.pagesRead();
  const { kept, dropped } = new CitationChecker(pages).checkAll(report.citations);
  const keptNumbers = new Set(kept.map((c) => c.n));
  return {
    report: removeMarkers(report.report, keptNumbers),
    citations: kept.map(toCitation),
    dropped_citations: droppedBefore + dropped.length,
    sources_read: new Set(pages.map((p) => p.final_url)).size,
  };
}

/**
 * The output as the model sees it. One too large for a tool result is kept whole as a JSON artifact of the calling
 * agent, and the model is shown the report (cut only if it alone is too large) and the citations that fit, with the
 * artifact's id; the id is kept in the call's durable state beside its phase, so a re-run does not store it twice.
 */
async function shownToModel(
  ctx: ToolContext,
  phase: Phase,
  output: CheckedReport,
  maxChars: number,
): Promise<CheckedReport> {
  const text = JSON.stringify(output);
  if (text.length <= maxChars) return output;
  const kept = await keepWholeOutput(ctx, phase, 'deep-research.json', text);
  const total = output.citations.length;
  const where =
    'artifact_id' in kept
      ? `the whole output is the JSON artifact ${kept.artifact_id}`
      : `the whole output could not be kept (${kept.not_kept})`;
  const envelope = (report: string, citations: CheckedReport['citations']): CheckedReport => ({
    ...output,
    report,
    citations,
    citations_total: total,
    ...('artifact_id' in kept ? { artifact_id: kept.artifact_id } : {}),
    note:
      `${report === output.report ? '' : 'The report is cut. '}` +
      `Only the first ${citations.length} of ${total} citations are shown; ${where}.`,
  });
  // Room for the citations, with slack for the digits of the count in the note.
  let room = maxChars - JSON.stringify(envelope(output.report, [])).length - 8;
  let report = output.report;
  if (room < 0) {
    report = `${report.slice(0, Math.max(0, report.length + room - 40))} […]`;
    room = 0;
  }
  return envelope(report, firstThatFit(output.citations, room));
}

function toCitation(c: CheckedReport['citations'][number]): CheckedReport['citations'][number] {
  return {
    n: c.n,
    url: c.url,
    title: c.title,
    excerpt: c.excerpt,
    retrieved_at: c.retrieved_at,
    content_sha256: c.content_sha256,
    span: c.span,
  };
}

/** Drops `[n]` markers whose citation did not survive ("[1][3]", "[1, 3]" and "[1]" forms). */
export function removeMarkers(text: string, kept: ReadonlySet<number>): string {
  return renumberMarkers(text, new Map([...kept].map((n) => [n, n])));
}

/** Rewrites `[n]` markers by `numbers` (old to new); a marker whose number is not in it is removed. */
export function renumberMarkers(text: string, numbers: ReadonlyMap<number, number>): string {
  return text.replace(/(\s*)\[(\d+(?:\s*,\s*\d+)*)\]/g, (_, space: string, list: string) => {
    const left = list
      .split(',')
      .map((n) => numbers.get(Number(n.trim())))
      .filter((n) => n !== undefined);
    return left.length === 0 ? '' : `${space}[${left.join(', ')}]`;
  });
}

/** The checked findings one after the other, their citations numbered through: the report when no writer gave one. */
function findingsReport(findings: ReadonlyArray<{ question: string } & Report>): Report {
  const sections: string[] = [];
  const citations: Report['citations'] = [];
  let last = 0;
  for (const finding of findings) {
    const numbers = new Map<number, number>();
    for (const c of finding.citations) if (!numbers.has(c.n)) numbers.set(c.n, ++last);
    for (const c of finding.citations) citations.push({ ...c, n: numbers.get(c.n)! });
    sections.push(`## ${finding.question}\n\n${renumberMarkers(finding.report, numbers)}`);
  }
  return { report: sections.join('\n\n'), citations };
}

function emptyReport(): Report {
  return { report: 'No report: the research child did not submit one (it failed or ran out of turns).', citations: [] };
}
