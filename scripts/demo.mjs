#!/usr/bin/env node
// `npm run demo`: starts the sample app on its embedded defaults (memory idempotency
// store, SQLite through sql.js: no service needed) and fires a storm of duplicates at it:
// retried webhooks, concurrent duplicates, reused keys with another payload, racing
// stock edits, redelivered messages, double-clicked checkouts, retried GraphQL mutations, a job started by several
// schedulers at once, a BullMQ job retried (when Redis answers on 127.0.0.1:6379), and a
// process killed with SIGKILL in the middle of a refund webhook's transaction and between
// two steps of a refund that calls a payment provider and a mailer. Then
// it counts every side effect in the database and exits 1 if any happened twice (or
// went missing). Last, for contrast only, the same kind of storm hits a hand-rolled
// "check, then act" guard (sample-app/src/demo/naive-refunds.controller.ts).
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const workDir = join(root, '.tmp', `demo-${process.pid}`);
const sqliteFile = join(workDir, 'sample-app.sqlite');
// What the fake payment provider and mailer did: outside the app's process, as a real provider's state is.
const servicesFile = join(workDir, 'external-services.json');
const startedAt = Date.now();
const tty = process.stdout.isTTY;
const run = randomUUID().slice(0, 8);

// ---------------------------------------------------------------- the app process

let app; // { child, base, output }

function startApp() {
  return new Promise((resolveStart, rejectStart) => {
    const child = spawn(process.execPath, ['-r', './test/support/ts-require.js', 'sample-app/src/main.ts'], {
      cwd: root,
      env: {
        ...process.env,
        PORT: '0',
        SQLITE_FILE: sqliteFile,
        SERVICES_FILE: servicesFile,
        SAMPLE_APP_DEMO_HOOKS: '1',
        REDIS_URL: '',
        DATABASE_URL: '',
        AMQP_URL: '',
        // The BullMQ worker of sample-app/src/jobs/ runs only when Redis answers (see detectRedis).
        BULLMQ_URL: bullmq.url ?? '',
        BULLMQ_PREFIX: bullmq.prefix,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      rejectStart(new Error(`the sample app did not start within 60 s:\n${output}`));
    }, 60_000);
    const onData = (chunk) => {
      output += chunk;
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match && !app?.base) {
        clearTimeout(timer);
        app = { child, base: match[1], output };
        resolveStart(app);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (!app || app.child !== child) rejectStart(new Error(`the sample app exited (${signal ?? code}) before listening:\n${output}`));
    });
  });
}

/**
 * Resolves once the app prints a line matching `pattern` (the demo gate of
 * sample-app/src/demo/step-gate.ts); call it before sending the request that prints it.
 */
function printed(pattern, timeoutMs = 30_000) {
  const { child } = app;
  return new Promise((resolvePrinted, rejectPrinted) => {
    let seen = '';
    const done = (error) => {
      clearTimeout(timer);
      child.stdout.off('data', onData);
      if (error) rejectPrinted(error);
      else resolvePrinted();
    };
    const onData = (chunk) => {
      seen += chunk;
      if (pattern.test(seen)) done();
    };
    const timer = setTimeout(() => done(new Error(`the sample app did not print ${pattern} within ${timeoutMs / 1000} s`)), timeoutMs);
    child.stdout.on('data', onData);
  });
}

async function stopApp(signal = 'SIGTERM') {
  if (!app) return;
  const { child } = app;
  app = undefined;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  const force = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(force);
}

// ---------------------------------------------------------------- HTTP and bookkeeping

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One row of the final table per scenario. */
const rows = [];
/** The anti-example's row, printed apart and never checked. */
let contrast;
const unexpected = [];
let sent = 0;
let phase = '';

function progress(line) {
  phase = line;
  if (tty) process.stdout.write(`\r\x1b[2K${line} (${sent} requests, ${((Date.now() - startedAt) / 1000).toFixed(1)} s)`);
  else console.log(line);
}

async function call(method, path, { key, body, headers = {}, expectFailure = false, allowServerErrors = false } = {}) {
  sent++;
  if (tty && sent % 10 === 0) progress(phase);
  try {
    const response = await fetch(app.base + path, {
      method,
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(20_000),
    });
    const text = await response.text();
    const result = {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed') === 'true',
      retryAfter: response.headers.get('retry-after'),
      body: text ? JSON.parse(text) : undefined,
    };
    if (result.status >= 500 && !allowServerErrors) unexpected.push(`${method} ${path} -> ${result.status} ${text}`);
    return result;
  } catch (error) {
    if (expectFailure) return { status: 0, error };
    unexpected.push(`${method} ${path} -> ${error.message}`);
    return { status: 0, error };
  }
}

