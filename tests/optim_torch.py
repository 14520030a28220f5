#!/usr/bin/python3
"""The train block's optimizers against PyTorch 1.13 (tests/optim_torch.sh).

One model (x [B, 64] -> dense 256 relu -> dense 32 relu -> dense 10, cross entropy),
written in graphc and in PyTorch, trained for STEPS steps on the same weights (random,
written here as a graphc checkpoint) and the same batches, under each optimizer of the
train block with and without weight decay, with clipping by global norm on and off, and
with every learning-rate schedule:

  sgd(weight_decay=)               torch.optim.SGD(weight_decay=)
  sgd(momentum=, nesterov=)        ... momentum=, nesterov=
  adam(weight_decay=)              torch.optim.Adam (L2 weight decay)
  adamw(weight_decay=)             torch.optim.AdamW
  rmsprop(rho=, momentum=, centered=, weight_decay=)   torch.optim.RMSprop(alpha=rho, ...)
  clip_norm = X                    torch.nn.utils.clip_grad_norm_(params, X) before the step
  lr = step_decay(lr, every=, factor=)   StepLR(step_size=every, gamma=factor)
  lr = cosine(lr, steps=, min=)    CosineAnnealingLR(T_max=steps, eta_min=min)
  warmup = W                       SequentialLR([LinearLR(start_factor=1/W, total_iters=W-1),
                                                 the schedule], milestones=[W])

graphc's side is tests/optim_run, in the interpreter, the compiled plan without the
passes that round otherwise (exact) and with every pass (compiled).  The reference is
PyTorch in float64 on the float32 values, the hyperparameters too (graphc holds them in
float32: beta2 = 0.999 is 0.99900001287, and PyTorch's 1 - beta2 in double would be
1.3e-5 away from graphc's).  After the last step every parameter and
every optimizer state tensor is held to 1e-5 relative, |graphc - torch| <= 1e-5 |torch|
in the 2-norm over the tensor; PyTorch's own float32 run is printed beside, for scale.
Where the clip is set, the check also says on how many steps it engaged (the global
norm above it), and fails if on none.

    optim_torch.py OPTIM_RUN WORKDIR

Run it with Debian's /usr/bin/python3 (python3-torch).  Prints a PASS or FAIL line per
check and "N passed, M failed"; exit 1 on a failure.
"""
import os
import struct
import subprocess
import sys
import warnings
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TOL = 1e-5
STEPS = 12
BATCH = 16
FEATURES = 64
CLASSES = 10

MODEL = """\
model optim
input x: f32[B, 64]
input label: i32[B]
h = dense(x, units=256, activation="relu")
h2 = dense(h, units=32, activation="relu")
logits = dense(h2, units=10)
loss = cross_entropy(logits, label)
train {{
  data = synthetic(count=64)
  batch = 16
  minimize = loss
{train}
}}
"""

# graphc's name of each parameter, torch's, and whether torch holds it transposed
PARAMS = [("dense/kernel", "fc1.weight", True), ("dense/bias", "fc1.bias", False),
          ("dense_1/kernel", "fc2.weight", True), ("dense_1/bias", "fc2.bias", False),
          ("dense_2/kernel", "fc3.weight", True), ("dense_2/bias", "fc3.bias", False)]

lr_sched = torch.optim.lr_scheduler


def f32(v):
    """a hyperparameter as graphc holds it: float32 (0.999 is 0.99900001287...)"""
    return float(np.float32(v))


def hyper(kw):
    return {k: v if isinstance(v, bool) else f32(v) for k, v in kw.items()}


def sgd(**kw):
    return lambda p: torch.optim.SGD(p, **hyper(kw))


def adam(eps=1e-7, **kw):   # graphc's adam: Keras' eps
    return lambda p: torch.optim.Adam(p, betas=(f32(0.9), f32(0.999)), eps=f32(eps), **hyper(kw))


def adamw(eps=1e-8, **kw):
    return lambda p: torch.optim.AdamW(p, betas=(f32(0.9), f32(0.999)), eps=f32(eps), **hyper(kw))


def rmsprop(alpha=0.99, eps=1e-8, **kw):
    return lambda p: torch.optim.RMSprop(p, alpha=f32(alpha), eps=f32(eps), **hyper(kw))


def warmup(w, then=None):
    """warmup = w, then the schedule `then` (a function of the optimizer) if any"""
    def make(opt):
        lin = lr_sched.LinearLR(opt, start_factor=1 / w, end_factor=1.0, total_iters=w - 1)
        return lin if then is None else lr_sched.SequentialLR(opt, [lin, then(opt)], milestones=[w])
    return make


