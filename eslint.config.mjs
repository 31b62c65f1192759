// ESLint flat config: the recommended JavaScript and TypeScript rules, with the few
// changes this code base needs. Formatting is Prettier's job (npm run lint runs both).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** Node's globals for plain JavaScript files (TypeScript files get them from @types/node). */
const NODE_GLOBALS = Object.fromEntries(
  [
    'process',
    'console',
    'Buffer',
    'URL',
    'URLSearchParams',
    'fetch',
    'AbortController',
    'AbortSignal',
    'TextEncoder',
    'TextDecoder',
    'setTimeout',
    'clearTimeout',
    'setInterval',
    'clearInterval',
    'setImmediate',
    'clearImmediate',
    'queueMicrotask',
    'structuredClone',
    'performance',
  ].map((name) => [name, 'readonly']),
);

export default tseslint.config(
  { ignores: ['dist/**', 'coverage/**', 'node_modules/**', '.nest11/**', '.typeorm03/**', '.tmp/**', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { ecmaVersion: 2022, sourceType: 'module' },
    rules: {
      // Unused names are allowed when they say so with a leading underscore (destructured-away
      // options), and for ConfigurableModuleBuilder's OPTIONS_TYPE / ASYNC_OPTIONS_TYPE, which
      // exist only to be used as `typeof X`.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_|_TYPE$', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
      // Nest's own APIs speak `Function` (ExecutionContext.getHandler(), Type<T>, entity targets).
      '@typescript-eslint/no-unsafe-function-type': 'off',
      // `any` is sometimes the honest type at a framework boundary (request objects of two HTTP platforms).
      '@typescript-eslint/no-explicit-any': 'warn',
      // Interface + same-named Symbol injection token (IdempotencyStore) is a deliberate Nest pattern.
      '@typescript-eslint/no-redeclare': 'off',
      'no-redeclare': 'off',
      // Declaration merging of a class with an interface is used for typed mixins.
      '@typescript-eslint/no-unsafe-declaration-merging': 'off',
      // Empty functions are legitimate no-op handlers (error listeners, noop stores).
      '@typescript-eslint/no-empty-function': 'off',
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'no-console': 'off',
    },
  },
  {
    // Tests: mocks of framework objects and assertions on loose shapes.
    files: ['test/**/*.ts', 'sample-app/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-require-imports': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
      // Tests feed control characters on purpose (key validation).
      'no-control-regex': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: {
      sourceType: 'commonjs',
      globals: {
        ...NODE_GLOBALS,
        require: 'readonly',
        module: 'writable',
        exports: 'writable',
        __dirname: 'readonly',
        __filename: 'readonly',
      },
    },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    files: ['**/*.mjs'],
    languageOptions: { sourceType: 'module', globals: NODE_GLOBALS },
  },
);
