/** Types of what `file-helper.mjs` exports for tests; the program itself runs inside the sandbox. */
export declare function compileGlob(pattern: string): { test(path: string): boolean };
export declare function matchesGlob(path: string, pattern: string): boolean;