function tally(results) {
  const t = { requests: results.length, replays: 0, conflicts: 0, mismatches: 0, other: 0, ok: 0 };
  for (const r of results) {
    if (r.status === 409) t.conflicts++;
    else if (r.status === 422) t.mismatches++;
    else if (r.status >= 200 && r.status < 300) {
      t.ok++;
      if (r.replayed) t.replays++;
    } else t.other++;
  }
  return t;
}

const stats = async () => (await call('GET', '/stats')).body;

/**
 * One scenario of the report, in words: `sent` says what was sent, `correct` what the
 * right outcome is, `counted` what the database and the answers show. `effects` must
 * equal `expected` (counted in the database) for the scenario to pass.
 */
function record({ name, sent, correct, counted, results, effects, expected }) {
  rows.push({ name, sent, correct, counted, ...tally(results), effects, expected });
}

const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** "12 replays, 3 x 409 (in flight), 5 x 422 (another payload)": only the kinds that occurred. */
function answersOf(t) {
  const parts = [];
  if (t.replays) parts.push(plural(t.replays, 'replay'));
  if (t.conflicts) parts.push(`${t.conflicts} x 409`);
  if (t.mismatches) parts.push(`${t.mismatches} x 422`);
  if (t.other) parts.push(`${t.other} other`);
  return parts.length ? parts.join(', ') : 'no duplicate answers';
}

// ---------------------------------------------------------------- scenarios

const refundKeys = new Map(); // key -> amount of the refund that key stands for

async function retriedWebhooks() {
  progress('1/10 retried refund webhooks');
  const before = await stats();
  const results = [];
  const keys = Array.from({ length: 20 }, (_, i) => [`evt_${run}_retry_${i}`, 100 + i]);
  // Every webhook is delivered, then retried 4 times (the provider never saw our 200).
  await Promise.all(
    keys.map(async ([key, amount]) => {
      refundKeys.set(key, amount);
      for (let attempt = 0; attempt < 5; attempt++) results.push(await call('POST', '/webhooks/refunds', { key, body: { accountId: 'acct_1', amount } }));
    }),
  );
  const after = await stats();
  const refunds = after.refunds.count - before.refunds.count;
  const t = tally(results);
  record({
    name: 'retried webhooks',
    sent: `${keys.length} refund webhooks, each delivered 5 times in a row (${results.length} requests)`,
    correct: `${keys.length} refunds, one per webhook; every retry gets the first answer replayed`,
    counted: `${plural(refunds, 'refund')}; ${answersOf(t)}`,
    results,
    effects: refunds,
    expected: keys.length,
  });
}

async function concurrentDuplicates() {
  progress('2/10 concurrent duplicate webhooks');
  const before = await stats();
  const keys = Array.from({ length: 10 }, (_, i) => [`evt_${run}_burst_${i}`, 200 + i]);
  const results = [];
  // 10 copies of each webhook at the same instant; the first holds its transaction open 150 ms.
  await Promise.all(
    keys.flatMap(([key, amount]) => {
      refundKeys.set(key, amount);
      return Array.from({ length: 10 }, async () =>
        results.push(await call('POST', '/webhooks/refunds', { key, body: { accountId: 'acct_1', amount }, headers: { 'x-demo-delay-ms': '150' } })),
      );
    }),
  );
  // The ones refused with 409 retry after Retry-After, as a well-behaved sender does.
  const refused = results.filter((r) => r.status === 409).length;
  await sleep(1_000);
  for (const [key, amount] of keys) results.push(await call('POST', '/webhooks/refunds', { key, body: { accountId: 'acct_1', amount } }));
  const after = await stats();
  const refunds = after.refunds.count - before.refunds.count;
  record({
    name: 'concurrent duplicates',
    sent: `${keys.length} refund webhooks, 10 copies of each at the same instant, then each once more after Retry-After (${results.length} requests)`,
    correct: `${keys.length} refunds; a copy that arrives while the first runs gets 409 + Retry-After, one sent after it a replay`,
    counted: `${plural(refunds, 'refund')}; ${refused} x 409 at first, ${answersOf({ ...tally(results), conflicts: 0 })}`,
    results,
    effects: refunds,
    expected: keys.length,
  });
}

