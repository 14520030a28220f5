#!/usr/bin/python3
"""PyTorch side of bench/compare.sh: the same networks as models/mnist.net,
models/large.net, models/fashion-resnet.net and models/charlm.net, timed step by step
like `graphc bench`.

Run it with Debian's /usr/bin/python3 (python3-torch 1.13), not a pyenv python.

  torch_bench.py verify --model M --graph-json DUMP.json --expect-params N
      build the network, compare its parameter count and every conv/pool/dense
      output shape with graphc's (`graphc dump M.net --stage graph --format json`);
      exit 1 on any mismatch.
  torch_bench.py run --model M --step training|inference --batch B --steps N
      --warmup W --threads T --configs eager,channels_last,script,optimized
      [--tag NAME]
      one JSON object per configuration on stdout: the median ms per step.
  torch_bench.py export --model M --out FILE.onnx
      the inference network (NCHW, softmax output, dynamic batch, opset 13) for
      ort_bench.js.

The step timed is what graphc's training step does: forward, cross-entropy loss
(per token for charlm), backward, the model's train block's optimizer's update (SGD;
AdamW for fashion-resnet, Adam for charlm) and the accuracy metric; inference is eval mode under torch.no_grad(), the output being
softmax(logits) as in graphc's inference graph (batch norm with its running
statistics; optimize_for_inference folds it into the convolutions).
"""
import argparse
import json
import math
import os
import re
import resource
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- the networks

class Mnist(nn.Module):
    """models/mnist.net.  graphc pads "same" the Keras way: for a 5x5 kernel at
    stride 1 that is 2 on every side, which Conv2d(padding=2) does."""

    input_hw = (28, 28)
    input_c = 1

    def __init__(self):
        super().__init__()
        self.conv2d = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2d_1 = nn.Conv2d(32, 64, 5, padding=2)
        self.dense = nn.Linear(7 * 7 * 64, 1024)
        self.dropout = nn.Dropout(0.4)
        self.dense_1 = nn.Linear(1024, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv2d(x)), 2, 2)
        h = F.max_pool2d(F.relu(self.conv2d_1(h)), 2, 2)
        h = F.relu(self.dense(torch.flatten(h, 1)))
        h = self.dropout(h)
        return self.dense_1(h)

    def shapes(self, x):
        """(layer, NHWC shape) of each layer output graphc also names, in order."""
        out = []
        h = self.conv2d(x); out.append(("conv2d", h, conv_win(self.conv2d)))
        h = F.max_pool2d(F.relu(h), 2, 2); out.append(("maxpool", h, (2, 2, 2, 2, 0, 0, 0, 0)))
        h = self.conv2d_1(h); out.append(("conv2d", h, conv_win(self.conv2d_1)))
        h = F.max_pool2d(F.relu(h), 2, 2); out.append(("maxpool", h, (2, 2, 2, 2, 0, 0, 0, 0)))
        h = self.dense(torch.flatten(h, 1)); out.append(("matmul", h, None))
        h = self.dense_1(F.relu(h)); out.append(("matmul", h, None))
        return out


class Large(nn.Module):
    """models/large.net.  The first convolution is 3x3 at stride 2 with "same"
    padding on a 1080x1920 image: TensorFlow's rule pads 0 before and 1 after on
    each axis (graphc: same(0,1,0,1)).  Conv2d(padding=1) would give the same
    output size but windows shifted by one pixel, so the pad is explicit (F.pad,
    which costs a copy of the input each step, in the ONNX export too: a Pad node
    that ONNX Runtime 1.30 keeps)."""

    input_hw = (1080, 1920)
    input_c = 3

    def __init__(self):
        super().__init__()
        self.conv2d = nn.Conv2d(3, 8, 3, stride=2, padding=0)
        self.conv2d_1 = nn.Conv2d(8, 16, 3, padding=1)
        self.dense = nn.Linear(33 * 60 * 16, 64)
        self.dense_1 = nn.Linear(64, 10)

    def forward(self, x):
        h = F.relu(self.conv2d(F.pad(x, (0, 1, 0, 1))))
        h = F.max_pool2d(h, 4, 4)
        h = F.max_pool2d(F.relu(self.conv2d_1(h)), 4, 4)
        h = F.relu(self.dense(torch.flatten(h, 1)))
        return self.dense_1(h)

    def shapes(self, x):
        out = []
        h = self.conv2d(F.pad(x, (0, 1, 0, 1))); out.append(("conv2d", h, conv_win(self.conv2d, (0, 1, 0, 1))))
        h = F.max_pool2d(F.relu(h), 4, 4); out.append(("maxpool", h, (4, 4, 4, 4, 0, 0, 0, 0)))
        h = self.conv2d_1(h); out.append(("conv2d", h, conv_win(self.conv2d_1)))
        h = F.max_pool2d(F.relu(h), 4, 4); out.append(("maxpool", h, (4, 4, 4, 4, 0, 0, 0, 0)))
        h = self.dense(torch.flatten(h, 1)); out.append(("matmul", h, None))
        h = self.dense_1(F.relu(h)); out.append(("matmul", h, None))
        return out


