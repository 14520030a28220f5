#!/usr/bin/python3
"""Batch norm against PyTorch 1.13 (tests/bnorm_torch.sh).

Two models, each written in PyTorch by hand (NCHW) and in graphc (NHWC), on the same
weights (random, running statistics away from their initial values, written here as a
graphc checkpoint) and the same batch:
  - forms: batch norm after a convolution with a bias (then relu), after one without,
    after an add, on an input (then relu), after a dense layer, with other momenta and
    eps;
  - models/fashion-resnet.net (its PyTorch twin is bench/torch_bench.py's, with
    graphc's dropout mask).
graphc's side is tests/torch_step, in the interpreter and in the compiled plan: the
inference outputs (the running statistics of the checkpoint), then one training step
(the batch's statistics): its loss, every parameter's gradient, and the running mean
and variance after it.  The reference is PyTorch in float64 on the float32 values;
each within 1e-5 relative: the loss, the outputs and every tensor as |graphc - torch| <=
1e-5 |torch| in the 2-norm over the tensor (PyTorch's own float32 run is printed beside,
for scale).  A gradient that is zero in exact arithmetic (a bias before batch norm) is
held to 1e-5 of the model's largest gradient.  The batches are small (4 and 5): over
more values the chance grows that a relu or a max pool decides otherwise in float32 than
in float64 (PyTorch's own float32 gradients are then 1e-4 off), which says nothing of
either program.

    bnorm_torch.py TOP_SRCDIR GRAPHC TORCH_STEP WORKDIR

Run it with Debian's /usr/bin/python3 (python3-torch).  Prints a PASS or FAIL line per
check and "N passed, M failed"; exit 1 on a failure.
"""
import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TOL = 1e-5
SEED = 7          # the training step's seed (dropout's mask)
G64 = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1

FORMS_NET = """\
model forms
input x: f32[B, 6, 5, 3]
input label: i32[B]
h = relu(batch_norm(conv2d(x, filters=8, kernel=3, padding="same")))
r = batch_norm(conv2d(h, filters=8, kernel=3, padding="same", use_bias=false), momentum=0.9)
s = batch_norm(h + r, eps=0.01)
q = relu(batch_norm(x, momentum=0.5))
logits = dense(batch_norm(dense(flatten(s), units=7), momentum=0.8), units=4) + dense(flatten(q), units=4)
output probs = softmax(logits)
loss = cross_entropy(logits, label)
train { data = synthetic(count=8)
minimize = loss }
"""


def bn(c, momentum=0.99, eps=1e-3):
    """graphc's batch_norm(momentum=, eps=) (Keras' momentum: PyTorch's is 1 - it)."""
    return nn.BatchNorm2d(c, eps=eps, momentum=1 - momentum)


def nhwc_flat(x):
    """graphc's flatten of an NHWC image, from NCHW"""
    return x.permute(0, 2, 3, 1).flatten(1)


class Forms(nn.Module):
    """FORMS_NET, modules named as graphc's layers."""
    input_c = 3
    input_hw = (6, 5)

    def __init__(self):
        super().__init__()
        self.conv2d, self.batch_normalization = nn.Conv2d(3, 8, 3, padding=1), bn(8)
        self.conv2d_1, self.batch_normalization_1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), bn(8, momentum=0.9)
        self.batch_normalization_2 = bn(8, eps=0.01)
        self.batch_normalization_3 = bn(3, momentum=0.5)
        self.dense, self.batch_normalization_4 = nn.Linear(6 * 5 * 8, 7), nn.BatchNorm1d(7, eps=1e-3, momentum=0.2)
        self.dense_1, self.dense_2 = nn.Linear(7, 4), nn.Linear(6 * 5 * 3, 4)

    def forward(self, x):
        h = F.relu(self.batch_normalization(self.conv2d(x)))
        s = self.batch_normalization_2(h + self.batch_normalization_1(self.conv2d_1(h)))
        q = F.relu(self.batch_normalization_3(x))
        return self.dense_1(self.batch_normalization_4(self.dense(nhwc_flat(s)))) + self.dense_2(nhwc_flat(q))


# ---------------------------------------------------------------- graphc's side

def graph_vars(graphc, net):
    dump = subprocess.run([graphc, "dump", net, "--stage", "graph", "--format", "json"], check=True,
                          capture_output=True, text=True).stdout
    return json.loads(dump)["vars"]


