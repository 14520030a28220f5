#!/usr/bin/python3
"""graphc's transformer ops and models/charlm.net against PyTorch (tests/torch_ops.sh).

Each case is a small .net model with a loss and the same computation written with
torch.nn.functional.  tests/torch_run makes graphc's training step of the model, runs it
on weights and inputs drawn from a seed, and writes them with the loss and every
parameter's gradient (raw files and a manifest; see tests/torch_run.c).  Here PyTorch
takes the same weights and inputs, computes the loss in float32 and differentiates it;
the loss and each gradient must agree within 1e-5 relative: |graphc - torch| <= 1e-5 *
max |torch| over the tensor (the scale of a tensor's rounding errors is its largest
entries, not each one).  Each case runs at two batch sizes, 1 and 3.

    torch_ops.py TORCH_RUN TOP_SRCDIR WORKDIR

Run it with Debian's /usr/bin/python3 (python3-torch).  Prints one line per case and
batch; exits 1 if any fails.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOL = 1e-5
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)


# ---- helpers: graphc's layers written with torch.nn.functional ----------------------

def dense(x, P, name, act=None):
    """graphc's dense over the last axis: x @ kernel + bias (Keras' names)."""
    y = x @ P[name + "/kernel"] + P[name + "/bias"]
    return act(y) if act else y


def layer_norm(x, P, name, axes=1, eps=1e-3):
    shape = x.shape[-axes:]
    return F.layer_norm(x, shape, P[name + "/gamma"], P[name + "/beta"], eps)


def mha(x, P, name, heads, causal, dk=None):
    """Keras' MultiHeadAttention (self-attention) with graphc's parameter layout: query,
    key, value kernels [D, heads, dk] and biases [heads, dk]; attention_output kernel
    [heads, dk, D] and bias [D]; q scaled by 1/sqrt(dk); masked scores -1e9."""
    B, T, D = x.shape
    dk = dk or D // heads

    def proj(part):
        w = P[f"{name}/{part}/kernel"].reshape(D, heads * dk)
        b = P[f"{name}/{part}/bias"].reshape(heads * dk)
        return (x @ w + b).reshape(B, T, heads, dk).transpose(1, 2)

    q, k, v = proj("query") / math.sqrt(dk), proj("key"), proj("value")
    s = q @ k.transpose(-1, -2)
    if causal:
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        s = s.masked_fill(mask, -1e9)
    o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, heads * dk)
    return o @ P[f"{name}/attention_output/kernel"].reshape(heads * dk, D) + P[f"{name}/attention_output/bias"]


def seq_ce(logits, labels, smoothing=0.0):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), label_smoothing=smoothing)


# ---- the cases: (name, .net text without the train block, torch loss) ----------------

CASES = []


def case(name, net):
    def add(fn):
        CASES.append((name, net, fn))
        return fn
    return add


@case("layout", """
input x: f32[B, 4, 6]
input y: i32[B]
param W: f32[4, 6] = zeros()
h = tanh(x * W)
q, k, v = split(h, 3, axis=-1)
t = transpose(q, perm=[0, 2, 1]) * 2 + permute(k, 0, 2, 1)
r = permute(reshape(h, B, 2, 2, 6), 0, 2, 3, 1)
u = h[:, 1:3, -4:] * slice(h, axis=2, start=0, end=4)[:, 0:2]
w = concat(v, h[:, :, 2:4], axis=1) + reshape(h[:, 3, 0:2], B, 1, 2) * 0.5
z = dense(reshape(t, B, -1), units=3) + dense(reshape(r, B, -1), units=3) + dense(reshape(u, B, -1), units=3) + dense(reshape(w, B, -1), units=3)
loss = cross_entropy(z, y)
""")
def _layout(P, I):
    x, B = I["x"], I["x"].shape[0]
    h = torch.tanh(x * P["W"])
    q, k, v = torch.split(h, 2, dim=-1)
    t = q.permute(0, 2, 1) * 2 + k.permute(0, 2, 1)
    r = h.reshape(B, 2, 2, 6).permute(0, 2, 3, 1)
    u = h[:, 1:3, -4:] * h[:, :, 0:4][:, 0:2]
    w = torch.cat([v, h[:, :, 2:4]], dim=1) + h[:, 3, 0:2].reshape(B, 1, 2) * 0.5
    z = (dense(t.reshape(B, -1), P, "dense") + dense(r.reshape(B, -1), P, "dense_1") + dense(u.reshape(B, -1), P, "dense_2")
         + dense(w.reshape(B, -1), P, "dense_3"))
    return F.cross_entropy(z, I["y"].long())


@case("batch_matmul", """
input x: f32[B, 2, 3, 4]
input y: i32[B]
param P: f32[2, 3, 4] = zeros()
a = tanh(x + P)
b = sigmoid(x * P)
c = batch_matmul(a, b, transpose_b=true)
d = batch_matmul(a, b, transpose_a=true)
e = batch_matmul(c, a)
f = batch_matmul(d, a, transpose_a=true, transpose_b=true)
z = dense(reshape(e, B, -1), units=3) + dense(reshape(f, B, -1), units=3)
loss = cross_entropy(z, y)
""")
def _batch_matmul(P, I):
    x, B = I["x"], I["x"].shape[0]
    a, b = torch.tanh(x + P["P"]), torch.sigmoid(x * P["P"])
    c = a @ b.transpose(-1, -2)
    d = a.transpose(-1, -2) @ b
    e = c @ a
    f = d.transpose(-1, -2) @ a.transpose(-1, -2)
    z = dense(e.reshape(B, -1), P, "dense") + dense(f.reshape(B, -1), P, "dense_1")
    return F.cross_entropy(z, I["y"].long())


@case("reductions_softmax", """
input x: f32[B, 3, 4]
input t: f32[B, 3]
param P: f32[3, 4] = zeros()
h = tanh(x + P) * 2
a = sum(h, axis=0) + mean(h, axis=1, keepdims=true) + max(h, axis=2, keepdims=true)
b = max(h, axis=[0, 1]) + sum(h, axis=[1, 2], keepdims=true) + mean(h) + max(h)
c = softmax(h, axis=0) + log_softmax(h, axis=1) + softmax(h, axis=-1) + log_softmax(h)
d = max(c * a + b, axis=2) + mean(a, axis=-1)
loss = mse(d, t)
""")
def _reductions(P, I):
    h = torch.tanh(I["x"] + P["P"]) * 2
    a = h.sum(0) + h.mean(1, keepdim=True) + h.amax(2, keepdim=True)
    b = h.amax((0, 1)) + h.sum((1, 2), keepdim=True) + h.mean() + h.amax()
    c = torch.softmax(h, 0) + torch.log_softmax(h, 1) + torch.softmax(h, -1) + torch.log_softmax(h, -1)
    d = (c * a + b).amax(2) + a.mean(-1)
    return F.mse_loss(d, I["t"])


@case("elementwise_masks", """
input x: f32[B, 4, 4]
input t: f32[B, 4, 4]
param P: f32[4, 4] = zeros()
param Q: f32[4] = zeros()
h = x * 2 - 1 + P
a = pow(sigmoid(h) + 0.5, Q + 1) + max(h, P * 0.5) - min(h, 0.25) + clip(h, min=-0.6, max=0.4)
b = softplus(h) * gelu(h, approximate="tanh") + where(greater(P, 0), h, a) + where(less(x, 0.5), 1, h)
c = softmax(causal_mask(a + b), axis=-1) + causal_mask(b, value=0) + gelu(a)
loss = binary_cross_entropy(c, t)
""")
def _elementwise(P, I):
    x, Pm = I["x"], P["P"]
    h = x * 2 - 1 + Pm
    a = torch.pow(torch.sigmoid(h) + 0.5, P["Q"] + 1) + torch.maximum(h, Pm * 0.5) - torch.clamp(h, max=0.25) \
        + torch.clamp(h, -0.6, 0.4)
    b = F.softplus(h) * F.gelu(h, approximate="tanh") + torch.where(Pm > 0, h, a) + torch.where(x < 0.5, torch.ones_like(h), h)
    mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    c = torch.softmax((a + b).masked_fill(mask, -1e9), -1) + b.masked_fill(mask, 0.0) + F.gelu(a)
    return F.binary_cross_entropy_with_logits(c, I["t"])


@case("embedding_norm", """
input ids: i32[B, 5]
input y: i32[B, 5]
param pos: f32[5, 6] = zeros()
h = embedding(ids, vocab=4, dim=6) * 4 + pos
h = layer_norm(h, eps=1e-5)
g = layer_norm(reshape(h, B, 5, 2, 3), axis=[-2, -1])
h = h + reshape(g, B, 5, 6) * h
loss = cross_entropy(dense(h, units=4), y, label_smoothing=0.1)
""")
def _embedding_norm(P, I):
    B = I["ids"].shape[0]
    h = F.embedding(I["ids"].long(), P["embedding/embeddings"]) * 4 + P["pos"]
    h = layer_norm(h, P, "layer_normalization", eps=1e-5)
    g = layer_norm(h.reshape(B, 5, 2, 3), P, "layer_normalization_1", axes=2)
    h = h + g.reshape(B, 5, 6) * h
    return seq_ce(dense(h, P, "dense"), I["y"], 0.1)


@case("attention", """
input ids: i32[B, 4]
input y: i32[B, 4]
h = embedding(ids, vocab=3, dim=8) * 3
a = multi_head_attention(h, heads=2, causal=true)
b = multi_head_attention(h + a, heads=4, dim=3)
loss = cross_entropy(dense(h + a + b, units=3), y)
""")
def _attention(P, I):
    h = F.embedding(I["ids"].long(), P["embedding/embeddings"]) * 3
    a = mha(h, P, "multi_head_attention", 2, True)
    b = mha(h + a, P, "multi_head_attention_1", 4, False, dk=3)
    return seq_ce(dense(h + a + b, P, "dense"), I["y"])


def charlm(P, I):
    """models/charlm.net: embedding and learned positions, three pre-norm blocks of
    causal attention and a GELU MLP (the tanh form), a layer norm and the output layer."""
    h = F.embedding(I["ids"].long(), P["embedding/embeddings"]) + P["pos"]
    for blk in range(3):
        a, m = 2 * blk, 2 * blk + 1
        h = h + mha(layer_norm(h, P, ln(a)), P, "multi_head_attention" + ("_%d" % blk if blk else ""), 4, True)
        gelu = lambda x: F.gelu(x, approximate="tanh")
        h = h + dense(dense(layer_norm(h, P, ln(m)), P, dn(2 * blk), gelu), P, dn(2 * blk + 1))
    return seq_ce(dense(layer_norm(h, P, ln(6)), P, dn(6)), I["next"])


def ln(k):
    return "layer_normalization" + ("_%d" % k if k else "")


def dn(k):
    return "dense" + ("_%d" % k if k else "")


# ---- running and comparing -------------------------------------------------------------

def load(workdir, kind, k, ext, shape):
    data = np.fromfile(os.path.join(workdir, "%s.%d.%s" % (kind, k, ext)), dtype=np.int32 if ext == "i32" else np.float32)
    return torch.from_numpy(data.reshape(shape).copy())


def rel(graphc, ref, largest=0.0):
    """max |graphc - ref| over max |ref|, or over `largest` when ref is below TOL of it."""
    scale = float(ref.abs().max())
    if scale < TOL * largest:
        scale = largest
    return float((graphc - ref).abs().max()) / (scale if scale > 0 else 1.0)


def compare(torch_run, net, fn, batch, workdir):
    """The worst relative difference over the loss and the gradients, what it was, and
    how many gradients.  A gradient zero in exact arithmetic (attention's key bias:
    softmax does not see a constant added to a row of scores) is rounding noise in both
    programs: one whose largest entry is below TOL times the model's largest gradient is
    held to TOL of that instead of its own."""
    os.makedirs(workdir, exist_ok=True)
    subprocess.run([torch_run, net, str(batch), "7", workdir], check=True)
    with open(os.path.join(workdir, "manifest.json")) as f:
        man = json.load(f)
    P = {p["name"]: load(workdir, "param", p["k"], "f32", p["shape"]).requires_grad_(True) for p in man["params"]}
    I = {i["name"]: load(workdir, "in", i["k"], "i32" if i["dtype"] == "i32" else "f32", i["shape"]) for i in man["inputs"]}
    loss = fn(P, I)
    loss.backward()
    worst = rel(load(workdir, "loss", 0, "f32", []), loss.detach())
    what = "loss"
    refs = {p["name"]: P[p["name"]].grad if P[p["name"]].grad is not None else torch.zeros_like(P[p["name"]])
            for p in man["params"]}
    largest = max(float(r.abs().max()) for r in refs.values())
    for p in man["params"]:
        ref = refs[p["name"]]
        if not p["grad"]:   # graphc found no path from it to the loss: torch must agree
            r = float(ref.abs().max())
        else:
            r = rel(load(workdir, "grad", p["k"], "f32", p["shape"]), ref, largest)
        if not r <= worst:
            worst, what = r, p["name"]
    return worst, what, len(man["params"])


def main():
    torch_run, srcdir, workdir = sys.argv[1:4]
    runs = [(name, None, net, fn) for name, net, fn in CASES]
    runs.append(("charlm", os.path.join(srcdir, "models", "charlm.net"), None, charlm))
    failed = 0
    for name, path, net, fn in runs:
        if path is None:
            path = os.path.join(workdir, name + ".net")
            with open(path, "w") as f:
                f.write(net.lstrip() + "train { data = synthetic(count=8)\nminimize = loss }\n")
        for batch in (1, 3):
            worst, what, n = compare(torch_run, path, fn, batch, os.path.join(workdir, "%s-%d" % (name, batch)))
            ok = worst <= TOL
            failed += not ok
            print("%s: %s at batch %d, the loss and %d gradients within %.1e relative of PyTorch %s (worst: %s)"
                  % ("PASS" if ok else "FAIL", name, batch, n, worst, torch.__version__, what))
    print("%d passed, %d failed" % (2 * len(runs) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
