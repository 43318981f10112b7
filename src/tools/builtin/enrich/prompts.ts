/**
 * @module tools/builtin/enrich/prompts
 * What enrich's children are told: one place, with the output contract each must meet. The instructions are the same
 * for every child of a call (the entity and its fields are in the first USER message), so thousands of children share
 * one stored spec. The citation rule is spelled out because it is enforced: a value whose citations are not on a page
 * the child read is reported as `null`.
 */
import { turnLimit } from '../research/prompts.js';
import type { FieldType } from './coerce.js';

/** The first words of every enrich child's instructions (tests and logs recognise the children by them). */
export const ENRICH_INSTRUCTIONS_START = 'You fill in facts about one entity';

const TYPE_RULES: Record<FieldType, string> = {
  string: 'text',
  number: 'a number (a JSON number, or text such as "41 metres"; one number, no ranges)',
  boolean: 'true or false',
  date: 'a full date, best as YYYY-MM-DD (a year alone is not a date)',
  url: 'an absolute http(s) URL',
};

const CITATION_RULES = [
  'Citations are checked, not trusted. A citation counts only if you read its page with read_page during this task',
  'and its excerpt is copied word for word from that page (12 to 500 characters; whitespace, case, quotes and dashes',
  'may differ). Citations to pages you did not read, or with excerpts that are not on the page, are removed, and a',
  'value left without a citation is reported as unknown. Never cite a search snippet: read the page. Never guess a',
  'value: if no page you read states it, submit null.',
].join(' ');

export function enrichInstructions(budget: { searches: number; pages: number; steps: number }): string {
  return [
    `${ENRICH_INSTRUCTIONS_START}: the entity and the fields to find are in your task.`,
    `Work within a budget of about ${budget.searches} searches (web_search) and ${budget.pages} pages (read_page).`,
    turnLimit(budget.steps),
    "Start from the entity's own page when your task gives one; search with short queries that name the entity;",
    'read the most promising results; prefer primary sources. Make sure a page is about this entity, not a namesake.',
    CITATION_RULES,
    'When you are done, call submit_result once with {fields: {<field name>: answer}}, one answer for every field in',
    'your task, each {value, citations: [{url, excerpt}], confidence, other_values?, note?}: value in the type asked',
    '(or null when no page you read states it), the citations that state it, confidence from 0 to 1 that the value',
    'is right. When the pages you read disagree, submit the best-supported value as value and each other value, with',
    'its own citations and confidence, in other_values: do not pick silently. note: one short sentence, e.g. why a',
    'value is null.',
  ].join(' ');
}

/** The first USER message of a child: the entity's name verbatim (and its URL when given), then the fields. */
export function enrichGoal(
  entity: { name: string; url?: string | undefined },
  fields: Array<{ name: string; description: string; type: FieldType }>,
): string {
  const lines = [`Find these facts about this entity:\n\n${entity.name}`];
  if (entity.url) lines.push(`Its own page: ${entity.url}`);
  lines.push('Fields:', fields.map((f) => `- ${f.name} (${TYPE_RULES[f.type]}): ${f.description}`).join('\n'));
  return lines.join('\n\n');
}
