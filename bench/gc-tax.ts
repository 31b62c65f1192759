/**
 * Do the records a memory store retains tax every other route of the process (GC)?
 *
 *   node -r ./test/support/ts-require.js bench/gc-tax.ts --rounds 5 --duration 2 --keys 10000 --max-entries 100000
 *
 * One Nest Express app in a child process (--expose-gc, PerformanceObserver on 'gc'),
 * autocannon from here. The bare route's app CPU µs/request is measured after each heap
 * state, each set up from scratch and between two `empty` runs (tax = state ÷ their mean):
 * `lib` (--keys first executions over HTTP into `new MemoryIdempotencyStore()`), `libRaw`
 * (the same without the full GC before the run: the fill's garbage still in the heap),
 * `control` (a Map of as many single strings of the bytes a record retains), `libMax` and
 * `controlMax` (--max-entries; the store filled in-process by its own claim/complete with
 * records shaped like the HTTP ones). Also: GC pause per request, the forced full GC's
 * pause, and an in-process request-like churn. Writes bench/results/gc-tax.json and .md.
 */
import 'reflect-metadata';
import autocannon from 'autocannon';
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { PerformanceObserver, constants as perf } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import { Body, Controller, HttpCode, Module, Post, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { loadLib, describeLib } from './lib.js';
import { BODY, cannon } from './run.js';
import { median, round } from './stats.js';

type State = 'empty' | 'lib' | 'libRaw' | 'control' | 'libMax' | 'controlMax';
const STATES: readonly State[] = ['lib', 'libRaw', 'control', 'libMax', 'controlMax'];

interface Config {
  keys: number;
  maxEntries: number;
}
type Request =
  | { id: number; type: 'stats' }
  | { id: number; type: 'reset' }
  | { id: number; type: 'gc' }
  | { id: number; type: 'model' }
  | { id: number; type: 'churn'; n: number }
  | { id: number; type: 'direct'; n: number }
  | { id: number; type: 'control'; n: number; bytes: number }
  | { id: number; type: 'close' };
interface Stats {
  cpuMicros: number;
  served: number;
  gcMs: number;
  gcByKind: Record<string, number>;
  heapUsed: number;
  entries: number;
  fullGcMs?: number;
  churn?: { cpuMicros: number; gcMs: number };
  sample?: { key: number; result: number; fingerprint: number; leaseToken: number };
}

const TTL = 10 * 60 * 1000;
const CHURN = 300_000;
const KINDS: Record<number, string> = {
  [perf.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [perf.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [perf.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [perf.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

/** A new flat (sequential) string: what a socket read or JSON.stringify gives, never a slice of another. */
const fresh = (s: string) => Buffer.from(s, 'latin1').toString('latin1');

async function child(config: Config): Promise<void> {
  const { Idempotent, IdempotencyModule, MemoryIdempotencyStore } = loadLib();
  const lib = new MemoryIdempotencyStore();
  const libMax = new MemoryIdempotencyStore({ maxEntries: config.maxEntries });
  let control = new Map<string, string>();
  const counter = { n: 0 };
  const charge = (body: { amount: number }) => ({ id: `ch_${++counter.n}`, amount: body.amount, status: 'succeeded' });

  @Controller()
  class GcTaxController {
    @Post('bare')
    @HttpCode(201)
    bare(@Body() body: { amount: number }) {
      return charge(body);
    }

    @Post('lib/first')
    @Idempotent({ store: lib, ttl: TTL })
    first(@Body() body: { amount: number }) {
      return charge(body);
    }
  }
  @Module({ imports: [IdempotencyModule.forRoot({ isGlobal: true })], controllers: [GcTaxController as Type<unknown>] })
  class GcTaxModule {}
  const app = await NestFactory.create(GcTaxModule, { logger: false });
  await app.listen(0, '127.0.0.1');

  let gcMs = 0;
  const gcByKind: Record<string, number> = {};
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      gcMs += entry.duration;
      const kind = KINDS[(entry as unknown as { detail: { kind: number } }).detail.kind] ?? 'other';
      gcByKind[kind] = (gcByKind[kind] ?? 0) + 1;
    }
  }).observe({ entryTypes: ['gc'] });
  const gc = (globalThis as { gc?: () => void }).gc!;
  const completed = (store: object) => (store as unknown as { completed: Map<string, Record<string, string>> }).completed;

  const stats = (): Stats => {
    const cpu = process.cpuUsage();
    const first = completed(lib).values().next().value;
    return {
      cpuMicros: cpu.user + cpu.system,
      served: counter.n,
      gcMs,
      gcByKind: { ...gcByKind },
      heapUsed: getHeapStatistics().used_heap_size,
      entries: lib.size + libMax.size + control.size,
      sample: first && {
        key: first.key.length,
        result: first.result.length,
        fingerprint: first.fingerprint?.length ?? 0,
        leaseToken: first.leaseToken.length,
      },
    };
  };
  let sample: Record<string, string> | undefined;
  const direct = async (n: number) => {
    if (!sample) throw new Error('direct fill needs one lib record as a model');
    const tokenPrefix = `${randomUUID()}.`;
    for (let i = 0; i < n; i++) {
      const key = fresh(`${i}-${sample.key}`.slice(0, sample.key.length));
      const token = tokenPrefix + i.toString(36);
      await libMax.claim(key, { token, leaseTtl: 30_000, fingerprint: sample.fingerprint && fresh(randomBytes(32).toString('hex')) });
      await libMax.complete(key, token, { result: fresh(`${i}${sample.result}`.slice(0, sample.result.length)), ttl: TTL });
    }
  };
  // A request's garbage without the network; the last 64 stay reachable like requests in flight.
  const churn = (n: number) => {
    const inFlight: unknown[] = new Array(64);
    for (let i = 0; i < n; i++) {
      const body = JSON.parse(BODY) as { amount: number };
      const answer = { id: `ch_${i}`, amount: body.amount, status: 'succeeded' };
      inFlight[i & 63] = [body, answer, JSON.stringify(answer), { 'content-type': 'application/json', 'x-request': String(i) }];
    }
    return inFlight.length;
  };
  process.once('disconnect', () => process.exit(0));
  process.on('message', (m: Request) => {
    void (async () => {
      let fullGcMs: number | undefined;
      let churnResult: Stats['churn'];
      if (m.type === 'reset') {
        lib.clear();
        libMax.clear();
        control = new Map();
      } else if (m.type === 'gc') {
        const t = performance.now();
        gc();
        fullGcMs = performance.now() - t;
      } else if (m.type === 'model') sample = completed(lib).values().next().value;
      else if (m.type === 'direct') await direct(m.n);
      else if (m.type === 'control') {
        const pad = 'x'.repeat(m.bytes);
        for (let i = 0; i < m.n; i++) control.set(fresh(`control-${i}`), fresh(`${i}${pad}`));
      } else if (m.type === 'churn') {
        const [cpu0, gc0] = [process.cpuUsage(), gcMs];
        churn(m.n);
        await new Promise((r) => setTimeout(r, 100));
        const cpu = process.cpuUsage(cpu0);
        churnResult = { cpuMicros: cpu.user + cpu.system, gcMs: gcMs - gc0 };
      } else if (m.type === 'close') {
        await app.close();
        process.send!({ id: m.id });
        process.exit(0);
      }
      await new Promise((r) => setTimeout(r, 100)); // the observer's batched gc entries arrive
      process.send!({ id: m.id, stats: { ...stats(), fullGcMs, churn: churnResult } });
    })();
  });
  process.send!({ ready: (app.getHttpServer().address() as { port: number }).port });
}

interface Sample {
  cpuMicrosPerRequest: number;
  rps: number;
  gcMsPer1000: number;
  gcByKind: Record<string, number>;
  heapUsedMB: number;
  entries: number;
  fullGcMs: number;
  churnNs: number;
  churnGcNs: number;
}

class App {
  private next = 1;
  private readonly waiting = new Map<number, (stats: Stats) => void>();
  port = 0;
  constructor(readonly child: ChildProcess) {
    child.on('message', (m: { id?: number; stats?: Stats }) => {
      if (m.id !== undefined) this.waiting.get(m.id)?.(m.stats!);
    });
  }
  ask(message: Record<string, unknown> & { type: Request['type'] }): Promise<Stats> {
    const id = this.next++;
    return new Promise((r) => {
      this.waiting.set(id, r);
      this.child.send({ ...message, id });
    });
  }
}

function fillHttp(port: number, amount: number): Promise<autocannon.Result> {
  const prefix = randomBytes(6).toString('hex');
  let n = 0;
  const headers = { 'content-type': 'application/json' };
  return new Promise((res, rej) =>
    autocannon(
      {
        url: `http://127.0.0.1:${port}`,
        connections: 50,
        amount,
        requests: [
          {
            method: 'POST',
            path: '/lib/first',
            headers,
            body: BODY,
            setupRequest: (r: autocannon.Request) => ({ ...r, headers: { ...headers, 'idempotency-key': `${prefix}-${++n}` } }),
          },
        ],
      },
      (e, r) => (e ? rej(e) : res(r)),
    ),
  );
}

async function main(argv: string[]): Promise<void> {
  const opt = { rounds: 5, duration: 2, keys: 10_000, maxEntries: 100_000, states: [...STATES], out: '' };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const v = () => inline ?? argv[++i];
    if (flag === '--rounds') opt.rounds = Number(v());
    else if (flag === '--duration') opt.duration = Number(v());
    else if (flag === '--keys') opt.keys = Number(v());
    else if (flag === '--max-entries') opt.maxEntries = Number(v());
    else if (flag === '--states') opt.states = v().split(',') as State[];
    else if (flag === '--out') opt.out = resolve(v());
    else throw new Error(`Unknown option ${flag}`);
  }
  const out = opt.out || join(__dirname, 'results', 'gc-tax.json');
  const child = fork(__filename, ['--child', JSON.stringify({ keys: opt.keys, maxEntries: opt.maxEntries })], {
    execArgv: ['--expose-gc', ...process.execArgv],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const app = new App(child);
  app.port = await new Promise<number>((r) => child.once('message', (m: { ready: number }) => r(m.ready)));
  const log = (s: string) => process.stderr.write(s + '\n');
  const loadAtStart = loadavg();

  // Warm-up: both routes, so JIT compilation is not measured; the lib fill gives the
  // model record of the direct fill and the retained bytes per record of the controls.
  await cannon(app.port, { path: '/bare', key: 'unique', duration: 1 }, 50);
  const heapEmpty = await app.ask({ type: 'gc' });
  await fillHttp(app.port, opt.keys);
  await app.ask({ type: 'model' });
  const filled = await app.ask({ type: 'gc' });
  const model = filled.sample!;
  let bytesPerRecord = Math.round((filled.heapUsed - heapEmpty.heapUsed) / filled.entries);
  log(`model record ${JSON.stringify(model)}, ${bytesPerRecord} bytes retained per record`);

  const samples: Record<string, Sample[]> = {};
  /** One timed run of the bare route after `state` is set up from scratch. */
  const measure = async (state: State, r: number): Promise<Sample> => {
    await app.ask({ type: 'reset' });
    const empty = await app.ask({ type: 'gc' });
    const n = state.endsWith('Max') ? opt.maxEntries : opt.keys;
    if (state === 'lib' || state === 'libRaw') await fillHttp(app.port, n);
    else if (state === 'libMax') await app.ask({ type: 'direct', n });
    else if (state.startsWith('control')) await app.ask({ type: 'control', n, bytes: bytesPerRecord });
    // `libRaw` is measured as the probe of issue 32 was: right after the fill, its garbage still in the heap.
    const before = await app.ask({ type: state === 'libRaw' ? 'stats' : 'gc' });
    if (state === 'lib') bytesPerRecord = Math.round((before.heapUsed - empty.heapUsed) / before.entries);
    const run = await cannon(app.port, { path: '/bare', key: 'unique', duration: opt.duration }, 50);
    await new Promise((res) => setTimeout(res, 200)); // requests still in the server finish
    const after = await app.ask({ type: 'stats' });
    const churned = (await app.ask({ type: 'churn', n: CHURN })).churn!;
    const served = after.served - before.served;
    const kinds: Record<string, number> = {};
    for (const k of Object.keys(after.gcByKind)) kinds[k] = round((after.gcByKind[k] - (before.gcByKind[k] ?? 0)) / (served / 1000), 2);
    const s: Sample = {
      cpuMicrosPerRequest: (after.cpuMicros - before.cpuMicros) / served,
      rps: run.result.requests.total / run.result.duration,
      gcMsPer1000: ((after.gcMs - before.gcMs) / served) * 1000,
      gcByKind: kinds,
      heapUsedMB: before.heapUsed / 2 ** 20,
      entries: before.entries,
      fullGcMs: before.fullGcMs ?? Number.NaN,
      churnNs: (churned.cpuMicros / CHURN) * 1000,
      churnGcNs: (churned.gcMs / CHURN) * 1e6,
    };
    (samples[state] ??= []).push(s);
    log(
      `round ${r + 1} ${state.padEnd(10)} ${String(s.entries).padStart(6)} entries ${s.heapUsedMB.toFixed(1).padStart(6)} MB heap  ` +
        `full GC ${s.fullGcMs.toFixed(1)} ms  churn ${s.churnNs.toFixed(0)} ns (GC ${s.churnGcNs.toFixed(0)})  ${s.cpuMicrosPerRequest.toFixed(0)} µs/req  ${s.rps.toFixed(0)} req/s  GC ${s.gcMsPer1000.toFixed(1)} ms/1000 req ${JSON.stringify(kinds)}`,
    );
    return s;
  };
  /** Each state's CPU/request ÷ the mean of the `empty` runs on either side of it: drift of a shared machine cancels out. */
  const ratios: Record<string, number[]> = {};
  const churnRatios: Record<string, number[]> = {};
  for (let r = 0; r < opt.rounds; r++) {
    const order = opt.states.map((_, i) => opt.states[(i + r) % opt.states.length]);
    let emptyBefore = await measure('empty', r);
    for (const state of order) {
      const s = await measure(state, r);
      const emptyAfter = await measure('empty', r);
      (ratios[state] ??= []).push(s.cpuMicrosPerRequest / ((emptyBefore.cpuMicrosPerRequest + emptyAfter.cpuMicrosPerRequest) / 2));
      (churnRatios[state] ??= []).push(s.churnNs / ((emptyBefore.churnNs + emptyAfter.churnNs) / 2));
      emptyBefore = emptyAfter;
    }
  }
  const closed = new Promise((r) => child.once('exit', r));
  child.send({ type: 'close', id: 0 });
  await closed;

  const summary = Object.fromEntries(
    Object.entries(samples).map(([state, list]) => {
      const cpu = median(list.map((s) => s.cpuMicrosPerRequest));
      const kinds = [...new Set(list.flatMap((s) => Object.keys(s.gcByKind)))];
      return [
        state,
        {
          entries: list[0].entries,
          heapUsedMB: round(median(list.map((s) => s.heapUsedMB)), 1),
          cpuMicrosPerRequest: round(cpu, 1),
          taxPercent: state === 'empty' ? 0 : round((median(ratios[state]) - 1) * 100, 1),
          taxPercentRounds: ratios[state]?.map((x) => round((x - 1) * 100, 1)),
          fullGcMs: round(median(list.map((s) => s.fullGcMs)), 1),
          rps: round(median(list.map((s) => s.rps)), 0),
          gcMsPer1000Requests: round(median(list.map((s) => s.gcMsPer1000)), 2),
          gcEventsPer1000Requests: Object.fromEntries(kinds.map((k) => [k, round(median(list.map((s) => s.gcByKind[k] ?? 0)), 2)])),
          churnNsPerIteration: round(median(list.map((s) => s.churnNs)), 0),
          churnGcNsPerIteration: round(median(list.map((s) => s.churnGcNs)), 0),
          churnTaxPercent: state === 'empty' ? 0 : round((median(churnRatios[state]) - 1) * 100, 1),
          rounds: list.map((s) => round(s.cpuMicrosPerRequest, 1)),
        },
      ];
    }),
  );
  const result = {
    generatedAt: new Date().toISOString(),
    lib: describeLib(),
    machine: { node: process.version, loadAverageAtStart: loadAtStart.map((l) => round(l, 2)) },
    options: { ...opt, out: undefined },
    modelRecord: { ...model, retainedBytes: bytesPerRecord },
    summary,
  };
  writeFileSync(out, JSON.stringify(result, null, 2) + '\n');
  writeFileSync(out.replace(/\.json$/, '.md'), markdown(result));
  process.stdout.write(markdown(result));
}

function markdown(result: {
  generatedAt: string;
  lib: string;
  modelRecord: object;
  summary: Record<string, Record<string, unknown>>;
}): string {
  const rows = Object.entries(result.summary).map(
    ([state, s]) =>
      `| ${state} | ${s.entries} | ${s.heapUsedMB} | ${s.fullGcMs} | ${s.cpuMicrosPerRequest} | **${s.taxPercent} %** | ${s.churnNsPerIteration} (GC ${s.churnGcNsPerIteration}) | **${s.churnTaxPercent} %** | ${s.rps} | ${s.gcMsPer1000Requests} | ${JSON.stringify(s.gcEventsPer1000Requests)} | ${(s.taxPercentRounds as number[] | undefined)?.join(', ') ?? '–'} |`,
  );
  return [
    `Generated ${result.generatedAt}; ${result.lib}`,
    `Model record (string lengths, retained bytes): ${JSON.stringify(result.modelRecord)}`,
    '',
    'Tax: median over rounds of bare CPU/request ÷ the mean of the two `empty` runs around it, − 1. Full GC: the forced one before the run.',
    '',
    'Churn: the in-process request garbage (no network), CPU ns per iteration (GC pause ns within it) and its tax the same way.',
    '',
    '| state | entries | heap used MB | full GC ms | bare CPU µs/req | tax | churn ns/iter | churn tax | bare req/s | GC ms / 1000 req | GC events / 1000 req | tax by round % |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n');
}

if (require.main === module) {
  const at = process.argv.indexOf('--child');
  if (at >= 0) void child(JSON.parse(process.argv[at + 1]) as Config);
  else
    main(process.argv.slice(2)).catch((e: unknown) => {
      console.error(e);
      process.exit(1);
    });
}