def module_tensor(model, name):
    """The PyTorch tensor of graphc var `name`, and how graphc lays it out from it."""
    layer, kind = name.split("/")
    m = getattr(model, layer)
    t = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
         "moving_variance": "running_var"}[kind]
    tensor = getattr(m, t)
    if kind == "kernel":
        return tensor, (lambda a: a.transpose(2, 3, 1, 0)) if tensor.dim() == 4 else (lambda a: a.T)
    return tensor, lambda a: a


def random_weights(gvars, rng):
    """Random values for every var, running statistics away from 0 and 1."""
    w = {}
    for v in gvars:
        shape, name = v["shape"], v["name"]
        if name.endswith("moving_variance"):
            a = rng.uniform(0.5, 2.0, shape)
        elif name.endswith("gamma"):
            a = rng.uniform(0.5, 1.5, shape)
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[:-1]))
            a = rng.normal(0, 1.0 / np.sqrt(fan_in), shape)
        else:
            a = rng.uniform(-0.5, 0.5, shape)
        w[name] = a.astype(np.float32)
    return w


def write_checkpoint(path, gvars, w):
    """docs/checkpoint.md: magic, version 1, tensors, step, seed, header CRC; each
    tensor's name, role, dims and data with its CRC; "END."."""
    roles = {"param": 0, "state": 1, "buffer": 2}
    head = b"GRAPHCKP" + struct.pack("<IIQQ", 1, len(gvars), 0, 1)
    out = [head, struct.pack("<I", zlib.crc32(head))]
    for v in gvars:
        name = v["name"].encode()
        rec = struct.pack("<I", len(name)) + name + struct.pack("<II", roles[v["role"]], len(v["shape"]))
        rec += b"".join(struct.pack("<Q", d) for d in v["shape"]) + w[v["name"]].astype("<f4").tobytes()
        out += [rec, struct.pack("<I", zlib.crc32(rec))]
    with open(path, "wb") as f:
        f.write(b"".join(out) + b"END.")


def run_graphc(torch_step, net, ckpt, batch, work, mode):
    subprocess.run([torch_step, net, ckpt, str(batch), work, mode, str(SEED)], check=True)

    def read(what, name=None):
        f = f"{work}/{mode}.{what}" + (f".{name.replace('/', '.')}" if name else "") + ".bin"
        return np.fromfile(f, dtype="<f4")
    return read


# ---------------------------------------------------------------- PyTorch's side

def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def dropout_mask(shape, rate, stream, seed=SEED, step=0):
    """graphc's mask (util/rng.h, kernels/elem.c dropout_apply): element i of the tensor
    (row-major) is kept iff its uniform is >= rate; kept values times float(1/(1-rate))."""
    key = mix((mix(seed ^ mix((step + 0x51ED270B27A5A1) & M64)) + G64 * (stream + 1)) & M64)
    n = int(np.prod(shape))
    u = np.array([(mix((key + G64 * (i + 1)) & M64) >> 40) * 2.0 ** -24 for i in range(n)])
    scale = float(np.float32(1) / (np.float32(1) - np.float32(rate)))
    return torch.tensor(np.where(u >= rate, scale, 0.0).reshape(shape))


class MaskDropout(nn.Module):
    def __init__(self, rate):
        super().__init__()
        self.rate = rate

    def forward(self, x):
        return x * dropout_mask(tuple(x.shape), self.rate, 0).to(x.dtype) if self.training else x


def torch_reference(model, gvars, w, x, labels, dtype):
    """(eval-mode outputs, loss, {var: gradient}, {buffer: after the step}), graphc's layouts."""
    model = model.to(dtype)
    load(model, gvars, w, dtype)
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).to(dtype)
    yt = torch.from_numpy(labels.astype(np.int64))
    model.eval()
    with torch.no_grad():
        probs = F.softmax(model(xt), dim=1).numpy()
    model.train()
    loss = F.cross_entropy(model(xt), yt)
    loss.backward()
    grads, after = {}, {}
    for v in gvars:
        t, lay = module_tensor(model, v["name"])
        if v["role"] == "param":
            grads[v["name"]] = lay(t.grad.detach().numpy())
        else:
            after[v["name"]] = lay(t.detach().numpy())
    return probs, float(loss), grads, after


