// The TypeORM suites against TypeORM 0.3, installed apart in .typeorm03/ by
// scripts/test-typeorm03.sh: every `typeorm` import, ours and the tests', is mapped there.
const base = require('./jest.config.js');

/** @type {import('jest').Config} */
module.exports = {
  ...base,
  roots: ['<rootDir>/test/typeorm'],
  moduleNameMapper: {
    '^typeorm(/.*)?$': '<rootDir>/.typeorm03/node_modules/typeorm$1',
    ...base.moduleNameMapper,
  },
};
