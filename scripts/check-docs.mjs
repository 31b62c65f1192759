#!/usr/bin/env node
// Type-checks every ```ts block of the docs, so a snippet cannot drift from the API.
//
//   node scripts/check-docs.mjs                    README.md, CHANGELOG.md and docs/*.md
//   node scripts/check-docs.mjs docs/http.md dir/  only these files (directories: their *.md)
//
// Each block becomes its own module under .tmp/docs-snippets/ (gitignored): CommonJS
// like a default Nest application, or an ES module (.mts) when it uses top-level
// `await` (an unindented line containing `await`), with
// `nestjs-idempotency[/subpath]` imports pointed at the lib/ sources, and one tsc run
// checks them all with the compiler options of docs/getting-started.md's tsconfig.json. A block opened with ```ts nocheck is
// skipped (use it for fragments that cannot compile alone). Blocks opened with
// ```ts file=src/x.ts [app=name] are the files of an application (scripts/doc-apps.mjs):
// each app's files are written under their paths and checked together. Errors are
// reported at their markdown file and line.
//
// It also checks every relative link of these pages: the target must be a file the npm
// package ships (package.json "files"), and a #fragment must name a heading there.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { docAppsOf } from './doc-apps.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

/**
 * Package entry points and the source each one maps to, read from package.json
 * "exports" (`./dist/esm/x/index.d.ts` is built from `lib/x/index.ts`), so a snippet can
 * import exactly what users can, and nothing else.
 */
const ENTRY_POINTS = entryPointsOf(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')));

function entryPointsOf(pkg) {
  const map = {};
  for (const [subpath, target] of Object.entries(pkg.exports ?? {})) {
    const types = typeof target === 'object' ? (target.import?.types ?? target.types) : undefined;
    const match = typeof types === 'string' ? /^\.\/dist\/esm\/(.+)\.d\.ts$/.exec(types) : null;
    if (!match) continue;
    map[pkg.name + subpath.slice(1)] = `lib/${match[1]}.js`;
  }
  return map;
}

function markdownFiles(args) {
  const targets = args.length ? args.map((a) => resolve(a)) : [join(root, 'README.md'), join(root, 'CHANGELOG.md'), join(root, 'docs')];
  const files = [];
  for (const target of targets) {
    if (!existsSync(target)) {
      console.error(`check-docs: ${target} does not exist`);
      process.exit(2);
    }
    if (statSync(target).isDirectory()) {
      for (const name of readdirSync(target).sort()) if (name.endsWith('.md')) files.push(join(target, name));
    } else {
      files.push(target);
    }
  }
  return files;
}

/** Every ```ts / ```typescript block: its code, the line of its first code line, and its flags. */
function snippetsOf(markdown) {
  const lines = markdown.split('\n');
  const snippets = [];
  let open;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (!open) {
      const fence = /^(\s*)(`{3,}|~{3,})\s*(ts|typescript)\b(?!.*\bfile=)(.*)$/.exec(line);
      if (fence) open = { indent: fence[1].length, fence: fence[2], flags: fence[4].trim().split(/\s+/), firstLine: i + 2, body: [] };
    } else if (line.trim().startsWith(open.fence) && line.trim().replace(/[`~]/g, '') === '') {
      snippets.push({ code: open.body.join('\n'), firstLine: open.firstLine, skip: open.flags.includes('nocheck') });
      open = undefined;
    } else {
      open.body.push(line.slice(Math.min(open.indent, line.length - line.trimStart().length)));
    }
  }
  return snippets;
}

