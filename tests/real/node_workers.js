// node_workers.js: worker_threads that hand a counter around with
// Atomics.wait / Atomics.notify on a SharedArrayBuffer (the test_real
// "node" cases). N workers take turns: worker i waits until the turn word
// says i, adds to its slot, passes the turn to i+1; ROUNDS rounds in all.
// Prints the rounds done and every slot's total; exit 0 when they add up.
//
//   node node_workers.js [WORKERS [ROUNDS]]     (defaults 8, 2000)
'use strict';
const { Worker, isMainThread, workerData } = require('worker_threads');

if (isMainThread) {
  const n = Number(process.argv[2] || 8);
  const rounds = Number(process.argv[3] || 2000);
  const sab = new SharedArrayBuffer(4 * (2 + n));
  const w32 = new Int32Array(sab); // [0] turn, [1] rounds done, [2..] per-worker totals
  let exited = 0;
  for (let i = 0; i < n; i++) {
    const w = new Worker(__filename, { workerData: { sab, i, n, rounds } });
    w.on('error', (e) => { console.error('worker', i, e); process.exit(1); });
    w.on('exit', () => {
      if (++exited < n) return;
      let sum = 0;
      for (let k = 0; k < n; k++) sum += w32[2 + k];
      console.log(`rounds=${Atomics.load(w32, 1)} sum=${sum}`);
      process.exit(Atomics.load(w32, 1) === rounds && sum === rounds * (rounds + 1) / 2 ? 0 : 1);
    });
  }
} else {
  const { sab, i, n, rounds } = workerData;
  const w32 = new Int32Array(sab);
  for (;;) {
    let t;
    while ((t = Atomics.load(w32, 0)) % n !== i && t !== -1)
      Atomics.wait(w32, 0, t);
    if (t === -1) break;
    const done = Atomics.add(w32, 1, 1) + 1;
    w32[2 + i] += done;
    Atomics.store(w32, 0, done >= rounds ? -1 : t + 1);
    Atomics.notify(w32, 0);
    if (done >= rounds) break;
  }
}
