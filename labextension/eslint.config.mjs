import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';
import prettierRecommended from 'eslint-plugin-prettier/recommended';
import globals from 'globals';
import jupyterPlugin from '@jupyter/eslint-plugin';
import { importX } from 'eslint-plugin-import-x';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';

export default defineConfig([
  {
    ignores: [
      'node_modules',
      'lib',
      'coverage',
      '**/*.js',
      '**/*.d.ts',
      'src/**/__tests__',
      // Written by `jlpm gen:api` from the OpenAPI document.
      'src/generated',
      'ui-tests/test-results',
      'ui-tests/playwright-report',
      'ui-tests/artifacts',
      'ui-tests/.state'
    ]
  },
  js.configs.recommended,
  tseslint.configs.recommended,
  jupyterPlugin.configs.recommended,
  {
    files: ['**/*.ts', '**/*.tsx'],
    plugins: {
      jupyter: jupyterPlugin,
      'import-x': importX
    },
    settings: {
      // import-x reads only .js modules unless told to parse TypeScript.
      'import-x/extensions': ['.ts', '.tsx'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts', '.tsx'] },
      // Resolve imports as tsc does, so a cycle through `./x` is seen.
      'import-x/resolver-next': [
        createTypeScriptImportResolver({
          project: ['tsconfig.json', 'ui-tests/tsconfig.json'],
          noWarnOnMultipleProjects: true
        })
      ]
    },
    languageOptions: {
      globals: {
        ...globals.browser,
        ...globals.es2015
      },
      parserOptions: {
        project: 'tsconfig.json',
        sourceType: 'module'
      }
    },
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: {
            regex: '^I[A-Z]',
            match: true
          }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['warn', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-use-before-define': 'off',
      // The plugin's modules are small and all needed at activation (the
      // server probe, the commands, the status item): no lazy loading.
      'jupyter/prefer-lazy-imports': 'off',
      // No module imports one that imports it back, however far round.
      // (The rule skips `import type`; `jlpm check:cycles` counts those.)
      'import-x/no-cycle': 'error',
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error'
    }
  },
  {
    // Build scripts run by Node.
    files: ['scripts/**/*.mjs'],
    languageOptions: {
      globals: {
        ...globals.node
      }
    }
  },
  {
    // The Galata UI tests: their own tsconfig, run by Playwright in Node.
    files: ['ui-tests/**/*.ts'],
    languageOptions: {
      globals: {
        ...globals.node
      },
      parserOptions: {
        project: 'ui-tests/tsconfig.json'
      }
    }
  },
  prettierRecommended
]);
