// The public API, recorded: one API Extractor report per entry point of package.json's
// `exports`, committed under api/. Every export is a semver promise, so a change to it
// must be seen in review:
//
//   npm run api          builds, then fails when a report differs from the committed one
//   npm run api:update   builds, then rewrites the reports (commit them with the change)
//
// It also prints how many names each entry point exports.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const { Extractor, ExtractorConfig } = require('@microsoft/api-extractor');

const update = process.argv.includes('--update');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

if (!process.argv.includes('--no-build')) execFileSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { stdio: 'inherit' });

const reportFolder = join(root, 'api');
const tempFolder = join(root, '.api-temp');
mkdirSync(reportFolder, { recursive: true });
rmSync(tempFolder, { recursive: true, force: true });
mkdirSync(tempFolder, { recursive: true });

let failed = false;
const counts = [];
for (const [subpath, target] of Object.entries(pkg.exports)) {
  if (typeof target !== 'object' || !target.require?.types) continue;
  const entry = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
  const reportName = subpath === '.' ? pkg.name : `${pkg.name}.${subpath.slice(2)}`;
  const configObject = {
    projectFolder: root,
    mainEntryPointFilePath: join(root, target.require.types),
    bundledPackages: [],
    compiler: {
      overrideTsconfig: { compilerOptions: { skipLibCheck: true, strict: true, types: ['node'] }, include: [join(root, 'dist', 'cjs')] },
    },
    apiReport: {
      enabled: true,
      reportFileName: `${reportName}.api.md`,
      reportFolder,
      reportTempFolder: tempFolder,
      includeForgottenExports: false,
    },
    docModel: { enabled: false },
    dtsRollup: { enabled: false },
    tsdocMetadata: { enabled: false },
    messages: {
      compilerMessageReporting: { default: { logLevel: 'warning' } },
      extractorMessageReporting: {
        default: { logLevel: 'warning' },
        // Release tags are not used: what an entry point exports is public, `@internal` is not.
        'ae-missing-release-tag': { logLevel: 'none', addToApiReportFile: false },
        // A type reachable from an export but not exported itself is listed in the report.
        'ae-forgotten-export': { logLevel: 'none', addToApiReportFile: true },
        'ae-internal-missing-underscore': { logLevel: 'none', addToApiReportFile: false },
        // Every public declaration has JSDoc where it helps; the report is about shape, not prose.
        'ae-undocumented': { logLevel: 'none', addToApiReportFile: false },
      },
      tsdocMessageReporting: { default: { logLevel: 'none' } },
    },
  };
  const config = ExtractorConfig.prepare({
    configObject,
    configObjectFullPath: join(root, 'api', 'api-extractor.json'),
    packageJsonFullPath: join(root, 'package.json'),
  });
  const result = Extractor.invoke(config, { localBuild: update, showVerboseMessages: false, messageCallback: quiet });
  const names = countExports(join(root, target.require.types));
  counts.push([entry, names]);
  if (!result.succeeded) {
    failed = true;
    console.error(`api: ${entry}: the report differs from api/${reportName}.api.md (run npm run api:update and commit it) or has errors`);
  } else if (result.apiReportChanged && update) {
    console.log(`api: ${entry}: api/${reportName}.api.md updated`);
  }
}
rmSync(tempFolder, { recursive: true, force: true });

// docs/api.md: every public name per entry point, one line each, made from the same
// declarations, so it cannot drift from what is exported.
const apiDoc = apiMarkdown();
const apiDocPath = join(root, 'docs', 'api.md');
if (update) writeFileSync(apiDocPath, apiDoc);
else if (!existsSync(apiDocPath) || readFileSync(apiDocPath, 'utf8') !== apiDoc) {
  failed = true;
  console.error('api: docs/api.md does not list the exports as they are (run npm run api:update and commit it)');
}

console.log('\nexported names per entry point:');
for (const [entry, names] of counts) console.log(`  ${String(names).padStart(4)}  ${entry}`);
if (failed) process.exit(1);

/** API Extractor's own console noise, minus the lines a reader needs. */
function quiet(message) {
  if (message.logLevel === 'warning' || message.logLevel === 'error') {
    console.error(`api: ${message.text}${message.sourceFilePath ? ` (${message.sourceFilePath}:${message.sourceFileLine})` : ''}`);
  }
  message.handled = true;
}

/** How many names an entry point exports (values and types), as the compiler sees its declarations. */
function countExports(dtsPath) {
  const ts = require('typescript');
  const program = ts.createProgram([dtsPath], { skipLibCheck: true, noEmit: true });
  const checker = program.getTypeChecker();
  const moduleSymbol = checker.getSymbolAtLocation(program.getSourceFile(dtsPath));
  return moduleSymbol ? checker.getExportsOfModule(moduleSymbol).length : 0;
}

/** The first sentence of each export's JSDoc, per entry point, as markdown. */
function apiMarkdown() {
  const ts = require('typescript');
  const lines = [
    '# API',
    '',
    'Every public name, per entry point, with the first sentence of its documentation.',
    'Generated by `npm run api:update` from the published declarations (`npm run api` fails',
    'when this page or the reports under `api/` differ from the code). Anything not listed',
    'here is internal and may change in any release.',
    '',
  ];
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (typeof target !== 'object' || !target.require?.types) continue;
    const entry = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
    const file = join(root, target.require.types);
    const program = ts.createProgram([file], { skipLibCheck: true, noEmit: true });
    const checker = program.getTypeChecker();
    const moduleSymbol = checker.getSymbolAtLocation(program.getSourceFile(file));
    const exports = moduleSymbol ? checker.getExportsOfModule(moduleSymbol) : [];
    lines.push(`## \`${entry}\``, '', '| name | kind | what it is |', '|---|---|---|');
    for (const symbol of [...exports].sort((a, b) => a.name.localeCompare(b.name))) {
      const resolved = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
      const summary = ts.displayPartsToString(resolved.getDocumentationComment(checker)).replace(/\s+/g, ' ').trim();
      // The first sentence: abbreviations (e.g., i.e.) do not end one.
      const guarded = summary.replace(/\b(e\.g|i\.e|etc)\./g, '$1\u2063');
      const first = (guarded.match(/^.*?[.!?:](?=\s|$)/) ?? [guarded])[0].replace(/\u2063/g, '.').replace(/:$/, '.').replace(/\|/g, '\\|');
      lines.push(`| \`${symbol.name}\` | ${kindOf(ts, resolved)} | ${first || '—'} |`);
    }
    lines.push('');
  }
  return lines.join('\n');
}

function kindOf(ts, symbol) {
  const f = symbol.flags;
  if (f & ts.SymbolFlags.Class) return 'class';
  if (f & ts.SymbolFlags.Function) return 'function';
  if (f & ts.SymbolFlags.Interface && f & ts.SymbolFlags.Variable) return 'interface + token';
  if (f & ts.SymbolFlags.Variable && f & ts.SymbolFlags.TypeAlias) return 'const + type';
  if (f & ts.SymbolFlags.Interface) return 'interface';
  if (f & ts.SymbolFlags.TypeAlias) return 'type';
  if (f & ts.SymbolFlags.Variable) return 'const';
  if (f & ts.SymbolFlags.Enum) return 'enum';
  return 'value';
}
