/**
 * Imported first by benches that can run on either NestJS: `BENCH_NEST11=1` loads NestJS
 * 11 from the peers install (bench/peers/nest11.ts; `bash .ci/legs/install.sh peers
 * bench/.scratch/peers` once), otherwise the main node_modules' NestJS 12.
 */
if (process.env.BENCH_NEST11) require('./peers/nest11.js');
