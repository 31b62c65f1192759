/** How often each named side effect really happened, to prove how often a handler ran. */
export class Effects {
  private readonly counts = new Map<string, number>();
  hit(name: string): number {
    const n = (this.counts.get(name) ?? 0) + 1;
    this.counts.set(name, n);
    return n;
  }
  count(name: string): number {
    return this.counts.get(name) ?? 0;
  }
}
