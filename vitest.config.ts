import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const src = (p: string) => fileURLToPath(new URL(`./src/${p}`, import.meta.url));

export default defineConfig({
  resolve: {
    // Tests and examples import the package by its public name; resolve it to the sources so no build is needed.
    alias: [
      { find: /^agentry-runtime\/http$/, replacement: src('http/index.ts') },
      { find: /^agentry-runtime\/client$/, replacement: src('client/index.ts') },
      { find: /^agentry-runtime\/web$/, replacement: src('web/index.ts') },
      { find: /^agentry-runtime\/testing$/, replacement: src('testing/index.ts') },
      { find: /^agentry-runtime\/storage\/postgres$/, replacement: src('storage/postgres/index.ts') },
      { find: /^agentry-runtime$/, replacement: src('index.ts') },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
