/** How the bench scripts read their flags (`--flag value` or `--flag=value`; an unknown flag is an error, never ignored), and the servers they default to. */
import { resolve } from 'node:path';

/** What a flag does to the options: `value()` reads its value (`--flag=v`, or the next argument); `inline` is the `=v` part alone. */
export type FlagHandlers = Record<string, (value: () => string, inline: string | undefined) => unknown>;

/** Applies each `--flag [value]` of `argv` through its handler; a flag without one throws. */
export function parseFlags(argv: string[], handlers: FlagHandlers): void {
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const handler = handlers[flag];
    if (!handler) throw new Error(`Unknown option ${flag}; bench/README.md lists each script's.`);
    handler(() => inline ?? argv[++i], inline);
  }
}

/** The flag of an option: `bigBodyRecords` is `--big-body-records`. */
const flagOf = (name: string) => `--${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

/** A `--kebab-case <number>` flag for each of `names`, setting `options[name]`. */
export function numberFlags<T extends object>(options: T, names: ReadonlyArray<keyof T & string>): FlagHandlers {
  return Object.fromEntries(
    names.map((name) => [flagOf(name), (value: () => string) => ((options as Record<string, unknown>)[name] = Number(value()))]),
  );
}

/** A comma-separated list of `allowed` values (`both`: both platforms); another value throws, named as a `what`. */
export function listOf<T extends string>(flag: string, raw: string, allowed: readonly T[], what = 'value'): T[] {
  const items = raw
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean)
    .flatMap((item) => (item === 'both' ? ['express', 'fastify'] : [item]));
  for (const item of items) if (!allowed.includes(item as T)) throw new Error(`${flag}: unknown ${what} ${item}`);
  return items as T[];
}

/** Throws unless each of `names` is above 0, and each count (all but `duration`) at least 1; a flag given no number reads as NaN. */
export function requirePositive<T extends object>(options: T, names: ReadonlyArray<keyof T & string>): void {
  const bad = names.filter((name) => !((options[name] as number) >= (name === 'duration' ? Number.MIN_VALUE : 1)));
  if (bad.length) throw new Error(`${bad.map(flagOf).join(', ')}: must be a positive number.`);
}

/** The options `npm run bench` and `npm run bench:peers` both take. */
export interface SharedOptions {
  duration: number;
  rounds: number;
  connections: number;
  redisUrl: string;
  autoPipelining: boolean;
  out: string;
  updateDocs: boolean;
}

/** The flags of the options both harnesses take, with the same meaning, and `--help`. */
export function sharedFlags(options: SharedOptions, script: string): FlagHandlers {
  return {
    '--help': () => {
      process.stdout.write(`npm run ${script} -- [options]: bench/README.md lists them.\n`);
      process.exit(0);
    },
    ...numberFlags(options, ['duration', 'rounds', 'connections']),
    '--redis-url': (value) => (options.redisUrl = value()),
    '--auto-pipelining': () => (options.autoPipelining = true),
    '--out': (value) => (options.out = resolve(value())),
    '--no-docs': () => (options.updateDocs = false),
  };
}

/** The servers of every benchmark where its flags name none (bench/README.md, "Before a run"). */
export const DEFAULT_URLS = {
  redis: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  postgres: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  mariadb: process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test',
};
