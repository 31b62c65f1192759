// The same suites against NestJS 11 (CommonJS), installed apart in .nest11/ by
// scripts/test-nest11.sh: every @nestjs/* import, ours and Nest's own, is mapped there.
const base = require('./jest.config.js');

/** @type {import('jest').Config} */
module.exports = {
  ...base,
  moduleNameMapper: {
    '^@nestjs/(common|core|platform-express|platform-fastify|microservices|testing|terminus|bullmq|bull-shared|event-emitter|schedule|graphql|apollo|mapped-types|swagger|websockets|platform-socket\\.io|platform-ws)(/.*)?$':
      '<rootDir>/.nest11/node_modules/@nestjs/$1$2',
    ...base.moduleNameMapper,
  },
};
