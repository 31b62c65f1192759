/** Value of one sample in Prometheus text output, or undefined when absent. */
export function sampleValue(metricsText: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of metricsText.split('\n')) {
    if (!line.startsWith(name + '{') && line.split(' ')[0] !== name) continue;
    const match = /^([^{\s]+)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) found[pair[1]] = pair[2];
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(match[3]);
  }
  return undefined;
}