/** Rewrites package imports to the sources, keeping every line where it was. */
function rewriteImports(code, snippetDir) {
  return code.replace(/(from\s+|import\s*\(\s*|import\s+)(['"])(nestjs-idempotency(?:\/[a-z0-9-]+)?)\2/g, (match, lead, quote, specifier) => {
    const target = ENTRY_POINTS[specifier];
    if (!target) return match;
    let path = relative(snippetDir, join(root, target)).split('\\').join('/');
    if (!path.startsWith('.')) path = './' + path;
    return `${lead}${quote}${path}${quote}`;
  });
}

const files = markdownFiles(process.argv.slice(2));
const workDir = join(root, '.tmp', 'docs-snippets', `run-${process.pid}-${Date.now()}`);
mkdirSync(workDir, { recursive: true });

const origins = new Map(); // absolute path of a snippet file -> { md, firstLine }
let checked = 0;
let skipped = 0;
for (const file of files) {
  const stem = relative(root, file).replace(/[^A-Za-z0-9]+/g, '_');
  snippetsOf(readFileSync(file, 'utf8')).forEach((snippet, index) => {
    if (snippet.skip) {
      skipped++;
      return;
    }
    const extension = /^(?!\s)[^\n]*\bawait\b/m.test(snippet.code) ? '.mts' : '.ts';
    const name = `${stem}_${String(index + 1).padStart(2, '0')}${extension}`;
    // `export {}` on the last line makes every snippet a module of its own, so names never clash across snippets.
    writeFileSync(join(workDir, name), rewriteImports(snippet.code, workDir) + '\nexport {};\n');
    origins.set(join(workDir, name), { md: relative(root, file), firstLine: snippet.firstLine });
    checked++;
  });
  for (const [app, appFiles] of docAppsOf(readFileSync(file, 'utf8'))) {
    const appDir = join(workDir, 'apps', stem, app);
    if (appFiles.has('prisma/schema.prisma')) generatePrismaClient(appDir, appFiles.get('prisma/schema.prisma').code);
    // The app's package.json, or getting-started's as the pages say (test/docs/support/doc-app.ts
    // does the same): its "type" decides whether tsc reads the files as ES modules or CommonJS.
    mkdirSync(appDir, { recursive: true });
    writeFileSync(join(appDir, 'package.json'), (appFiles.get('package.json') ?? gettingStartedPackageJson()).code);
    for (const [path, { code, lang, line, nocheck }] of appFiles) {
      if ((lang !== 'ts' && lang !== 'typescript') || nocheck) continue;
      const target = join(appDir, path);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, rewriteImports(code, dirname(target)));
      origins.set(target, { md: relative(root, file), firstLine: line });
      checked++;
    }
  }
}

function gettingStartedPackageJson() {
  const files = docAppsOf(readFileSync(join(root, 'docs', 'getting-started.md'), 'utf8')).get('default');
  return files?.get('package.json') ?? { code: '{}\n' };
}

/**
 * An app whose page shows a `prisma/schema.prisma` imports the client `prisma generate`
 * writes from it, as the page's `npx prisma generate` does (offline: generate needs no
 * schema engine, only a path to one).
 */
function generatePrismaClient(appDir, schema) {
  mkdirSync(join(appDir, 'prisma'), { recursive: true });
  writeFileSync(join(appDir, 'prisma', 'schema.prisma'), schema);
  const generate = spawnSync(process.execPath, [require.resolve('prisma/build/index.js'), 'generate'], {
    cwd: appDir,
    encoding: 'utf8',
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? '/bin/true', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
  });
  if (generate.status !== 0) {
    console.error(`check-docs: prisma generate failed in ${relative(root, appDir)}:\n${generate.stdout}${generate.stderr}`);
    finish(1);
  }
}

const brokenLinks = files.flatMap((file) => brokenLinksOf(file));
if (brokenLinks.length > 0) {
  console.error(brokenLinks.join('\n'));
  console.error(`\ncheck-docs: FAILED: ${brokenLinks.length} link(s) point outside the npm package or to no heading.`);
  process.exit(1);
}

/** Relative links whose target the package does not ship, or whose #fragment names no heading. */
function brokenLinksOf(file) {
  const shipped = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).files ?? [];
  const isShipped = (path) => path === 'package.json' || shipped.some((entry) => path === entry || path.startsWith(entry + '/'));
  const broken = [];
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((line, index) => {
      for (const match of line.matchAll(/\]\(([^)\s]+)\)/g)) {
        const href = match[1];
        if (/^[a-z]+:/i.test(href)) continue;
        const [path, fragment] = href.split('#');
        const target = path ? resolve(dirname(file), path) : file;
        const where = `${relative(root, file)}:${index + 1}: ${href}`;
        if (!existsSync(target)) broken.push(`${where}: no such file`);
        else if (!isShipped(relative(root, target).split('\\').join('/'))) broken.push(`${where}: not in the npm package (package.json "files")`);
        else if (fragment && target.endsWith('.md') && !headingSlugsOf(readFileSync(target, 'utf8')).has(fragment)) broken.push(`${where}: no heading #${fragment}`);
      }
    });
  return broken;
}

