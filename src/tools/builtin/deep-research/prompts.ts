/**
 * @module tools/builtin/deep-research/prompts
 * What deep_research's children are told: one place, with the output contract each must meet. The citation rule is
 * spelled out because it is enforced: a citation whose excerpt is not on a page the child read is dropped.
 */
import { turnLimit } from '../research/prompts.js';

const CITATION_RULES = [
  'Citations are checked, not trusted. A citation counts only if you read its page with read_page during this task',
  'and its excerpt is copied word for word from that page (12 to 500 characters; whitespace, case, quotes and dashes',
  'may differ). Citations to pages you did not read, or with excerpts that are not on the page, are removed, and so',
  'are the [n] markers that point at them. Never cite a search snippet: read the page.',
].join(' ');

export function researcherInstructions(budget: { searches: number; pages: number; steps: number }): string {
  return [
    'You are a careful web researcher. Answer the question in your task with facts from pages you read yourself.',
    `Work within a budget of about ${budget.searches} searches (web_search) and ${budget.pages} pages (read_page).`,
    turnLimit(budget.steps),
    'Search with short, specific queries; read the most promising results; prefer primary sources.',
    CITATION_RULES,
    'When you know enough, call submit_result once with: report — Markdown that answers the question, every claim',
    'followed by a marker like [1] — and citations — one entry per marker: {n, url, title, excerpt}.',
    'If you could not find an answer, say so in the report and submit the citations you have.',
  ].join(' ');
}

/** Model turns of the planner and of the writer (their step limits). */
export const PLANNER_STEPS = 8;
export const WRITER_STEPS = 6;

export const PLANNER_INSTRUCTIONS = [
  'You plan web research. Split the topic in your task into 2 to 6 sub-questions that together cover it and can each',
  'be researched on its own. You may run a few web searches to understand the topic first. Then call submit_result',
  'once with {sub_questions: [...]}: each a self-contained question that names the topic.',
  turnLimit(PLANNER_STEPS),
].join(' ');

export const WRITER_INSTRUCTIONS = [
  'You write the final research report from findings that other researchers checked. Use only those findings: do not',
  'add facts. Merge them into one well-organised Markdown report that answers the topic, with a marker like [1] after',
  'each claim. Call submit_result once with {report, citations}: one citation per marker, {n, url, title, excerpt},',
  'each copied from the findings you were given (url and excerpt exactly as there). Each finding numbers its',
  'citations from 1: number yours 1, 2, 3 … through your whole report. Citations that are not in the findings are',
  'removed.',
  turnLimit(WRITER_STEPS),
].join(' ');

/** The first USER message of a researcher: the question verbatim, then the work asked. */
export function researchGoal(question: string, topic: string): string {
  return question === topic
    ? `Research this topic and report on it with citations:\n\n${topic}`
    : `Research this question, part of a study of "${topic}", and report on it with citations:\n\n${question}`;
}

export function planGoal(topic: string): string {
  return `Plan the research of this topic:\n\n${topic}`;
}

/** The writer's first message: the topic and every researcher's checked findings with their citations. */
export function writeGoal(
  topic: string,
  findings: Array<{ question: string; report: string; citations: Array<{ n: number; url: string; excerpt: string }> }>,
): string {
  const parts = findings.map((f, i) =>
    [
      `## Finding ${i + 1}: ${f.question}`,
      f.report,
      'Citations:',
      ...f.citations.map((c) => `[${c.n}] ${c.url} — "${c.excerpt}"`),
    ].join('\n\n'),
  );
  return [`Write the report on this topic:\n\n${topic}`, '# Checked findings', ...parts].join('\n\n');
}
