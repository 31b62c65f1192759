#!/usr/bin/env node
// The docs apps' `npm run build` (`tsc -p tsconfig.json`), served by one long-lived
// process for the whole test run (scripts/jest-all.mjs starts it and sets
// DOCS_BUILD_SOCKET; test/docs/support/doc-app.ts sends it the app folders to build).
//
// Why: each docs app's build is a separate tsc, and 90 % of a tsc run is parsing and
// binding the same declaration files (@types/node, @nestjs/*, rxjs, typeorm, ...) again;
// about 35 builds per run made the docs suites the largest CPU cost of `npm test`. Here
// every declaration file under node_modules is parsed and bound once, then shared by the
// programs of the apps that read it with the same compiler options (TypeScript binds a
// source file once and the checker of each program reuses it, as its language service
// does). Each app still gets its own program, from its own tsconfig.json, with the
// repository's TypeScript (the one its `tsc` would run), and its own diagnostics: an app
// that does not compile fails its suite with tsc's messages. The fresh-install leg
// (`npm run test:docs:fresh`) keeps running each app's own installed tsc.
//
// Protocol: one JSON object per line over a Unix socket; { dir, tsconfig } in,
// { ok, output } out, one build at a time in the order received.
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import ts from 'typescript';

const socket = process.argv[2];
if (!socket) {
  console.error('usage: build-server.mjs <socket path>');
  process.exit(2);
}

/** Declaration files under node_modules, by compiler options that shape a source file and by path. */
const shared = new Map();

/** What of the compiler options a parsed and bound file depends on (everything but where the app's files are). */
function optionsKey(options) {
  const shaping = { ...options };
  for (const where of ['configFilePath', 'outDir', 'rootDir', 'baseUrl', 'tsBuildInfoFile', 'rootDirs', 'paths']) delete shaping[where];
  return createHash('sha1').update(JSON.stringify(shaping)).digest('hex');
}

function host(options) {
  const base = ts.createCompilerHost(options);
  const bucket = optionsKey(options);
  return {
    ...base,
    getSourceFile(fileName, languageVersionOrOptions, onError, shouldCreateNewSourceFile) {
      if (!fileName.includes('/node_modules/') || shouldCreateNewSourceFile) {
        return base.getSourceFile(fileName, languageVersionOrOptions, onError, shouldCreateNewSourceFile);
      }
      const format = typeof languageVersionOrOptions === 'object' ? languageVersionOrOptions.impliedNodeFormat : undefined;
      const key = `${bucket}\0${format}\0${fileName}`;
      let file = shared.get(key);
      if (!file) {
        file = base.getSourceFile(fileName, languageVersionOrOptions, onError, shouldCreateNewSourceFile);
        if (file) shared.set(key, file);
      }
      return file;
    },
    writeFile(fileName, text) {
      mkdirSync(dirname(fileName), { recursive: true });
      writeFileSync(fileName, text);
    },
  };
}

const formatHost = {
  getCanonicalFileName: (fileName) => fileName,
  getCurrentDirectory: () => process.cwd(),
  getNewLine: () => '\n',
};

/** `tsc -p <tsconfig>` in `dir`: emits what tsc would, and returns its output and whether it would have exited 0. */
function build(dir, tsconfig) {
  const configPath = join(dir, tsconfig);
  const configErrors = [];
  const parsed = ts.getParsedCommandLineOfConfigFile(configPath, undefined, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => configErrors.push(diagnostic),
  });
  if (!parsed) return { ok: false, output: ts.formatDiagnostics(configErrors, formatHost) };
  if (parsed.options.incremental || parsed.options.composite) {
    // Not what this server reproduces (a .tsbuildinfo): the caller runs tsc itself.
    return { ok: false, unsupported: true, output: `${configPath}: incremental builds are left to tsc` };
  }
  const program = ts.createProgram({
    rootNames: parsed.fileNames,
    options: parsed.options,
    projectReferences: parsed.projectReferences,
    host: host(parsed.options),
    configFileParsingDiagnostics: ts.getConfigFileParsingDiagnostics(parsed),
  });
  const emitted = program.emit();
  const diagnostics = ts.sortAndDeduplicateDiagnostics([...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics]);
  const errors = diagnostics.filter((diagnostic) => diagnostic.category === ts.DiagnosticCategory.Error);
  return { ok: errors.length === 0, output: ts.formatDiagnostics(diagnostics, { ...formatHost, getCurrentDirectory: () => dir }) };
}

let queue = Promise.resolve();
rmSync(socket, { force: true });
const server = createServer((connection) => {
  let pending = '';
  connection.setEncoding('utf8');
  connection.on('data', (chunk) => {
    pending += chunk;
    for (let end = pending.indexOf('\n'); end >= 0; end = pending.indexOf('\n')) {
      const request = JSON.parse(pending.slice(0, end));
      pending = pending.slice(end + 1);
      queue = queue.then(() => {
        let answer;
        try {
          answer = build(request.dir, request.tsconfig ?? 'tsconfig.json');
        } catch (error) {
          answer = { ok: false, output: `the build server failed: ${error?.stack ?? error}` };
        }
        if (!connection.destroyed) connection.write(JSON.stringify(answer) + '\n');
      });
    }
  });
  connection.on('error', () => undefined);
});
server.listen(socket, () => process.send?.('ready'));
// Ends with its parent (the test run), whatever way that ends.
process.on('disconnect', () => process.exit(0));
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
process.on('exit', () => rmSync(socket, { force: true }));
