// ESLint flat config (`npm run lint`, in CI, no warnings allowed): typescript-eslint's
// recommended rules over all of the project's TypeScript, and, where money is handled
// (src/, workers/), the type-aware rules that catch a promise nobody awaits or handles:
// an unawaited script call is a write whose failure nobody hears.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

// workers/ is built on src/, never the other way round (src/main.ts, which runs both, says why it may).
const noWorkers = { regex: '^(\\.\\./)+workers(/|$)', message: 'src/ does not import workers/: the worker process is built on src/, not the other way round.' };

// src/http/ is plumbing (authentication, errors, routing, validation, rate limits, the
// access log): it may use errors, metrics, redis, config and the like, never the domain
// nor the composition that assembles it. A type-only import is allowed (auth.ts names a
// key record, a project scope and a contract variant): it brings no domain code in.
// keys/secrets.js is allowed too: auth.ts checks a key's format before any lookup.
const noDomain = {
  regex: '^(\\.\\./)+((admin|billing|customers|dashboard|gateway|ledger|members|plans|reconcile|usage)(/|$)|keys/(?!secrets\\.js$)|(app|bootstrap|main|runtime|server|web)\\.js$)',
  allowTypeImports: true,
  message: 'src/http/ is plumbing: it does not import the domain (ledger, gateway, customers, admin, ...) nor the app that assembles it; pass what it needs in as a parameter.',
};

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'stubs/', '.tmp/', 'docs/', 'assets/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: 'module', globals: { ...globals.node } },
    rules: {
      // `_`-prefixed names are unused on purpose (a parameter a signature needs).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    files: ['src/**/*.ts', 'workers/**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false, attributes: false } }],
    },
  },
  { files: ['src/**/*.ts'], rules: { 'no-restricted-imports': ['error', { patterns: [noWorkers] }] } },
  // A later block's options replace the earlier ones for its files: both lists here.
  { files: ['src/http/**/*.ts'], rules: { 'no-restricted-imports': ['error', { patterns: [noWorkers, noDomain] }] } },
);
