/**
 * @module tools/builtin/research/prompts
 * What every research child (deep_research, find_all, enrich) is told alike.
 */

/**
 * The child's turn limit and what running out costs: a child stopped at its step limit submits nothing, so everything
 * it found is lost. Told with the limit the child is spawned with.
 */
export function turnLimit(steps: number): string {
  return [
    `You have at most ${steps} turns (one reply, with all the tool calls in it, is one turn): call submit_result`,
    'before they run out, with what you have so far; a task that ends without submit_result returns nothing.',
  ].join(' ');
}
