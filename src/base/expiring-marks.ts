/**
 * @module base/expiring-marks
 * Keys marked for a while, on the wall clock: an account that another worker waits for credits of stays *contested*
 * for a few seconds after the last word of it (the credit gate and the PostgreSQL credit floats both ask).
 */
export class ExpiringMarks {
  private readonly until = new Map<string, number>();

  /** Marks `key` for `ms` from now (a later mark extends it). */
  mark(key: string, ms: number): void {
    this.until.set(key, Date.now() + ms);
  }

  /** Whether `key` is marked now; a mark that ran out is forgotten. */
  has(key: string): boolean {
    const until = this.until.get(key);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.until.delete(key);
    return false;
  }

  clear(): void {
    this.until.clear();
  }
}
