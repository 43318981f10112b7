/**
 * @module storage/search
 * What every adapter's `searchAgents` agrees on: goal text matches ASCII letters in either case and every other
 * character exactly. SQLite's `lower()` folds only ASCII, so the other adapters fold only ASCII too, and all three
 * give the same answer.
 */

/** The text with A-Z lowered and nothing else changed. */
export function asciiLower(text: string): string {
  return text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
}
