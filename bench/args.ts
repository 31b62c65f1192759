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
