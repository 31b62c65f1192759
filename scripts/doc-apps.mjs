// Reads the applications a documentation page shows as files. A fenced block whose info
// string names a file belongs to an app:
//
//   ```ts file=src/main.ts                  the page's default app
//   ```ts file=src/app.module.ts app=redis  the `redis` app: the default app's files, this one replacing its namesake
//   ```ts file=vitest.config.ts nocheck      a file of the app that scripts/check-docs.mjs does not type-check
//                                           (it imports a tool the repository does not install; the docs apps build it)
//
// Used by scripts/check-docs.mjs (type-checks each app's TypeScript files together),
// test/docs/support/doc-app.ts (builds each app with the page's own tsconfig.json and runs
// it against the real services) and scripts/docs-fresh.mjs (installs each page's packages
// in a fresh folder, with installLinesOf below).

import { createHash } from 'node:crypto';

export const DEFAULT_APP = 'default';

/**
 * The apps of one markdown page: app name -> (path -> { code, lang, line }), where `line`
 * is the markdown line of the block's first code line. Every named app holds the default
 * app's files unless it shows its own version of the same path.
 */
export function docAppsOf(markdown) {
  const own = new Map();
  const lines = markdown.split('\n');
  let open;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (!open) {
      const fence = /^(`{3,})(\w+)\s+(.*)$/.exec(line);
      if (!fence) continue;
      const attributes = Object.fromEntries([...fence[3].matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1], m[2]]));
      if (!attributes.file) continue;
      const nocheck = /(^|\s)nocheck(\s|$)/.test(fence[3]);
      open = { fence: fence[1], lang: fence[2], path: attributes.file, app: attributes.app ?? DEFAULT_APP, line: i + 2, nocheck, body: [] };
    } else if (line.startsWith(open.fence) && line.trim() === open.fence) {
      if (!own.has(open.app)) own.set(open.app, new Map());
      const files = own.get(open.app);
      if (files.has(open.path)) throw new Error(`line ${open.line}: ${open.path} is shown twice for the app "${open.app}"`);
      files.set(open.path, { code: open.body.join('\n') + '\n', lang: open.lang, line: open.line, nocheck: open.nocheck });
      open = undefined;
    } else {
      open.body.push(line);
    }
  }
  if (open) throw new Error(`line ${open.line}: the block of ${open.path} is never closed`);
  const base = own.get(DEFAULT_APP) ?? new Map();
  const apps = new Map();
  for (const [name, files] of own) apps.set(name, name === DEFAULT_APP ? files : new Map([...base, ...files]));
  return apps;
}

/**
 * The install lines of a page in the order written: the lines of its ```bash (sh, shell,
 * console) blocks that run `npm install` (`npm i`, `npm add`) or `npm pkg`, comments
 * dropped. A block that shows a file (`file=`) is the app's, not an install step.
 */
export function installLinesOf(markdown) {
  const lines = [];
  let fence;
  let shell = false;
  for (const line of markdown.split('\n')) {
    const open = /^\s*(`{3,}|~{3,})\s*(\w*)(.*)$/.exec(line);
    if (!fence) {
      if (open) [fence, shell] = [open[1], ['bash', 'sh', 'shell', 'console'].includes(open[2]) && !/\bfile=/.test(open[3])];
      continue;
    }
    if (open && line.trim() === fence) {
      fence = undefined;
      continue;
    }
    const command = line.replace(/\s+#.*$/, '').trim();
    if (shell && /^npm\s+(install|i|add|pkg)\b/.test(command)) lines.push(command);
  }
  return lines;
}

/** The name of a fresh install: its package.json and its install lines (test/docs/support/doc-app.ts, scripts/docs-fresh.mjs). */
export function freshInstallKeyOf(packageJson, lines) {
  return createHash('sha256').update(packageJson).update('\0').update(lines.join('\n')).digest('hex').slice(0, 12);
}