class FashionResNet(nn.Module):
    """models/fashion-resnet.net.  Its batch norm is Keras': momentum 0.99 (PyTorch's
    0.01: the weight of the batch), eps 0.001; both keep the running variance with
    Bessel's correction.  Modules are named as graphc names the layers, so
    conv2d_3.weight is conv2d_3/kernel (OIHW here, HWIO there); tests/bnorm_torch.py
    maps them so, and gives self.dropout graphc's mask."""

    input_hw = (28, 28)
    input_c = 1
    optimizer = "adamw"   # the train block's: adamw(weight_decay=0.05)
    # (in, out, kernel) of conv2d_i, each followed by batch_normalization_i
    CONVS = [(1, 32, 3), (32, 32, 3), (32, 32, 3), (32, 64, 3), (64, 64, 3), (32, 64, 1), (64, 128, 3),
             (128, 128, 3), (64, 128, 1)]

    def __init__(self):
        super().__init__()
        for i, (cin, cout, k) in enumerate(self.CONVS):
            self.add_module(layer_name("conv2d", i), nn.Conv2d(cin, cout, k, padding=k // 2, bias=False))
            self.add_module(layer_name("batch_normalization", i), nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))
        self.dropout = nn.Dropout(0.3)
        self.dense = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.batch_normalization(self.conv2d(x)))
        r = self.batch_normalization_2(self.conv2d_2(F.relu(self.batch_normalization_1(self.conv2d_1(x)))))
        x = F.max_pool2d(F.relu(x + r), 2, 2)
        r = self.batch_normalization_4(self.conv2d_4(F.relu(self.batch_normalization_3(self.conv2d_3(x)))))
        x = F.max_pool2d(F.relu(self.batch_normalization_5(self.conv2d_5(x)) + r), 2, 2)
        r = self.batch_normalization_7(self.conv2d_7(F.relu(self.batch_normalization_6(self.conv2d_6(x)))))
        x = F.relu(self.batch_normalization_8(self.conv2d_8(x)) + r)
        return self.dense(self.dropout(torch.mean(x, dim=(2, 3))))

    def shapes(self, x):
        """forward's conv2d, maxpool and matmul outputs, in graphc's order of lines"""
        out = []

        def cbn(i, h):
            conv = getattr(self, layer_name("conv2d", i))
            y = conv(h)
            out.append(("conv2d", y, conv_win(conv)))
            return getattr(self, layer_name("batch_normalization", i))(y)

        def pool(h):
            y = F.max_pool2d(h, 2, 2)
            out.append(("maxpool", y, (2, 2, 2, 2, 0, 0, 0, 0)))
            return y
        x = F.relu(cbn(0, x))
        x = pool(F.relu(x + cbn(2, F.relu(cbn(1, x)))))
        r = cbn(4, F.relu(cbn(3, x)))
        x = pool(F.relu(cbn(5, x) + r))
        r = cbn(7, F.relu(cbn(6, x)))
        x = F.relu(cbn(8, x) + r)
        out.append(("matmul", self.dense(torch.mean(x, dim=(2, 3))), None))
        return out


class CharBlock(nn.Module):
    """one pre-norm block of models/charlm.net: h + attention(ln1(h)), then
    h + down(gelu(up(ln2(h))))"""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-3)
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.attention_output = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-3)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, h, mask):
        b, t, d = h.shape
        dk = d // self.heads
        x = self.ln1(h)
        q = self.query(x).reshape(b, t, self.heads, dk).transpose(1, 2)
        k = self.key(x).reshape(b, t, self.heads, dk).transpose(1, 2)
        v = self.value(x).reshape(b, t, self.heads, dk).transpose(1, 2)
        s = (q * (1.0 / math.sqrt(dk))) @ k.transpose(-1, -2)
        o = torch.softmax(s.masked_fill(mask, -1e9), dim=-1) @ v
        h = h + self.attention_output(o.transpose(1, 2).reshape(b, t, d))
        return h + self.down(F.gelu(self.up(self.ln2(h)), approximate="tanh"))


