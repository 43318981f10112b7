/**
 * @module storage/postgres/batcher
 * Group commit for the PostgreSQL adapter: the writes queued while a batch is on its way (or within one turn of the
 * event loop) go together in the next one, one round trip for all of them. One batch is in flight at a time: the step
 * commits of one process all take the same account row's lock anyway, so parallel batches would only queue on the
 * server instead of here.
 */

/** What the server answered for one item of a batch. */
export type ItemOutcome<O> = { ok: true; value: O } | { ok: false; error: Error };

interface Pending<I, O> {
  item: I;
  resolve(value: O): void;
  reject(error: unknown): void;
}

/**
 * Returns `submit(item)`, which resolves with the item's own outcome once the batch that carried it has committed.
 * `run` commits a batch and answers one outcome per item, in order; if it throws, every item of the batch rejects.
 * `maxInFlight` batches may be on their way at once (1: a batch leaves when the previous one has answered).
 */
export function groupCommit<I, O>(
  run: (items: I[]) => Promise<ItemOutcome<O>[]>,
  maxBatch: number,
  maxInFlight = 1,
): (item: I) => Promise<O> {
  let queue: Pending<I, O>[] = [];
  let running = 0;
  let scheduled = false;

  const flush = async (): Promise<void> => {
    scheduled = false;
    if (running >= maxInFlight || queue.length === 0) return;
    running++;
    const batch = queue.length <= maxBatch ? queue : queue.slice(0, maxBatch);
    queue = batch === queue ? [] : queue.slice(maxBatch);
    if (queue.length > 0) schedule(); // another batch may leave now, if fewer than maxInFlight are on their way
    try {
      const outcomes = await run(batch.map((p) => p.item));
      batch.forEach((p, i) => {
        const o = outcomes[i];
        if (!o) p.reject(new Error('postgresStorage: a batch answered fewer items than it was given'));
        else if (o.ok) p.resolve(o.value);
        else p.reject(o.error);
      });
    } catch (error) {
      for (const p of batch) p.reject(error);
    } finally {
      running--;
      if (queue.length > 0) schedule();
    }
  };
  const schedule = (): void => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(() => void flush());
  };

  return (item) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      schedule();
    });
}