# (name, the train block's lines, the torch optimizer, the scheduler or None, clip or None)
CASES = [
    ("sgd weight_decay", "  optimizer = sgd(lr=0.05, weight_decay=0.01)",
     sgd(lr=0.05, weight_decay=0.01), None, None),
    ("sgd momentum weight_decay", "  optimizer = sgd(lr=0.05, momentum=0.9, weight_decay=0.01)",
     sgd(lr=0.05, momentum=0.9, weight_decay=0.01), None, None),
    ("sgd momentum weight_decay clip", "  optimizer = sgd(lr=0.05, momentum=0.9, weight_decay=0.01)\n  clip_norm = 0.5",
     sgd(lr=0.05, momentum=0.9, weight_decay=0.01), None, 0.5),
    ("sgd nesterov weight_decay step_decay",
     "  optimizer = sgd(momentum=0.9, nesterov=true, weight_decay=0.001)\n  lr = step_decay(0.05, every=4, factor=0.5)",
     sgd(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.001), lambda o: lr_sched.StepLR(o, 4, f32(0.5)), None),
    ("sgd momentum warmup", "  optimizer = sgd(lr=0.05, momentum=0.9)\n  warmup = 4",
     sgd(lr=0.05, momentum=0.9), warmup(4), None),
    ("adam weight_decay cosine", "  optimizer = adam(weight_decay=0.01)\n  lr = cosine(0.01, steps=12, min=0.001)",
     adam(lr=0.01, weight_decay=0.01), lambda o: lr_sched.CosineAnnealingLR(o, 12, eta_min=f32(0.001)), None),
    ("adam clip", "  optimizer = adam(lr=0.005)\n  clip_norm = 1.5", adam(lr=0.005), None, 1.5),
    ("adamw", "  optimizer = adamw(lr=0.01, weight_decay=0.1)", adamw(lr=0.01, weight_decay=0.1), None, None),
    ("adamw no decay", "  optimizer = adamw(lr=0.01, weight_decay=0)", adamw(lr=0.01, weight_decay=0.0), None, None),
    ("adamw warmup cosine clip",
     "  optimizer = adamw(weight_decay=0.1)\n  lr = cosine(0.01, steps=8)\n  warmup = 4\n  clip_norm = 0.3",
     adamw(lr=0.01, weight_decay=0.1), warmup(4, lambda o: lr_sched.CosineAnnealingLR(o, 8, eta_min=0.0)), 0.3),
    ("rmsprop", "  optimizer = rmsprop(lr=0.001)", rmsprop(lr=0.001), None, None),
    ("rmsprop momentum centered weight_decay clip",
     "  optimizer = rmsprop(lr=0.001, momentum=0.9, centered=true, weight_decay=0.01)\n  clip_norm = 0.2",
     rmsprop(lr=0.001, momentum=0.9, centered=True, weight_decay=0.01), None, 0.2),
    ("rmsprop centered warmup step_decay",
     "  optimizer = rmsprop(centered=true)\n  lr = step_decay(0.002, every=3)\n  warmup = 2",
     rmsprop(lr=0.002, centered=True), warmup(2, lambda o: lr_sched.StepLR(o, 3, f32(0.1))), None),
    ("rmsprop rho eps momentum weight_decay",
     "  optimizer = rmsprop(lr=0.003, rho=0.9, eps=1e-6, momentum=0.5, weight_decay=0.001)",
     rmsprop(lr=0.003, alpha=0.9, eps=1e-6, momentum=0.5, weight_decay=0.001), None, None),
]

