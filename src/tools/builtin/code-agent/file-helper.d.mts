/** Types of what `file-helper.mjs` exports for tests; the program itself runs inside the sandbox. */
export declare function globToRegExp(pattern: string): RegExp;
export declare function matchesGlob(path: string, pattern: string): boolean;
