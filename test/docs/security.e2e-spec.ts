import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildPageApps, cleanUpDocApps, run, startHttpApp, stopApp, type RunningApp } from './support/doc-app.js';

/**
 * docs/security.md's application (two kinds of caller on one route), built by `tsc` from
 * the page's own files with getting-started's tsconfig.json, started like `npm start`, and
 * sent the page's curl commands verbatim: API client 7 and end user '7' get their own
 * answers, a retry replays its own, credentials no guard read are refused.
 */
describe('docs/security.md, built and run as a user would', () => {
  let dir: string;
  let base: string;
  let app: RunningApp;

  beforeAll(async () => {
    dir = (await buildPageApps('security', ['security'])).get('security')!;
    ({ base, app } = await startHttpApp(dir));
  }, 300_000);

  afterAll(async () => {
    if (app) await stopApp(app);
    cleanUpDocApps();
  });

  it("the page's curl commands print what the page says", async () => {
    const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
    const lines = (await run('bash', ['-c', script], dir)).split('\n').filter((line) => line.trim());
    expect(lines).toEqual([
      '{"token":"dl_1","for":{"id":7}}',
      '{"token":"dl_2","for":{"sub":"7"}}',
      '{"token":"dl_1","for":{"id":7}}',
      '500',
      '{"token":"pub_3"}',
    ]);
  });
});
