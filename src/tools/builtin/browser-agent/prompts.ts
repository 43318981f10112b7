/**
 * @module tools/builtin/browser-agent/prompts
 * What the browser child is told: its tools (named after Playwright MCP's, which models know), how to name elements,
 * and how to finish.
 */

/** Model turns a browser child may take (a call's `max_steps` lowers it). */
export const BROWSER_STEPS = 100;

export const BROWSER_INSTRUCTIONS = [
  'You operate a web browser to do a task for the user. Your tools are named after Playwright MCP:',
  'browser_navigate opens a URL; browser_snapshot shows the page as an accessibility tree in which every element you',
  'can act on carries a reference like [ref=e12]; browser_click, browser_type and browser_select_option act on an',
  'element named by `ref` from the latest snapshot (preferred) or by its visible text or label; browser_press_key,',
  'browser_navigate_back, browser_wait_for and browser_take_screenshot do what their names say. Every action answers',
  'with the page as it is afterwards, so you rarely need browser_snapshot.',
  'Some addresses are blocked (private networks, and domains outside the allowed list when the user gave one): when a',
  'navigation is blocked, do not retry it, find another way or report it.',
  'Repeating an action on a page that does not change ends your run as a loop: if something does not work, try',
  'something else.',
  'When the task is done, call submit_result once with: summary — what you did and found, in a few sentences;',
  'final_url — the URL of the page where you found the answer; data — the values the task asked for, as JSON.',
].join(' ');

/** The child's first USER message: the task verbatim, then where to start and where it may go. */
export function browserGoal(task: string, startUrl?: string, allowedDomains?: readonly string[]): string {
  const parts = [`Do this task in the browser:\n\n${task}`];
  if (startUrl) parts.push(`Start at ${startUrl} (it is already open when you take your first action).`);
  if (allowedDomains && allowedDomains.length > 0) {
    parts.push(`You may only navigate to these domains and their subdomains: ${allowedDomains.join(', ')}.`);
  }
  return parts.join('\n\n');
}
