/**
 * @module tools/builtin/monitor/select
 * CSS selectors of the model (`selector`, `ignore_selectors`) matched against a page anyone writes, with a bound on
 * the work. css-select (the engine linkedom uses) backtracks over descendant combinators: `p div div div div span` on
 * 100 nested `div`s takes seconds, and each more combinator multiplies that by the depth. Here every step the engine
 * takes through the tree (a parent, a node's children or siblings) is counted, and past {@link SELECTOR_STEPS} the
 * match stops with an error, so no selector holds the event loop longer than that many steps (tens of milliseconds).
 */
import { selectAll, type Options } from 'css-select';

type Adapter = NonNullable<Options<Node, Element>['adapter']>;

/** Steps through the tree the selectors of one check may take together: tens of milliseconds of matching. */
export const SELECTOR_STEPS = 500_000;

/** What is left of a check's steps, shared by its selectors. */
export interface StepBudget {
  left: number;
}

/** Thrown when a selector needs more than its steps on this page. */
export class SelectorTooCostly extends Error {}

const ELEMENT = 1;
const TEXT = 3;

function textOf(node: Node): string {
  if (node.nodeType === TEXT) return (node as Text).data;
  if (node.nodeType !== ELEMENT) return '';
  return Array.from(node.childNodes, textOf).join('');
}

/** linkedom's nodes as css-select walks them, each move through the tree counted against `steps`. */
function countingAdapter(budget: StepBudget): Adapter {
  const step = () => {
    if (--budget.left < 0) throw new SelectorTooCostly();
  };
  const children = (node: Node): Node[] => {
    step();
    return Array.from(node.childNodes ?? []);
  };
  return {
    isTag: (node): node is Element => node.nodeType === ELEMENT,
    getAttributeValue: (element, name) => element.getAttribute(name) ?? undefined,
    getChildren: children,
    getName: (element) => element.localName.toLowerCase(),
    getParent: (element) => {
      step();
      const parent = element.parentNode;
      return parent && parent.nodeType === ELEMENT ? parent : null;
    },
    getSiblings: (node) => (node.parentNode ? children(node.parentNode) : [node]),
    getText: textOf,
    hasAttrib: (element, name) => element.hasAttribute(name),
    removeSubsets: (nodes: Node[]) =>
      nodes.filter((node, i) => {
        for (let up = node.parentNode; up; up = up.parentNode) if (nodes.includes(up)) return false;
        return nodes.indexOf(node) === i;
      }),
  };
}

/**
 * The elements under `root` that `selector` matches (document order). Throws `SelectorTooCostly` when the match
 * would take more than the budget's steps (spent as it goes), and css-select's own error for a selector it cannot
 * parse.
 *
 * @example
 * const prices = selectBounded(document.documentElement, '.price', { left: SELECTOR_STEPS });
 */
export function selectBounded(root: Element, selector: string, budget: StepBudget): Element[] {
  return selectAll(selector, root, { adapter: countingAdapter(budget), xmlMode: false });
}