/** The anchors a markdown renderer (GitHub's, npm's) gives the headings of a page. */
function headingSlugsOf(markdown) {
  const slugs = new Set();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*(`{3,}|~{3,})/.test(line)) fenced = !fenced;
    const heading = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const base = heading[1]
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    let slug = base;
    for (let n = 1; slugs.has(slug); n++) slug = `${base}-${n}`;
    slugs.add(slug);
  }
  return slugs;
}

function finish(code) {
  if (!process.env.KEEP_DOCS_SNIPPETS) rmSync(workDir, { recursive: true, force: true });
  process.exit(code);
}

if (checked === 0) {
  console.log(`check-docs: no TypeScript snippets to check in ${files.length} file(s) (${skipped} marked nocheck).`);
  finish(0);
}

// The compiler options users have: the tsconfig.json that docs/getting-started.md shows
// (`strict: true`, so `strictPropertyInitialization` too), not this repository's, whose
// looser settings once hid errors that a user's project hits. Free snippets may be test
// files, so Jest's globals are visible beside Node's; the apps' own tsconfig files are
// exercised by test/docs/, which builds each app with the page's tsconfig.
const userOptions = usersCompilerOptions();
writeFileSync(
  join(workDir, 'tsconfig.json'),
  JSON.stringify(
    {
      compilerOptions: {
        ...userOptions,
        types: [...new Set([...(userOptions.types ?? []), 'node', 'jest'])],
        typeRoots: [join(root, 'node_modules', '@types')],
        outDir: undefined,
        rootDir: undefined,
        noEmit: true,
        declaration: false,
        noUnusedLocals: false,
        noUnusedParameters: false,
      },
      include: ['./*.ts', './*.mts', './apps/**/*.ts'],
    },
    null,
    2,
  ),
);

function usersCompilerOptions() {
  const page = join(root, 'docs', 'getting-started.md');
  const tsconfig = docAppsOf(readFileSync(page, 'utf8')).get('default')?.get('tsconfig.json');
  if (!tsconfig) {
    console.error('check-docs: docs/getting-started.md shows no ```json file=tsconfig.json block: the users\' compiler options come from it.');
    process.exit(2);
  }
  return JSON.parse(tsconfig.code).compilerOptions;
}

const tsc = require.resolve('typescript/bin/tsc');
const run = spawnSync(process.execPath, [tsc, '-p', join(workDir, 'tsconfig.json'), '--pretty', 'false'], { cwd: root, encoding: 'utf8' });
const output = (run.stdout ?? '') + (run.stderr ?? '');

// Errors inside snippets are shown at their markdown line; errors elsewhere (lib/) as they are.
const mapped = output
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => {
    const match = /^(.*?)\((\d+),(\d+)\): (.*)$/.exec(line);
    if (!match) return line;
    const origin = origins.get(resolve(root, match[1]));
    if (!origin) return line;
    return `${origin.md}:${origin.firstLine + Number(match[2]) - 1}:${match[3]} ${match[4]}`;
  });

if (run.status !== 0) {
  console.error(mapped.join('\n'));
  console.error(`\ncheck-docs: FAILED: type errors in the ${checked} snippet(s) checked from ${files.length} file(s) (set KEEP_DOCS_SNIPPETS=1 to keep ${relative(root, workDir)}).`);
  finish(1);
}
console.log(`check-docs: ${checked} snippet(s) from ${files.length} file(s) type-check (${skipped} marked nocheck).`);
finish(0);
