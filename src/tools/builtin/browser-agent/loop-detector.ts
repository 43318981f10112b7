/**
 * @module tools/builtin/browser-agent/loop-detector
 * Notices a browser child going round in circles, from two signs: the same action (tool and input) taken again on a
 * page that did not change since it was last taken, `maxRepeats` times in a row; or `maxStill` actions in a row after
 * which the page was as it was before them. A page is its digest (URL and snapshot). Pure and serialisable: its
 * state lives in the child's durable browser state, so a restart does not reset the count.
 */

export interface LoopDetectorOptions {
  /** The same action on an unchanged page this many times ends the child. @default 3 */
  maxRepeats?: number;
  /** This many actions in a row without the page changing end the child. @default 8 */
  maxStill?: number;
}

/** The detector's state (plain JSON). */
export interface LoopState {
  last_action?: string;
  /** The page digest after the last action. */
  last_digest?: string;
  repeats: number;
  still: number;
}

export const emptyLoopState = (): LoopState => ({ repeats: 0, still: 0 });

/** The key that makes two actions "the same": the tool and its input with keys sorted. */
export function actionKey(tool: string, input: Record<string, unknown>): string {
  const sorted = Object.keys(input)
    .sort()
    .map((k) => [k, input[k]]);
  return `${tool} ${JSON.stringify(sorted)}`;
}

/**
 * Records one action (its key, and the page digest before and after it) and says whether the child is looping, and
 * why. Returns the new state; the input state is not changed.
 *
 * @example
 * let s = emptyLoopState();
 * for (let i = 0; i < 3; i++) ({ state: s } = observeAction(s, 'browser_click e5', 'd1', 'd1'));
 * observeAction(s, 'browser_click e5', 'd1', 'd1').loop; // "the same action (…) 3 times on an unchanged page"
 */
export function observeAction(
  state: LoopState,
  action: string,
  before: string,
  after: string,
  options: LoopDetectorOptions = {},
): { state: LoopState; loop?: string } {
  const maxRepeats = options.maxRepeats ?? 3;
  const maxStill = options.maxStill ?? 8;
  const unchanged = before === after;
  const sameAsLast = action === state.last_action && state.last_digest === before;
  const next: LoopState = {
    last_action: action,
    last_digest: after,
    repeats: sameAsLast && unchanged ? state.repeats + 1 : unchanged ? 1 : 0,
    still: unchanged ? state.still + 1 : 0,
  };
  if (next.repeats >= maxRepeats) {
    return { state: next, loop: `the same action (${action}) ${next.repeats} times on a page that did not change` };
  }
  if (next.still >= maxStill) {
    return { state: next, loop: `${next.still} actions in a row without the page changing` };
  }
  return { state: next };
}