async function payloadMismatch() {
  progress('3/10 keys reused with another payload');
  const before = await stats();
  const results = [];
  const reused = [...refundKeys.keys()].slice(0, 5);
  for (const key of reused) results.push(await call('POST', '/webhooks/refunds', { key, body: { accountId: 'acct_1', amount: 99_999 } }));
  const after = await stats();
  const refunds = after.refunds.count - before.refunds.count;
  record({
    name: 'key reused with another payload',
    sent: `${reused.length} keys of webhooks already refunded, sent again with another amount (${results.length} requests)`,
    correct: 'nothing refunded; each answered 422 IDEMPOTENCY_FINGERPRINT_MISMATCH',
    counted: `${plural(refunds, 'refund')}; ${answersOf(tally(results))}`,
    results,
    effects: refunds,
    expected: 0,
  });
}

async function ordersAndMessages() {
  progress('4/10 orders: retried creates, racing transitions, redelivered messages');
  const before = await stats();
  const results = [];
  const messageResults = [];
  const orders = [];
  for (let i = 0; i < 10; i++) {
    const key = `order_${run}_${i}`;
    const body = { sku: 'sku_mug', quantity: 1 + (i % 3) };
    const created = [];
    for (let attempt = 0; attempt < 3; attempt++) created.push(await call('POST', '/orders', { key, body }));
    results.push(...created);
    orders.push({ id: created[0].body.id, quantity: body.quantity });
  }
  // "pay" twice at once per order (double click): the state machine makes the second a no-op.
  await Promise.all(orders.flatMap((o) => [0, 1].map(async () => results.push(await call('POST', `/orders/${o.id}/transitions`, { body: { to: 'paid' } })))));
  // The broker redelivers every order.paid 5 times, concurrently with the in-process delivery.
  await Promise.all(
    orders.flatMap((o) =>
      Array.from({ length: 5 }, async () =>
        messageResults.push(await call('POST', '/messages', { body: { id: `order.paid:${o.id}`, type: 'order.paid', orderId: o.id } })),
      ),
    ),
  );
  await sleep(300); // let the in-process deliveries settle
  const after = await stats();
  const shipped = await Promise.all(orders.map(async (o) => (await call('GET', `/orders/${o.id}`)).body.status));
  if (shipped.some((s) => s !== 'shipped')) unexpected.push(`orders not shipped: ${shipped.join(', ')}`);
  const reserved = orders.reduce((sum, o) => sum + o.quantity, 0);
  const stockDrop = before.inventory.sku_mug.stock - after.inventory.sku_mug.stock;
  if (stockDrop !== reserved) unexpected.push(`sku_mug stock dropped by ${stockDrop}, expected ${reserved}`);
  const created = after.orders - before.orders;
  record({
    name: 'orders created and paid',
    sent: `${orders.length} orders, each created 3 times with one key, then "pay" clicked twice at once (${results.length} requests)`,
    correct: `${orders.length} orders; the retried creates get the first order back, the second "pay" changes nothing`,
    counted: `${plural(created, 'order')}; ${answersOf(tally(results))}`,
    results,
    effects: created,
    expected: orders.length,
  });
  const shipments = after.shipments.count - before.shipments.count;
  const deliveries = messageResults.length + orders.length;
  rows.push({
    name: 'redelivered messages',
    sent: `order.paid for ${orders.length} orders, delivered once in the app and redelivered 5 times by the "broker" (${deliveries} deliveries)`,
    correct: `${orders.length} shipments, one per order; stock of sku_mug down by the ${reserved} units ordered, not more`,
    counted: `${plural(shipments, 'shipment')}; stock down by ${stockDrop}; ${deliveries - shipments} deliveries did nothing`,
    ...tally(messageResults),
    requests: deliveries,
    effects: shipments,
    expected: orders.length,
  });
}

async function optimisticLocking() {
  progress('5/10 racing stock edits (optimistic locking)');
  const sku = 'sku_cap';
  const start = (await call('GET', `/inventory/${sku}`)).body;
  const results = [];
  const deltas = [5, -3, 7, -2, 4, -1, 6, -8];
  let applied = 0;
  // 8 clerks read the same version and save at once; the losers re-read and try again.
  await Promise.all(
    deltas.map(async (delta) => {
      let version = start.version;
      for (;;) {
        const r = await call('PATCH', `/inventory/${sku}`, { key: randomUUID(), body: { delta, expectedVersion: version } });
        results.push(r);
        if (r.status === 200) return void applied++;
        if (r.status !== 409) return;
        version = (await call('GET', `/inventory/${sku}`)).body.version;
      }
    }),
  );
  const end = (await call('GET', `/inventory/${sku}`)).body;
  const expectedStock = start.stock + deltas.reduce((a, b) => a + b, 0);
  if (end.stock !== expectedStock) unexpected.push(`${sku} stock ${end.stock}, expected ${expectedStock} (a lost update)`);
  record({
    name: 'racing stock edits',
    sent: `${deltas.length} clerks saving an edit of the same stock row at once, each retrying after a 409 (${results.length} requests)`,
    correct: `all ${deltas.length} edits applied, none lost: stock ${start.stock} -> ${expectedStock}`,
    counted: `${plural(end.version - start.version, 'edit')} applied, stock ${start.stock} -> ${end.stock}; ${answersOf(tally(results))} (stale versions)`,
    results,
    effects: end.version - start.version,
    expected: deltas.length,
  });
}

