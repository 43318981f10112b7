/**
 * @module web/search/from-env
 * Chooses the web_search provider from the environment (README.md#tools): the first of `BRAVE_API_KEY`,
 * `TAVILY_API_KEY`, `EXA_API_KEY` and `SEARXNG_URL` that is set wins, in that order, with the base URLs
 * `AGENTRY_BRAVE_BASE_URL`, `AGENTRY_TAVILY_BASE_URL` and `AGENTRY_EXA_BASE_URL` (tests, proxies). An empty or
 * blank variable counts as unset. With none set there is no provider: web_search is still offered and fails its
 * calls with {@link searchProviderSetupHint}.
 *
 * @example
 * import { searchProviderFromEnv, searchProviderSetupHint } from './web/search/from-env.js';
 * const provider = searchProviderFromEnv(process.env, guardedFetch);
 * if (provider === null) console.warn(searchProviderSetupHint());
 */
import { AgentryError } from '../../errors.js';
import type { FetchLike, SearchClientOptions, SearchProvider } from '../search-provider.js';
import { braveSearch } from './brave.js';
import { exaSearch } from './exa.js';
import { searxngSearch } from './searxng.js';
import { tavilySearch } from './tavily.js';

type Env = Readonly<Record<string, string | undefined>>;

/** The variables that configure a provider, in the order they are tried. */
export const SEARCH_PROVIDER_ENV = ['BRAVE_API_KEY', 'TAVILY_API_KEY', 'EXA_API_KEY', 'SEARXNG_URL'] as const;

/** What to set for web_search to work, in words. */
export function searchProviderSetupHint(): string {
  return 'web_search needs one of BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY or SEARXNG_URL';
}

function readVar(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === '' ? undefined : value;
}

/** Builds a client, re-wording an invalid option as the variable that carried it. */
function build(variables: string, create: () => SearchProvider): SearchProvider {
  try {
    return create();
  } catch (err) {
    if (AgentryError.isInstance(err) && err.code === 'invalid_request') {
      throw new AgentryError('invalid_request', `${variables} is not usable: ${err.message}`, {
        details: err.details,
        cause: err,
      });
    }
    throw err;
  }
}

/**
 * The search provider the environment configures, or `null` when none is. Throws `invalid_request` when the chosen
 * provider's variables are malformed (e.g. `SEARXNG_URL` is not an http(s) URL), naming the variables.
 *
 * @param env where to read the variables. @default process.env
 * @param fetch the `fetch` the client sends through; the runtime passes its guarded fetch. @default globalThis.fetch
 * @param options retry policy, time limit and clock for the client.
 * @example
 * searchProviderFromEnv({ TAVILY_API_KEY: 'tvly-…', AGENTRY_TAVILY_BASE_URL: 'http://127.0.0.1:9000' })?.name; // 'tavily'
 */
export function searchProviderFromEnv(
  env: Env = process.env,
  fetch?: FetchLike,
  options: Omit<SearchClientOptions, 'fetch'> = {},
): SearchProvider | null {
  const common: SearchClientOptions = { ...options, ...(fetch === undefined ? {} : { fetch }) };
  const baseUrlOf = (name: string): { baseUrl?: string } => {
    const baseUrl = readVar(env, name);
    return baseUrl === undefined ? {} : { baseUrl };
  };

  const brave = readVar(env, 'BRAVE_API_KEY');
  if (brave !== undefined) {
    return build('BRAVE_API_KEY / AGENTRY_BRAVE_BASE_URL', () =>
      braveSearch({ ...common, apiKey: brave, ...baseUrlOf('AGENTRY_BRAVE_BASE_URL') }),
    );
  }
  const tavily = readVar(env, 'TAVILY_API_KEY');
  if (tavily !== undefined) {
    return build('TAVILY_API_KEY / AGENTRY_TAVILY_BASE_URL', () =>
      tavilySearch({ ...common, apiKey: tavily, ...baseUrlOf('AGENTRY_TAVILY_BASE_URL') }),
    );
  }
  const exa = readVar(env, 'EXA_API_KEY');
  if (exa !== undefined) {
    return build('EXA_API_KEY / AGENTRY_EXA_BASE_URL', () =>
      exaSearch({ ...common, apiKey: exa, ...baseUrlOf('AGENTRY_EXA_BASE_URL') }),
    );
  }
  const searxng = readVar(env, 'SEARXNG_URL');
  if (searxng !== undefined) {
    return build('SEARXNG_URL', () => searxngSearch({ ...common, baseUrl: searxng }));
  }
  return null;
}