# graphc's optimizer state (PARAM:SUFFIX) and torch's name for it, per optimizer
STATE = {torch.optim.SGD: {"velocity": "momentum_buffer"},
         torch.optim.Adam: {"m": "exp_avg", "v": "exp_avg_sq"},
         torch.optim.AdamW: {"m": "exp_avg", "v": "exp_avg_sq"},
         torch.optim.RMSprop: {"square_avg": "square_avg", "momentum_buffer": "momentum_buffer",
                               "grad_avg": "grad_avg"}}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 256), nn.Linear(256, 32), nn.Linear(32, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


# ---- graphc checkpoints (docs/checkpoint.md) ----------------------------------------

def write_ckpt(path, tensors):
    """tensors: [(name, float32 array)], every one a parameter"""
    head = b"GRAPHCKP" + struct.pack("<IIQQ", 1, len(tensors), 0, 42)
    out = [head, struct.pack("<I", zlib.crc32(head))]
    for name, a in tensors:
        rec = struct.pack("<I", len(name)) + name.encode() + struct.pack("<II", 0, a.ndim)
        rec += b"".join(struct.pack("<Q", d) for d in a.shape) + np.ascontiguousarray(a, "<f4").tobytes()
        out += [rec, struct.pack("<I", zlib.crc32(rec))]
    out.append(b"END.")
    with open(path, "wb") as f:
        f.write(b"".join(out))


def read_ckpt(path):
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"GRAPHCKP", path
    _, n, _, _ = struct.unpack_from("<IIQQ", b, 8)
    pos, out = 8 + 24 + 4, {}
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", b, pos)
        name = b[pos + 4:pos + 4 + ln].decode()
        pos += 4 + ln
        _, rank = struct.unpack_from("<II", b, pos)
        pos += 8
        dims = struct.unpack_from("<%dQ" % rank, b, pos)
        pos += 8 * rank
        count = int(np.prod(dims)) if rank else 1
        out[name] = np.frombuffer(b, "<f4", count, pos).reshape(dims).astype(np.float64)
        pos += 4 * count + 4
    return out


# ---- the two sides ------------------------------------------------------------------

def torch_run(init, xs, ys, make_opt, make_sched, clip, dtype):
    """STEPS steps of PyTorch in dtype; the parameters and optimizer state as graphc
    holds them (kernels [in, out]), and on how many steps the clip engaged"""
    net = Net().to(dtype)
    with torch.no_grad():
        for gname, tname, tr in PARAMS:
            t = torch.from_numpy(init[gname].astype(np.float64)).to(dtype)
            net.get_parameter(tname).copy_(t.T if tr else t)
    opt = make_opt(net.parameters())
    sched = make_sched(opt) if make_sched else None
    clipped = 0
    for s in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(net(torch.from_numpy(xs[s]).to(dtype)), torch.from_numpy(ys[s]).long())
        loss.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(net.parameters(), f32(clip))
            clipped += float(norm) > clip
        opt.step()
        if sched:
            sched.step()
    out = {}
    for gname, tname, tr in PARAMS:
        p = net.get_parameter(tname)
        out[gname] = (p.T if tr else p).detach().double().numpy()
        for suffix, key in STATE[type(opt)].items():
            st = opt.state[p].get(key)
            if torch.is_tensor(st) and st.dim() > 0:
                out[gname + ":" + suffix] = (st.T if tr else st).detach().double().numpy()
    return out, clipped


def rel_err(got, want):
    """|got - want| / |want| in the 2-norm over the tensor"""
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, msg):
        print(("PASS: " if ok else "FAIL: ") + msg)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: optim_torch.py OPTIM_RUN WORKDIR")
    optim_run, work = sys.argv[1], sys.argv[2]
    warnings.simplefilter("ignore")   # SequentialLR's step(0) is deprecated, and says so
    torch.set_num_threads(1)
    rng = np.random.RandomState(14)
    init = {"dense/kernel": rng.uniform(-0.15, 0.15, (64, 256)), "dense/bias": rng.uniform(-0.1, 0.1, 256),
            "dense_1/kernel": rng.uniform(-0.15, 0.15, (256, 32)), "dense_1/bias": rng.uniform(-0.1, 0.1, 32),
            "dense_2/kernel": rng.uniform(-0.4, 0.4, (32, 10)), "dense_2/bias": rng.uniform(-0.1, 0.1, 10)}
    init = {k: v.astype(np.float32) for k, v in init.items()}
    xs = rng.uniform(-1, 1, (STEPS, BATCH, FEATURES)).astype(np.float32)
    ys = rng.randint(0, CLASSES, (STEPS, BATCH)).astype(np.int32)
    ckpt_in, data = os.path.join(work, "init.ckpt"), os.path.join(work, "data.bin")
    write_ckpt(ckpt_in, [(g, init[g]) for g, _, _ in PARAMS])
    with open(data, "wb") as f:
        f.write(struct.pack("<III", STEPS, BATCH, FEATURES))
        for s in range(STEPS):
            f.write(xs[s].tobytes() + ys[s].astype("<i4").tobytes())
    rep = Report()
    for name, train, make_opt, make_sched, clip in CASES:
        net_path = os.path.join(work, "model.net")
        with open(net_path, "w") as f:
            f.write(MODEL.format(train=train))
        ref, clipped = torch_run(init, xs, ys, make_opt, make_sched, clip, torch.float64)
        f32, _ = torch_run(init, xs, ys, make_opt, make_sched, clip, torch.float32)
        if clip is not None:
            rep.check(clipped > 0, f"{name}: the clip engaged on {clipped} of {STEPS} steps")
        for mode in ("interp", "exact", "compiled"):
            out = os.path.join(work, mode + ".ckpt")
            r = subprocess.run([optim_run, net_path, ckpt_in, data, mode, out], capture_output=True, text=True)
            if r.returncode != 0:
                rep.check(False, f"{name} ({mode}): optim_run failed: {r.stderr.strip()}")
                continue
            got = read_ckpt(out)
            worst, worst_name = 0.0, ""
            missing = [k for k in ref if k not in got] + [k for k in got if k not in ref]
            for k in ref:
                if k in got:
                    e = rel_err(got[k], ref[k])
                    if e > worst:
                        worst, worst_name = e, k
            f32w = max(rel_err(f32[k], ref[k]) for k in ref)
            rep.check(not missing and worst <= TOL,
                      f"{name} ({mode}): {len(ref)} tensors after {STEPS} steps within {worst:.1e} of PyTorch's "
                      f"(worst {worst_name}; PyTorch float32: {f32w:.1e})"
                      + (f"; not on both sides: {missing}" if missing else ""))
    print(f"{rep.passed} passed, {rep.failed} failed")
    sys.exit(1 if rep.failed else 0)


if __name__ == "__main__":
    main()