async function checkoutTokens() {
  progress('6/10 double-submitted checkouts (one-time tokens)');
  const before = await stats();
  const results = [];
  const carts = Array.from({ length: 5 }, (_, i) => `cart_${run}_${i}`);
  // The page got one token per cart; the customer double-clicks "pay" four times.
  await Promise.all(
    carts.map(async (cartId) => {
      const { token } = (await call('POST', '/checkout/tokens', { body: { cartId } })).body;
      const clicks = await Promise.all(Array.from({ length: 4 }, () => call('POST', '/checkout', { body: { cartId, total: 4_200 }, headers: { 'checkout-token': token } })));
      results.push(...clicks);
    }),
  );
  const after = await stats();
  const checkouts = after.checkouts - before.checkouts;
  record({
    name: 'double-clicked checkouts',
    sent: `${carts.length} checkout pages, "pay" clicked 4 times at once on each with the page's one-time token (${results.length} requests)`,
    correct: `${carts.length} checkouts; the other clicks answered 409 IDEMPOTENCY_TOKEN_USED`,
    counted: `${plural(checkouts, 'checkout')}; ${answersOf(tally(results))}`,
    results,
    effects: checkouts,
    expected: carts.length,
  });
}

async function lockedSettlement() {
  progress('7/10 settlement job started by 6 schedulers at once (lock)');
  const before = await stats();
  const day = '2026-11-28';
  const results = await Promise.all(Array.from({ length: 6 }, () => call('POST', '/settlements/run', { body: { day } })));
  const later = await call('POST', '/settlements/run', { body: { day } });
  results.push(later);
  const after = await stats();
  const totals = new Set(results.map((r) => r.body?.refundsTotal));
  if (totals.size !== 1) unexpected.push(`settlement runs disagree on the total: ${[...totals].join(', ')}`);
  const runs = after.settlements - before.settlements;
  const replays = results.filter((r) => r.body?.replayed === true).length;
  rows.push({
    name: 'settlement job started by several schedulers',
    sent: `the daily settlement job started by 6 schedulers at once, then once more (${results.length} starts)`,
    correct: 'one run; the other starts wait for it under a lock and get its result',
    counted: `${plural(runs, 'run')}; ${plural(replays, 'start')} got the stored result`,
    ...tally(results),
    replays,
    effects: runs,
    expected: 1,
  });
}

/** A GraphQL operation through `call` (HTTP 200 either way), its refusals mapped to their HTTP statuses for the tally. */
async function graphql(query, key) {
  const result = await call('POST', '/graphql', { key, body: { query } });
  const code = result.body?.errors?.[0]?.extensions?.code;
  if (code === 'IDEMPOTENCY_REQUEST_IN_FLIGHT') return { ...result, status: 409 };
  if (code === 'IDEMPOTENCY_FINGERPRINT_MISMATCH') return { ...result, status: 422 };
  if (result.body?.errors) unexpected.push(`POST /graphql -> ${JSON.stringify(result.body.errors[0])}`);
  return result;
}

