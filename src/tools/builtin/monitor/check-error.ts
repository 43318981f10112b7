/**
 * @module tools/builtin/monitor/check-error
 * Why a check failed. Apart from check.ts, which loads a DOM and a diff library on first use, so that the service can
 * tell a site's failure from a bug without loading them.
 */

/** Why a check failed; `selector` is the monitor's own mistake, the rest are the site's (or the network's). */
export class MonitorCheckError extends Error {
  constructor(
    message: string,
    readonly reason: 'selector' | 'http' | 'network' | 'content',
  ) {
    super(message);
    this.name = 'MonitorCheckError';
  }
}