class CharLM(nn.Module):
    """models/charlm.net: byte embedding plus learned positions, three pre-norm blocks
    of 4-head causal self-attention and a GELU (tanh form) MLP, each a residual, a
    final layer norm and the output layer (tests/torch_ops.py's charlm, as modules).
    Layer norm's eps is graphc's (Keras') 0.001; q is scaled by 1/sqrt(16) and masked
    scores are -1e9, as graphc's multi_head_attention lowers.  graphc_name maps the
    parameters to graphc's names and layouts."""

    seq = 64
    vocab = 256
    dim = 64
    heads = 4
    optimizer = "adam"    # the train block's: adam(lr=0.003)

    def __init__(self, blocks=3):
        super().__init__()
        d = self.dim
        self.embedding = nn.Embedding(self.vocab, d)
        self.pos = nn.Parameter(torch.randn(self.seq, d) * 0.02)
        self.blocks = nn.ModuleList([CharBlock(d, self.heads) for _ in range(blocks)])
        self.ln_f = nn.LayerNorm(d, eps=1e-3)
        self.out = nn.Linear(d, self.vocab)
        self.register_buffer("mask", torch.triu(torch.ones(self.seq, self.seq, dtype=torch.bool), diagonal=1))

    def forward(self, ids):
        h = self.embedding(ids) + self.pos
        for blk in self.blocks:
            h = blk(h, self.mask)
        return self.out(self.ln_f(h))

    def shapes(self, ids):
        """every dense product's output, as graphc's [B*T, units], in call order (graphc's
        order of lines: query, key, value, attention_output, up, down, ..., the output)"""
        out = []
        hooks = [m.register_forward_hook(lambda m, i, y: out.append(("matmul", y.reshape(-1, y.shape[-1]), None)))
                 for m in self.modules() if isinstance(m, nn.Linear)]
        try:
            self(ids)
        finally:
            for hk in hooks:
                hk.remove()
        return out

    def graphc_name(self, name, shape):
        """(graphc's name, the shape graphc gives it) of a parameter"""
        d, h = self.dim, self.heads
        n = len(self.blocks)
        parts = name.split(".")
        if name == "pos":
            return "pos", shape
        if name == "embedding.weight":
            return "embedding/embeddings", shape
        if parts[0] in ("ln_f", "out"):
            layer, i, kind = parts[0], n, parts[1]
        else:
            layer, i, kind = parts[2], int(parts[1]), parts[3]
        if layer in ("ln1", "ln2", "ln_f"):
            return (f"{layer_name('layer_normalization', 2 * i + (layer == 'ln2'))}/"
                    f"{'gamma' if kind == 'weight' else 'beta'}", shape)
        if layer in ("query", "key", "value", "attention_output"):
            base = f"{layer_name('multi_head_attention', i)}/{layer}"
            if kind == "bias":
                return f"{base}/bias", [h, d // h] if layer != "attention_output" else shape
            return f"{base}/kernel", [d, h, d // h] if layer != "attention_output" else [h, d // h, d]
        dense = layer_name("dense", 2 * i + (layer == "down"))
        return f"{dense}/{kind if kind == 'bias' else 'kernel'}", shape if kind == "bias" else [shape[1], shape[0]]

    def example(self, b):
        """a batch: random byte ids and random next ids"""
        return torch.randint(0, self.vocab, (b, self.seq)), torch.randint(0, self.vocab, (b, self.seq))


def layer_name(base, i):
    """Keras' (and graphc's) names: conv2d, conv2d_1, ..."""
    return base if i == 0 else f"{base}_{i}"


MODELS = {"mnist": Mnist, "large": Large, "fashion-resnet": FashionResNet, "charlm": CharLM}


def conv_win(conv, extra=(0, 0, 0, 0)):
    """(kh, kw, sh, sw, pad top, bottom, left, right) of a Conv2d after an explicit
    F.pad(x, (left, right, top, bottom)) = extra, in graphc's order."""
    (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
    l, r, t, b = extra
    return (kh, kw, sh, sw, ph + t, ph + b, pw + l, pw + r)


def parse_win(attrs):
    """graphc's "window=3x3 stride=2x2 padding=same(0,1,0,1)" as conv_win's tuple."""
    m = re.search(r"window=(\d+)x(\d+) stride=(\d+)x(\d+) padding=\w+\((\d+),(\d+),(\d+),(\d+)\)", attrs or "")
    return tuple(int(v) for v in m.groups()) if m else None


class Infer(nn.Module):
    """The inference graph: probs = softmax(logits); for a sequence model, of the
    last position's (charlm's next_byte = softmax(logits[:, -1]))."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.seq = hasattr(net, "seq")

    def forward(self, x):
        y = self.net(x)
        if self.seq:
            y = y[:, -1]
        return F.softmax(y, dim=1)


def n_params(m):
    return sum(p.numel() for p in m.parameters())


# ---------------------------------------------------------------- verify

def nhwc(t):
    s = list(t.shape)
    return [s[0], s[2], s[3], s[1]] if len(s) == 4 else s


def verify(args):
    torch.manual_seed(0)
    net = MODELS[args.model]()
    got = n_params(net)
    with open(args.graph_json) as f:
        g = json.load(f)
    want_vars = sum(_prod(v["shape"]) for v in g["vars"] if v.get("role") == "param")
    errors = []
    if got != args.expect_params:
        errors.append(f"parameter count: PyTorch {got:,}, graphc check {args.expect_params:,}")
    if want_vars != args.expect_params:
        errors.append(f"parameter count: graphc dump {want_vars:,}, graphc check {args.expect_params:,}")
    # per-tensor shapes, in graphc's (HWIO / [in, out]) layout
    theirs = {v["name"]: v["shape"] for v in g["vars"] if v.get("role") == "param"}
    for name, p in net.named_parameters():
        if hasattr(net, "graphc_name"):
            key, s = net.graphc_name(name, list(p.shape))
        else:
            layer, kind = name.split(".")
            bn = isinstance(getattr(net, layer), nn.modules.batchnorm._BatchNorm)
            key = f"{layer}/{('gamma' if bn else 'kernel') if kind == 'weight' else ('beta' if bn else 'bias')}"
            s = list(p.shape)
            if len(s) == 4:
                s = [s[2], s[3], s[1], s[0]]  # OIHW -> HWIO
            elif len(s) == 2:
                s = [s[1], s[0]]  # [out, in] -> [in, out]
        if theirs.get(key) != s:
            errors.append(f"{key}: PyTorch {s} (as graphc lays it out), graphc {theirs.get(key)}")
    # layer output shapes, batch 2
    b = 2
    x = net.example(b)[0] if hasattr(net, "example") else torch.zeros(b, net.input_c, *net.input_hw)
    with torch.no_grad():
        mine = [(op, nhwc(t), w) for op, t, w in net.shapes(x)]
    ref = []
    for n in g["nodes"]:
        if n["op"] in ("conv2d", "maxpool", "matmul"):
            ref.append((n["op"], [dim_at(d, b) for d in n["shape"]], n.get("attrs", ""), n.get("line")))
    if len(ref) != len(mine):
        errors.append(f"layer count: PyTorch {len(mine)} conv/pool/dense layers, graphc {len(ref)}")
    for (op, s, w), (rop, rs, attrs, line) in zip(mine, ref):
        ok = op == rop and s == rs and w == parse_win(attrs)
        print(f"  {args.model}.net:{line:<3} {rop:8} graphc {str(rs):22} PyTorch (NHWC) {str(s):22} "
              f"{'ok' if ok else 'MISMATCH'}  {attrs}", file=sys.stderr)
        if not ok:
            errors.append(f"line {line} {rop}: graphc {rs} {attrs}, PyTorch {op} {s} "
                          f"(window, stride, padding t,b,l,r: {w})")
    if errors:
        for e in errors:
            print(f"torch_bench.py: {args.model}: MISMATCH: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"kind": "verify", "model": args.model, "torch_params": got,
                      "graphc_params": args.expect_params, "layers": len(ref), "ok": True}))
    return 0


def dim_at(d, b):
    """a dimension of graphc's JSON at batch b: a number, "B" or a product like "64*B"."""
    if isinstance(d, int):
        return d
    r = 1
    for f in str(d).split("*"):
        r *= b if f == "B" else int(f)
    return r


def _prod(s):
    r = 1
    for d in s:
        r *= d
    return r


# ---------------------------------------------------------------- timing

def rss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def time_steps(fn, steps, warmup):
    """median, lowest and highest wall ms per step, and the median CPU ms per step of the
    whole process (every thread's, spinning OpenMP workers included), as graphc bench's
    CPU ms"""
    for _ in range(warmup):
        fn()
    ts, cs = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        ts.append(time.perf_counter() - t0)
        cs.append(time.process_time() - c0)
    return statistics.median(ts) * 1e3, min(ts) * 1e3, max(ts) * 1e3, statistics.median(cs) * 1e3


CONFIGS = ("eager", "channels_last", "script", "optimized")


def make_step(args, config):
    if config not in CONFIGS or (config == "optimized" and args.step == "training"):
        raise ValueError(f"no configuration {config!r} for {args.step}")
    torch.manual_seed(1)
    net = MODELS[args.model]()
    b = args.batch
    if hasattr(net, "example"):   # token ids and next ids, uniform over the vocabulary
        x, y = net.example(b)
    else:
        x = torch.rand(b, net.input_c, *net.input_hw)  # uniform [0, 1), as graphc bench feeds
        y = torch.randint(0, 10, (b,))
    if config == "channels_last":
        if not hasattr(net, "input_c"):
            raise ValueError(f"no configuration {config!r} for {args.model}: it has no image")
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    if args.step == "training":
        net.train()
        model = torch.jit.script(net) if config == "script" else net
        kind = getattr(net, "optimizer", "sgd")
        if kind == "adamw":
            opt = torch.optim.AdamW(net.parameters(), lr=0.002, weight_decay=0.05)
        elif kind == "adam":
            opt = torch.optim.Adam(net.parameters(), lr=0.003, eps=1e-7)
        else:
            opt = torch.optim.SGD(net.parameters(), lr=0.001)

        def step():
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            acc = (logits.detach().argmax(-1) == y).float().mean()
            return loss.item(), acc.item()
        return step
    inf = Infer(net).eval()
    if config == "script":
        model = torch.jit.script(inf)
    elif config == "optimized":
        model = torch.jit.optimize_for_inference(torch.jit.script(inf))
    else:
        model = inf

    def step():
        with torch.no_grad():
            return model(x)
    return step


def export(args):
    torch.manual_seed(1)
    net = MODELS[args.model]()
    inf = Infer(net).eval()
    x = net.example(1)[0] if hasattr(net, "example") else torch.rand(1, net.input_c, *net.input_hw)
    with torch.no_grad():
        torch.onnx.export(inf, (x,), args.out, opset_version=13, input_names=["image"],
                          output_names=["probs"], dynamic_axes={"image": {0: "B"}, "probs": {0: "B"}},
                          do_constant_folding=True)
    print(json.dumps({"kind": "onnx_export", "model": args.model, "opset": 13, "ok": True,
                      "bytes": os.path.getsize(args.out)}))
    return 0


def run(args):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    base = {"framework": "pytorch", "torch": torch.__version__, "model": args.model, "step": args.step,
            "batch": args.batch, "threads": torch.get_num_threads(), "steps": args.steps, "warmup": args.warmup}
    for config in args.configs.split(","):
        name = args.tag + config if args.tag else config
        rec = dict(base, config=name)
        try:
            step = make_step(args, config)
            med, lo, hi, cpu = time_steps(step, args.steps, args.warmup)
            rec.update(ms=round(med, 3), min_ms=round(lo, 3), max_ms=round(hi, 3), cpu_ms=round(cpu, 3),
                       images_per_s=round(1e3 * args.batch / med, 1), max_rss_kb=rss_kb())
        except Exception as e:
            traceback.print_exc()
            rec.update(error=f"{type(e).__name__}: {e}"[:300])
        print(json.dumps(rec))
        sys.stdout.flush()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--model", choices=MODELS, required=True)
    v.add_argument("--graph-json", required=True)
    v.add_argument("--expect-params", type=int, required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", choices=MODELS, required=True)
    r.add_argument("--step", choices=("training", "inference"), required=True)
    r.add_argument("--batch", type=int, required=True)
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--configs", default="eager,channels_last,script")
    r.add_argument("--tag", default="", help="prefix for the config names in the output")
    e = sub.add_parser("export")
    e.add_argument("--model", choices=MODELS, required=True)
    e.add_argument("--out", required=True)
    a = p.parse_args()
    return {"verify": verify, "run": run, "export": export}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