async function graphqlMutations() {
  progress('GraphQL: retried gift-card mutations');
  const issued = async () => (await graphql('{ giftCards { issued } }')).body.data.giftCards.issued;
  const before = await issued();
  const results = [];
  const orders = Array.from({ length: 10 }, (_, i) => [`gql_${run}_${i}`, 500 + i]);
  await Promise.all(
    orders.map(async ([key, amount]) => {
      const mutation = `mutation { card: issueGiftCard(orderId: "${key}", amount: ${amount}) { code } }`;
      // 5 copies at the same instant, then 3 retries in a row (a client that timed out).
      const copies = await Promise.all(Array.from({ length: 5 }, () => graphql(mutation, key)));
      for (let attempt = 0; attempt < 3; attempt++) copies.push(await graphql(mutation, key));
      // The first answer with data is the run; every later one with the same card is a replay.
      const cards = copies.filter((r) => r.body?.data).map((r) => r.body.data.card.code);
      copies.filter((r) => r.body?.data).forEach((r, i) => (r.replayed = i > 0 && cards[i] === cards[0]));
      results.push(...copies);
    }),
  );
  // One operation, two aliased mutations, one Idempotency-Key: two cards, and a retry issues none.
  const pair = `gql_${run}_pair`;
  const operation = `mutation { a: issueGiftCard(orderId: "${pair}", amount: 1) { code } b: issueGiftCard(orderId: "${pair}", amount: 1) { code } }`;
  for (let attempt = 0; attempt < 3; attempt++) {
    const answer = await graphql(operation, pair);
    answer.replayed = attempt > 0;
    results.push(answer);
  }
  const cards = (await issued()) - before;
  record({
    name: 'GraphQL mutations retried',
    sent: `${orders.length} issueGiftCard mutations, 5 copies of each at once then 3 retries, and one operation with two aliased mutations sent 3 times under one key (${results.length} requests)`,
    correct: `${orders.length + 2} gift cards; copies in flight get IDEMPOTENCY_REQUEST_IN_FLIGHT, later ones the first card as the field's value`,
    counted: `${plural(cards, 'gift card')}; ${answersOf(tally(results))}`,
    results,
    effects: cards,
    expected: orders.length + 2,
  });
}

/** The refunds of POST /refunds (reference -> amount): their ledger rows are keyed by a step key, not by the reference. */
const stepRefunds = new Map();

/**
 * One SIGKILL, two crashes: a refund of POST /refunds (its provider refund, ledger entry
 * and e-mail are three steps) stopped at the demo gate right after its provider step,
 * and a refund webhook held inside its database transaction. After a restart on the
 * same files both are retried, as their senders would.
 */
