import { resolve } from 'node:path';

/** A numeric command-line option of a bench script, `--name value`, or `fallback` when absent. */
export function numberArg(name: string, fallback: number): number {
  return Number(stringArg(name) ?? fallback);
}

/** A command-line option of a bench script, `--name value`, or `fallback` (undefined without one) when absent. */
export function stringArg(name: string): string | undefined;
export function stringArg(name: string, fallback: string): string;
export function stringArg(name: string, fallback?: string): string | undefined {
  const index = process.argv.indexOf(`--${name}`);
  return index > 0 ? process.argv[index + 1] : fallback;
}

/** What a flag does to the options: `value()` reads its value (`--flag=v`, or the next argument); `inline` is the `=v` part alone. */
export type FlagHandlers = Record<string, (value: () => string, inline: string | undefined) => unknown>;

/** Applies each `--flag [value]` of `argv` through its handler; a flag without one throws. */
export function parseFlags(argv: string[], handlers: FlagHandlers): void {
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const handler = handlers[flag];
    if (!handler) throw new Error(`Unknown option ${flag}; see --help.`);
    handler(() => inline ?? argv[++i], inline);
  }
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

/** The flags of the options both harnesses take, with the same meaning. */
export function sharedFlags(options: SharedOptions): FlagHandlers {
  return {
    '--duration': (value) => (options.duration = Number(value())),
    '--rounds': (value) => (options.rounds = Number(value())),
    '--connections': (value) => (options.connections = Number(value())),
    '--redis-url': (value) => (options.redisUrl = value()),
    '--auto-pipelining': () => (options.autoPipelining = true),
    '--out': (value) => (options.out = resolve(value())),
    '--no-docs': () => (options.updateDocs = false),
  };
}
