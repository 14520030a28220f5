#!/usr/bin/env node
// ONNX Runtime's side of tests/onnx.sh: runs MODEL.onnx on the inputs tests/onnx_run
// wrote (PREFIX.json, PREFIX.in.NAME.f32) and compares each output with graphc's
// (PREFIX.out.NAME.f32): |ort - graphc| <= TOL for every element.
//
//   node tests/onnx_ort.js MODEL.onnx PREFIX TOL
//
// Prints one line per output with the largest difference; exit 0 when all are within
// TOL, 1 when one is not, 77 (automake's skip) when onnxruntime-node is not installed
// (bench/: ONNXRUNTIME_NODE_INSTALL=skip npm ci).
'use strict';

const fs = require('fs');
const path = require('path');

function loadOrt() {
  for (const p of [path.join(__dirname, '..', 'bench', 'node_modules', 'onnxruntime-node'), 'onnxruntime-node']) {
    try {
      return require(p);
    } catch (e) { /* next */ }
  }
  return null;
}

function readF32(file, count) {
  const b = fs.readFileSync(file);
  if (b.length !== count * 4) throw new Error(`${file}: ${b.length} bytes, expected ${count * 4}`);
  return new Float32Array(b.buffer, b.byteOffset, count);
}

async function main() {
  const [model, prefix, tolArg] = process.argv.slice(2);
  if (!tolArg) throw new Error('usage: onnx_ort.js MODEL.onnx PREFIX TOL');
  const tol = parseFloat(tolArg);
  const ort = loadOrt();
  if (!ort) {
    console.log('SKIP: onnxruntime-node is not installed (cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm ci)');
    process.exit(77);
  }
  const meta = JSON.parse(fs.readFileSync(`${prefix}.json`, 'utf8'));
  const session = await ort.InferenceSession.create(model, { executionProviders: ['cpu'] });
  const feeds = {};
  for (const inp of meta.inputs) {
    const n = inp.dims.reduce((a, b) => a * b, 1);
    const data = readF32(`${prefix}.in.${inp.name}.f32`, n);
    feeds[inp.name] = inp.type === 'int32' ? new ort.Tensor('int32', new Int32Array(data.buffer, data.byteOffset, n), inp.dims)
                                           : new ort.Tensor('float32', data, inp.dims);
  }
  const names = session.inputNames.slice().sort().join(',');
  const want = Object.keys(feeds).sort().join(',');
  if (names !== want) throw new Error(`the ONNX model's inputs are ${names}, graphc's ${want}`);
  const out = await session.run(feeds);
  let ok = true;
  for (const o of meta.outputs) {
    const t = out[o.name];
    if (!t) throw new Error(`the ONNX model has no output '${o.name}'`);
    if (t.dims.join(',') !== o.dims.join(',')) throw new Error(`output ${o.name}: ONNX Runtime [${t.dims}], graphc [${o.dims}]`);
    const n = o.dims.reduce((a, b) => a * b, 1);
    const g = readF32(`${prefix}.out.${o.name}.f32`, n);
    let worst = 0, at = 0;
    for (let i = 0; i < n; i++) {
      const d = Math.abs(t.data[i] - g[i]);
      if (!(d <= worst)) { worst = d; at = i; }
    }
    const pass = worst <= tol;
    ok = ok && pass;
    console.log(`${pass ? 'ok' : 'FAIL'}: ${path.basename(model)} ${o.name} [${o.dims}]: max |ort - graphc| = ${worst.toExponential(2)}` +
                ` at ${at} (ort ${t.data[at]}, graphc ${g[at]}), tolerance ${tol}`);
  }
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  console.log(`FAIL: ${e.message || e}`);
  process.exit(1);
});
