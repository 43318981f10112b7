import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const src = (p: string) => fileURLToPath(new URL(`./src/${p}`, import.meta.url));

export default defineConfig({
  resolve: {
    // Tests and examples import the package by its public name; resolve it to the sources so no build is needed.
    alias: [
      { find: /^agentry\/http$/, replacement: src('http/index.ts') },
      { find: /^agentry\/client$/, replacement: src('client/index.ts') },
      { find: /^agentry\/web$/, replacement: src('web/index.ts') },
      { find: /^agentry\/testing$/, replacement: src('testing/index.ts') },
      { find: /^agentry\/storage\/postgres$/, replacement: src('storage/postgres/index.ts') },
      { find: /^agentry$/, replacement: src('index.ts') },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
