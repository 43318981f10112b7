/**
 * @module storage/shared-reader
 * Opens, in another thread, the data that a storage's `sharedLocation()` names: read-only, with a counter that
 * changes whenever another connection commits. The HTTP server's poll thread answers polls from it, so it gets its
 * connection from the storage layer rather than choosing a backend itself.
 */
import type { SharedLocation, StorageAdapter } from './adapter.js';
import { sqliteStorage } from './sqlite/index.js';

/** A read-only storage on shared data. */
export interface SharedReader extends StorageAdapter {
  /**
   * A number that changes whenever another connection commits to the data: equal answers mean nothing this reader
   * reads has changed in between, so what it read then may still be served.
   */
  changeCounter(): number;
}

/**
 * A read-only storage on the data `location` names (call `init()` before reading, `close()` at the end).
 *
 * @example
 * const reader = openSharedReader(runtime.sharedStorageLocation()!); // in a worker thread, from workerData
 * await reader.init();
 * const row = await reader.getAgent(agentId);
 */
export function openSharedReader(location: SharedLocation): SharedReader {
  switch (location.kind) {
    case 'sqlite':
      return sqliteStorage({ path: location.path, readonly: true });
  }
}
