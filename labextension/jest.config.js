/**
 * Jest configuration: unit tests of the TypeScript sources, compiled by
 * ts-jest to CommonJS. JupyterLab packages ship ES modules, so tests mock
 * them instead of loading them.
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src'],
  testRegex: '/__tests__/.*\\.spec\\.ts$',
  moduleFileExtensions: ['ts', 'js', 'json'],
  transform: {
    '^.+\\.ts$': [
      'ts-jest',
      {
        tsconfig: {
          module: 'commonjs',
          types: ['jest']
        }
      }
    ]
  }
};
