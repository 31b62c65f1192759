/**
 * Self time of a V8 CPU profile of the bench's app process (`npm run bench -- --cpu-prof`),
 * by group (this library's `lib/`, the floors, pg, Express, Nest, GC, ...) and, for the
 * library and the floors, by function, per request of the case you name:
 *
 *   npm run bench -- --platform express --stores typeorm --cases replay --rounds 2 --no-docs --cpu-prof=/tmp/prof
 *   node -r ./test/support/ts-require.js bench/profile-summary.ts /tmp/prof/<file>.cpuprofile <requests>
 *
 * One app process serves the bare route, the library's and the floor's, so shared code
 * (pg, Express) cannot be split between them here: only `lib/` and `bench/floors.ts` can.
 */
import { readFileSync } from 'node:fs';

export interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}
export interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  startTime: number;
  endTime: number;
}

const GROUPS: Array<[string, (url: string) => boolean]> = [
  ['lib', (url) => url.includes('/lib/') && !url.includes('node_modules')],
  ['floor', (url) => url.includes('/bench/floors')],
  ['pg', (url) => url.includes('node_modules/pg')],
  ['mysql', (url) => url.includes('node_modules/mysql2') || url.includes('node_modules/mariadb')],
  ['ioredis', (url) => url.includes('node_modules/ioredis')],
  ['typeorm', (url) => url.includes('node_modules/typeorm')],
  ['express', (url) => /node_modules\/(express|router|body-parser|finalhandler|send)\//.test(url)],
  ['fastify', (url) => url.includes('node_modules/fastify') || url.includes('node_modules/@fastify')],
  ['nest', (url) => url.includes('node_modules/@nestjs')],
  ['rxjs', (url) => url.includes('node_modules/rxjs')],
  ['node', (url) => url.startsWith('node:')],
];

export function groupOf(node: ProfileNode): string {
  const { url, functionName } = node.callFrame;
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  return GROUPS.find(([, test]) => test(url))?.[0] ?? 'other';
}

function main() {
  const [file, requestsArg] = process.argv.slice(2);
  if (!file) throw new Error('usage: bench/profile-summary.ts <file.cpuprofile> [requests of the case]');
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const requests = Number(requestsArg ?? 1);
  const microsPerSample = (profile.endTime - profile.startTime) / profile.samples.length;
  const byGroup = new Map<string, number>();
  const byFunction = new Map<string, number>();
  for (const node of profile.nodes) {
    const self = (node.hitCount ?? 0) * microsPerSample;
    const group = groupOf(node);
    byGroup.set(group, (byGroup.get(group) ?? 0) + self);
    if (group === 'lib' || group === 'floor') {
      const where = `${node.callFrame.url.split('/').slice(-2).join('/')}:${node.callFrame.lineNumber + 1}`;
      const name = `${group} ${node.callFrame.functionName || '(anonymous)'} ${where}`;
      byFunction.set(name, (byFunction.get(name) ?? 0) + self);
    }
  }
  console.log(`profile ${Math.round((profile.endTime - profile.startTime) / 1000)} ms; per request: ${requests} requests`);
  for (const [group, micros] of [...byGroup].sort((a, b) => b[1] - a[1])) {
    console.log(
      `${group.padEnd(20)} ${(micros / 1000).toFixed(0).padStart(7)} ms  ${(micros / requests).toFixed(2).padStart(8)} µs/request`,
    );
  }
  console.log('\nlib/ and bench/floors.ts functions, self µs per request:');
  for (const [name, micros] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, 30)) {
    console.log(`${(micros / requests).toFixed(2).padStart(8)}  ${name}`);
  }
}

if (require.main === module) main();
