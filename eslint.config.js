import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/node_modules/**', '**/dist/**', 'coverage/**', '**/*.js', '!eslint.config.js'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
      'no-console': ['error', { allow: ['warn', 'error'] }],
    },
  },
  {
    files: ['**/cli.ts', '**/bin/**', 'bench/**', 'scripts/**', 'firmware-sim/src/cli.ts', 'test-support/**', '**/test/**'],
    rules: { 'no-console': 'off' },
  },
);
