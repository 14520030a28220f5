#!/usr/bin/env node
// ONNX Runtime side of bench/compare.sh: times inference of an ONNX model that
// bench/torch_bench.py exported, on random inputs, step by step like `graphc bench`.
//
//   node bench/ort_bench.js --onnx FILE.onnx --model NAME --batch B --shape C,H,W
//        --steps N --warmup W --threads T
//   node bench/ort_bench.js --probe      (is onnxruntime-node there? which version?)
//
// Prints one JSON object: the median ms per step (session.run on a tensor made once).
// The session has every graph optimization on (graphOptimizationLevel "all"),
// intraOpNumThreads = T, interOpNumThreads = 1, sequential execution, the CPU
// execution provider and ONNX Runtime's default thread spinning.
'use strict';

const path = require('path');

function loadOrt() {
  try {
    // bench/node_modules first (where bench/README.md installs it), then the usual lookup
    return require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));
  } catch (e) {
    return require('onnxruntime-node');
  }
}

function ortVersion(ort) {
  return ort.env && ort.env.versions ? ort.env.versions.node || ort.env.versions.common : 'unknown';
}

function parseArgs(argv) {
  const a = { steps: 10, warmup: 2, threads: 2 };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    const v = argv[i + 1];
    if (v === undefined) throw new Error(`option ${argv[i]} needs a value`);
    a[k] = v;
  }
  for (const k of ['batch', 'steps', 'warmup', 'threads']) a[k] = parseInt(a[k], 10);
  if (!a.onnx || !a.shape || !a.batch) throw new Error('usage: ort_bench.js --onnx F --model M --batch B --shape C,H,W [--steps N --warmup W --threads T]');
  a.shape = a.shape.split(',').map((s) => parseInt(s, 10));
  return a;
}

function median(v) {
  const s = [...v].sort((x, y) => x - y);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

async function main() {
  if (process.argv[2] === '--probe') {
    console.log(JSON.stringify({ kind: 'ort_probe', ort: ortVersion(loadOrt()), node: process.version }));
    return;
  }
  const a = parseArgs(process.argv);
  const base = {
    framework: 'onnxruntime', config: 'ort', model: a.model, step: 'inference', batch: a.batch,
    threads: a.threads, steps: a.steps, warmup: a.warmup,
  };
  const ort = loadOrt();
  base.ort = ortVersion(ort);
  const session = await ort.InferenceSession.create(a.onnx, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const dims = [a.batch, ...a.shape];
  const n = dims.reduce((x, y) => x * y, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random(); // uniform [0, 1), as graphc bench feeds
  const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, dims) };
  for (let i = 0; i < a.warmup; i++) await session.run(feeds);
  const ts = [];
  for (let i = 0; i < a.steps; i++) {
    const t0 = process.hrtime.bigint();
    const out = await session.run(feeds);
    ts.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (i === 0) {
      const o = out[session.outputNames[0]];
      if (o.dims.length !== 2 || o.dims[0] !== a.batch) throw new Error(`unexpected output shape [${o.dims}]`);
    }
  }
  const med = median(ts);
  const r3 = (x) => Math.round(x * 1000) / 1000;
  console.log(JSON.stringify({
    ...base, ms: r3(med), min_ms: r3(Math.min(...ts)), max_ms: r3(Math.max(...ts)),
    images_per_s: Math.round((10 * 1e3 * a.batch) / med) / 10,
    max_rss_kb: Math.round(process.resourceUsage().maxRSS),
  }));
}

main().catch((e) => {
  const a = process.argv;
  const get = (k) => { const i = a.indexOf(`--${k}`); return i >= 0 ? a[i + 1] : undefined; };
  console.log(JSON.stringify({
    framework: 'onnxruntime', config: 'ort', model: get('model'), step: 'inference',
    batch: parseInt(get('batch'), 10), threads: parseInt(get('threads'), 10), error: String(e.message || e).slice(0, 300),
  }));
  process.exitCode = 1;
});