async function crashAndRetry() {
  progress('8/10 SIGKILL between two steps of a refund and inside a webhook transaction, restart, retry');
  const key = `evt_${run}_crash`;
  const amount = 777;
  refundKeys.set(key, amount);
  const reference = `refund_${run}_crash`;
  const refund = { accountId: 'acct_1', amount: 555, email: 'ada@example.com' };
  stepRefunds.set(reference, refund.amount);
  const before = await stats();
  const results = [];
  const stepResults = [];
  // The refund stops once its first step (the provider's refund) is recorded; the gate says so on stdout.
  const gate = printed(new RegExp(`demo-gate: paused after step provider-refund of refund ${reference}`));
  const paused = call('POST', '/refunds', { key: reference, body: refund, headers: { 'x-demo-pause-after-step': 'provider-refund' }, expectFailure: true });
  await gate;
  // The webhook holds its transaction open for 5 s; the process dies 1 s into it.
  const doomed = call('POST', '/webhooks/refunds', { key, body: { accountId: 'acct_1', amount }, headers: { 'x-demo-delay-ms': '5000' }, expectFailure: true });
  await sleep(1_000);
  await stopApp('SIGKILL');
  results.push(await doomed);
  stepResults.push(await paused);
  progress('8/10 restarting the app on the same SQLite file');
  const restartedAt = Date.now();
  await startApp();
  const restartSeconds = ((Date.now() - restartedAt) / 1000).toFixed(1);
  const afterCrash = await stats();
  const committedBeforeCrash = afterCrash.refunds.keys.includes(key);
  // The provider retries the killed delivery twice, and a webhook that completed before the crash.
  results.push(await call('POST', '/webhooks/refunds', { key, body: { accountId: 'acct_1', amount } }));
  results.push(await call('POST', '/webhooks/refunds', { key, body: { accountId: 'acct_1', amount } }));
  const [oldKey, oldAmount] = [...refundKeys.entries()][0];
  results.push(await call('POST', '/webhooks/refunds', { key: oldKey, body: { accountId: 'acct_1', amount: oldAmount } }));
  const afterWebhooks = await stats();
  const refunds = afterWebhooks.refunds.count - before.refunds.count;
  record({
    name: 'crash: SIGKILL mid-refund, restart, retry',
    sent: 'a refund webhook whose process is killed (SIGKILL) inside its transaction; after a restart it is retried twice, and an old webhook once',
    correct: 'exactly 1 new refund: the killed attempt leaves no trace, the first retry runs it, the others replay',
    counted: `${plural(refunds, 'new refund')}; ${committedBeforeCrash ? 'the kill came after the commit, so the retries replayed' : 'the kill rolled the attempt back; the retry ran it once'}`,
    results,
    effects: refunds,
    expected: 1,
  });

  // What the kill left of the stepped refund: the provider had refunded, nothing else had happened.
  const count = (list, wanted) => list.filter((r) => r === wanted).length;
  const providerAfterCrash = count(afterCrash.external.paymentProvider.refunds, reference);
  const emailsAfterCrash = count(afterCrash.external.mailer.emails, reference);
  const ledgerAfterCrash = afterCrash.refunds.count - before.refunds.count - (committedBeforeCrash ? 1 : 0);
  if (providerAfterCrash !== 1 || emailsAfterCrash !== 0 || ledgerAfterCrash !== 0) {
    unexpected.push(`the kill was not between the steps: ${providerAfterCrash} provider refunds, ${ledgerAfterCrash} ledger rows, ${emailsAfterCrash} e-mails`);
  }
  // The support tool retries (after Retry-After while the dead process's lease runs out), then 3 duplicates at once.
  const retriedAt = Date.now();
  const retried = await retryAfterConflicts(() => call('POST', '/refunds', { key: reference, body: refund }));
  const retrySeconds = ((Date.now() - retriedAt) / 1000).toFixed(1);
  stepResults.push(...retried);
  const resumed = retried.at(-1);
  const duplicates = await Promise.all(Array.from({ length: 3 }, () => call('POST', '/refunds', { key: reference, body: refund })));
  stepResults.push(...duplicates);
  const after = await stats();
  const sameAnswer = duplicates.every((d) => d.replayed && JSON.stringify(d.body) === JSON.stringify(resumed.body));
  if (resumed.status !== 200 || !sameAnswer) unexpected.push(`POST /refunds after the crash: ${resumed.status}, duplicates ${sameAnswer ? 'replayed it' : 'did not replay it'}`);
  const providerRefunds = count(after.external.paymentProvider.refunds, reference);
  const providerCalls = after.external.paymentProvider.calls - before.external.paymentProvider.calls;
  const emails = count(after.external.mailer.emails, reference);
  const ledger = after.refunds.count - afterWebhooks.refunds.count;
  if (providerCalls !== 1) unexpected.push(`the payment provider was called ${providerCalls} times for one refund (the retry should take step 1 from its record)`);
  const events = after.idempotencyEvents;
  rows.push({
    name: 'crash: SIGKILL between two steps, restart, retry',
    sent: 'a refund (steps: provider refund, ledger entry, e-mail) whose process is killed right after the provider refunded; after a restart it is retried once, then 3 duplicates at once',
    correct: '1 provider refund, 1 ledger entry, 1 e-mail: the retry takes step 1 from its record and runs the other two; the duplicates get its answer replayed',
    counted:
      `after the kill: ${plural(providerAfterCrash, 'provider refund')}, ${plural(ledgerAfterCrash, 'ledger entry', 'ledger entries')}, ${plural(emailsAfterCrash, 'e-mail')} (restart ${restartSeconds} s); ` +
      `after the retry (answered in ${retrySeconds} s, the dead process's lease included): ${plural(providerRefunds, 'provider refund')} (${plural(providerCalls, 'call')} to the provider), ${plural(ledger, 'ledger entry', 'ledger entries')}, ${plural(emails, 'e-mail')}; ` +
      `${plural(events.step_replayed ?? 0, 'step')} replayed, ${events.step_completed ?? 0} run; ${plural(duplicates.filter((d) => d.replayed).length, 'duplicate')} replayed`,
    ...tally(stepResults.slice(1)),
    effects: providerRefunds + ledger + emails,
    expected: 3,
  });
}

/** Sends again after each 409's Retry-After (a well-behaved client), up to 30 s; every answer, in order. */
async function retryAfterConflicts(send) {
  const answers = [];
  const deadline = Date.now() + 30_000;
  for (;;) {
    const answer = await send();
    answers.push(answer);
    if (answer.status !== 409 || Date.now() > deadline) return answers;
    await sleep(Number(answer.retryAfter ?? 1) * 1000);
  }
}

