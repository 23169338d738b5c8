// ESLint for the TypeScript sources (flat config). `npm run lint` runs it, and scripts/test.sh runs that before vitest.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';

export default tseslint.config(
  { ignores: ['node_modules/', '.cronledger/', '.cache/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      // `_name` marks a value left out on purpose (a destructured field dropped, an unused callback argument).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      // Types that are only types stay visibly so: `import type` is erased, so it never drags code into a bundle.
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      eqeqeq: ['error', 'always'],
      'no-console': 'off',
    },
  },
  {
    // No import cycles: a module's dependencies load before it, and the layers (test/unit/layers.test.ts) read top to
    // bottom. Type-only imports count too: a cycle of types is still two files that can't be read apart.
    files: ['**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      'import-x/extensions': ['.ts', '.js'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js', '.json'] })],
    },
    rules: { 'import-x/no-cycle': 'error' },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: no Node modules, no I/O. It may import only the workflow
    // SDK, other workflow files, the shared constants, and types (erased at build time) from anywhere.
    files: ['src/workflows/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(?!@temporalio/workflow$|\\./[^/]+$|\\.\\./constants$).*',
              allowTypeImports: true,
              message:
                'workflow code may import only @temporalio/workflow, other workflow files and ../constants; import anything else as a type',
            },
          ],
        },
      ],
    },
  },
  {
    // The report page's script (inlined into usage.html) and the admin pages' script run in the browser; Chart.js is a global there.
    files: ['src/reports/assets/**/*.js', 'src/admin/assets/**/*.js'],
    languageOptions: { sourceType: 'script', globals: { ...globals.browser, Chart: 'readonly' } },
  },
);