def load(model, gvars, w, dtype):
    """graphc's values into the model's tensors (HWIO -> OIHW, [in, out] -> [out, in])."""
    with torch.no_grad():
        for v in gvars:
            t, _ = module_tensor(model, v["name"])
            a = w[v["name"]]
            if a.ndim == 4:
                a = a.transpose(3, 2, 0, 1)
            elif a.ndim == 2:
                a = a.T
            t.copy_(torch.from_numpy(np.ascontiguousarray(a)).to(dtype))


# ---------------------------------------------------------------- checks

class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what):
        print(("PASS: " if ok else "FAIL: ") + what)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def norm(a):
    return float(np.linalg.norm(np.asarray(a, np.float64).ravel()))


def rel_err(got, want, scale=None):
    """|got - want| / |want| over the tensor (2-norms), or / scale when given"""
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    if got.shape != want.shape:
        return float("inf")
    return norm(got - want) / max(scale if scale is not None else norm(want), 1e-300)


def compare(rep, name, model_fn, net, gvars, batch, torch_step, work, rng):
    w = random_weights(gvars, rng)
    m = model_fn()
    x = rng.uniform(0, 1, (batch, *m.input_hw, m.input_c)).astype(np.float32)
    labels = rng.integers(0, 4, batch).astype(np.int32)
    x.tofile(f"{work}/in.{'image' if name == 'fashion-resnet' else 'x'}.bin")
    labels.tofile(f"{work}/in.label.bin")
    ckpt = f"{work}/{name}.ckpt"
    write_checkpoint(ckpt, gvars, w)
    ref = torch_reference(model_fn(), gvars, w, x, labels, torch.float64)
    f32 = torch_reference(model_fn(), gvars, w, x, labels, torch.float32)
    for mode in ("interp", "compiled"):
        read = run_graphc(torch_step, net, ckpt, batch, work, mode)
        tag = f"{name}, {mode}"
        e = rel_err(read("out", "probs"), ref[0])
        rep.check(e <= TOL, f"{tag}: inference outputs within {e:.1e} (PyTorch float32: {rel_err(f32[0], ref[0]):.1e})")
        e = abs(float(read("loss")[0]) - ref[1]) / abs(ref[1])
        rep.check(e <= TOL, f"{tag}: the training step's loss {float(read('loss')[0]):.7f}, PyTorch {ref[1]:.7f}, "
                            f"within {e:.1e}")
        # a gradient that is zero in exact arithmetic (a bias before batch norm, which
        # takes the mean off) is held to the model's largest gradient instead
        big = max(norm(g) for g in ref[2].values())
        worst, worst_name, zeros = 0.0, "", 0
        for v in gvars:
            param = v["role"] == "param"
            got, want = read("grad" if param else "buffer", v["name"]), (ref[2] if param else ref[3])[v["name"]]
            zero = param and norm(want) < 1e-9 * big
            zeros += zero
            e = rel_err(got, want, big if zero else None)
            if e > worst:
                worst, worst_name = e, v["name"]
            if e > TOL:
                rep.check(False, f"{tag}: {v['name']}: {'gradient' if param else 'after the step'} off by {e:.1e}"
                                 f"{' of the largest gradient (zero in exact arithmetic)' if zero else ''}")
        nparams = sum(v["role"] == "param" for v in gvars)
        f32w = max(rel_err((f32[2] if v["role"] == "param" else f32[3])[v["name"]],
                           (ref[2] if v["role"] == "param" else ref[3])[v["name"]],
                           big if v["role"] == "param" and norm(ref[2][v["name"]]) < 1e-9 * big else None)
                   for v in gvars)
        rep.check(worst <= TOL, f"{tag}: {nparams} gradients ({zeros} zero in exact arithmetic) and "
                                f"{len(gvars) - nparams} running statistics after the step, the worst {worst_name} "
                                f"within {worst:.1e} (PyTorch float32: {f32w:.1e})")


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    top, graphc, torch_step, work = sys.argv[1:]
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(top, "bench"))
    import torch_bench
    rng = np.random.default_rng(2026)
    rep = Report()
    forms = f"{work}/forms.net"
    with open(forms, "w") as f:
        f.write(FORMS_NET)
    compare(rep, "forms", Forms, forms, graph_vars(graphc, forms), 5, torch_step, work, rng)

    def fashion():
        m = torch_bench.FashionResNet()
        m.dropout = MaskDropout(0.3)
        return m
    net = os.path.join(top, "models", "fashion-resnet.net")
    compare(rep, "fashion-resnet", fashion, net, graph_vars(graphc, net), 4, torch_step, work, rng)
    print(f"{rep.passed} passed, {rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