/** For contrast only (not part of the checks): the hand-rolled "check, act, record" guard. */
async function withoutTheLibrary() {
  progress('9/10 for contrast: the same storm on a hand-rolled check-then-insert guard');
  const before = await stats();
  const results = [];
  const keys = Array.from({ length: 5 }, (_, i) => `naive_${run}_${i}`);
  await Promise.all(
    keys.flatMap((key) => Array.from({ length: 10 }, async () => results.push(await call('POST', '/demo/naive-refunds', { key, body: { amount: 100 }, allowServerErrors: true })))),
  );
  const after = await stats();
  const debits = (before.balances.acct_naive - after.balances.acct_naive) / 100;
  contrast = {
    name: 'WITHOUT the library: a hand-rolled guard',
    sent: `${keys.length} refund webhooks, 10 copies of each at once (${results.length} requests)`,
    correct: `${keys.length} debits`,
    counted: `${debits} debits, ${after.naiveRefunds - before.naiveRefunds} refund rows, ${results.filter((r) => r.status >= 500).length} x 500`,
    effects: debits,
    expected: keys.length,
  };
}

async function verify() {
  progress('10/10 counting side effects in the database');
  const s = await stats();
  const counts = new Map();
  for (const key of s.refunds.keys) counts.set(key, (counts.get(key) ?? 0) + 1);
  const duplicated = [...counts].filter(([, n]) => n > 1).map(([k]) => k);
  const missing = [...refundKeys.keys()].filter((k) => !counts.has(k));
  const expectedTotal = [...refundKeys.values(), ...stepRefunds.values()].reduce((a, b) => a + b, 0);
  const shipmentCounts = new Map();
  for (const key of s.shipments.keys) shipmentCounts.set(key, (shipmentCounts.get(key) ?? 0) + 1);
  const duplicatedShipments = [...shipmentCounts].filter(([, n]) => n > 1).map(([k]) => k);
  const balanceOk = s.balance === 1_000_000 - s.refunds.total && s.refunds.total === expectedTotal;
  return { duplicated, missing, duplicatedShipments, balanceOk, balance: s.balance, expectedBalance: 1_000_000 - expectedTotal };
}

// ---------------------------------------------------------------- BullMQ (when Redis answers)

/** BullMQ needs Redis: the job scenario runs when 127.0.0.1:6379 answers PING, and says why it was skipped otherwise. */
const bullmq = { url: undefined, prefix: `demo-${run}`, skipped: undefined };

async function detectRedis() {
  const answer = await new Promise((resolveAnswer) => {
    const socket = connect({ host: '127.0.0.1', port: 6379 });
    const done = (value) => {
      socket.destroy();
      resolveAnswer(value);
    };
    socket.setTimeout(1_000, () => done('no answer within 1 s'));
    socket.once('error', (error) => done(error.code ?? error.message));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => done(String(data).startsWith('+PONG') ? true : `answered ${JSON.stringify(String(data).trim())}`));
  });
  if (answer === true) bullmq.url = 'redis://127.0.0.1:6379';
  else bullmq.skipped = `no Redis for BullMQ on 127.0.0.1:6379 (${answer})`;
}

/** Deletes the queue's keys of this run (SCAN, never KEYS). */
async function cleanUpBullmq() {
  if (!bullmq.url) return;
  const { Redis } = await import('ioredis');
  const redis = new Redis(bullmq.url, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${bullmq.prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

async function jobOf(refundId) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const job = (await call('GET', `/jobs/refunds/${refundId}`, { expectFailure: true })).body;
    if (job?.state === 'completed' || job?.state === 'failed') return job;
    if (Date.now() > deadline) {
      unexpected.push(`BullMQ job ${refundId} did not finish within 20 s (${job?.state ?? 'not found'})`);
      return job ?? {};
    }
    await sleep(50);
  }
}

async function retriedJob() {
  progress('BullMQ: a refund payout job retried, then enqueued again');
  if (!bullmq.url) {
    rows.push({
      skipped: true,
      name: 'BullMQ job retried (SKIPPED)',
      sent: 'nothing: this scenario needs Redis',
      correct: 'n/a',
      counted: `skipped: ${bullmq.skipped}. Start Redis on 127.0.0.1:6379 to run it`,
      ...tally([]),
      effects: 0,
      expected: 0,
    });
    return;
  }
  const refundId = `job_${run}`;
  const body = { refundId, amount: 250, flakyProvider: true };
  const results = [await call('POST', '/jobs/refunds', { body })];
  const first = await jobOf(refundId);
  // The producer enqueues it again after it finished (its own retry after a timeout): same job id, new job.
  await call('POST', `/jobs/refunds/${refundId}/remove`);
  results.push(await call('POST', '/jobs/refunds', { body }));
  const again = await jobOf(refundId);
  const replayed = again.state === 'completed' && JSON.stringify(again.result) === JSON.stringify(first.result);
  rows.push({
    name: 'BullMQ job retried',
    sent: 'a refund payout job (job id = refund id) whose first attempt fails, retried by BullMQ with backoff; then the same job enqueued again after it completed',
    correct: '1 payout: the failed attempt released its key, the retry paid, the job enqueued again got the stored payout',
    counted: `${plural(again.payouts ?? 0, 'payout')}; the job ${first.state} after ${plural(first.attemptsMade ?? 0, 'attempt')}; enqueued again it ${replayed ? 'got the stored result' : `ended ${again.state}`}`,
    ...tally(results),
    replays: replayed ? 1 : 0,
    effects: again.payouts ?? 0,
    expected: 1,
  });
}

// ---------------------------------------------------------------- report

function printTable(seconds, check) {
  const mark = (r) => (r.skipped ? 'skip' : r.effects === r.expected ? 'ok  ' : 'FAIL');
  const block = (r, title, label = mark(r)) =>
    `${label} ${title}\n       sent:     ${r.sent}\n       correct:  ${r.correct}\n       counted:  ${r.counted}`;
  console.log('\nWhat was sent, what correct means, and what the database shows afterwards:\n');
  rows.forEach((r, i) => console.log(block(r, `${i + 1}. ${r.name}`) + '\n'));
  const requests = rows.reduce((n, r) => n + r.requests, 0);
  const effects = rows.reduce((n, r) => n + r.effects, 0);
  const expected = rows.reduce((n, r) => n + r.expected, 0);
  const passed = rows.filter((r) => !r.skipped && r.effects === r.expected).length;
  const skipped = rows.filter((r) => r.skipped).length;
  console.log(`| TOTAL | ${passed}/${rows.length - skipped} scenarios correct${skipped ? ` (${skipped} skipped)` : ''} | ${requests} requests | ${effects} side effects, ${expected} expected | ${seconds.toFixed(1)} s |`);
  if (contrast) {
    console.log(
      `\nFor contrast, the same kind of storm on a hand-rolled "seen this key? no: debit, then record it" guard\n` +
        `(sample-app/src/demo/naive-refunds.controller.ts in the repository; not part of the checks):\n\n${block(contrast, contrast.name, '    ')}`,
    );
  }
  console.log(
    `\nside effects executed twice: ${check.duplicated.length + check.duplicatedShipments.length}` +
      ` | refunds missing: ${check.missing.length}` +
      ` | balance ${check.balance} (expected ${check.expectedBalance})` +
      ` | unexpected answers: ${unexpected.length}`,
  );
}

async function main() {
  rmSync(workDir, { recursive: true, force: true });
  mkdirSync(workDir, { recursive: true });
  await detectRedis();
  progress('starting the sample app (memory store + SQLite file, no services)');
  await startApp();
  await retriedWebhooks();
  await concurrentDuplicates();
  await payloadMismatch();
  await ordersAndMessages();
  await optimisticLocking();
  await checkoutTokens();
  await lockedSettlement();
  await graphqlMutations();
  await retriedJob();
  await crashAndRetry();
  await withoutTheLibrary();
  const check = await verify();
  await stopApp();
  if (tty) process.stdout.write('\r\x1b[2K');
  printTable((Date.now() - startedAt) / 1000, check);
  const effectsWrong = rows.filter((r) => r.effects !== r.expected);
  const failed = check.duplicated.length > 0 || check.duplicatedShipments.length > 0 || check.missing.length > 0 || !check.balanceOk || unexpected.length > 0 || effectsWrong.length > 0;
  if (failed) {
    for (const r of effectsWrong) console.error(`FAIL: ${r.name}: ${r.effects} side effects, expected ${r.expected}`);
    for (const k of check.duplicated) console.error(`FAIL: refund ${k} executed twice`);
    for (const k of check.duplicatedShipments) console.error(`FAIL: message ${k} shipped twice`);
    for (const k of check.missing) console.error(`FAIL: refund ${k} never executed`);
    for (const u of unexpected) console.error(`FAIL: ${u}`);
    console.error('\nDEMO FAILED');
    process.exitCode = 1;
  } else {
    console.log('every side effect ran exactly once. Run it again: npm run demo');
  }
}

main()
  .catch(async (error) => {
    console.error('\ndemo crashed:', error);
    process.exitCode = 1;
  })
  .finally(async () => {
    await stopApp('SIGKILL').catch(() => {});
    await cleanUpBullmq().catch(() => {});
    rmSync(workDir, { recursive: true, force: true });
  });
