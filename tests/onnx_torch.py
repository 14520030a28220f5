#!/usr/bin/python3
"""PyTorch's side of the ONNX tests (tests/onnx_torch.sh; docs/onnx.md).

The shipped models written in PyTorch (NCHW, as a PyTorch user writes them), plus
variants for what they do not have: a flatten by view() (Shape, Gather, Unsqueeze,
Concat), batch norm after convolutions (folded into them at import) and after a dense
layer (a mul and an add), other opsets.  Each is exported by torch.onnx.export with a
dynamic batch, imported by `graphc import`, run by graphc (tests/onnx_run) on the same
inputs (NHWC where graphc's input is the NCHW image transposed), and the outputs
compared with PyTorch's: every element within 1e-5.

    onnx_torch.py GRAPHC ONNX_RUN WORKDIR

Run it with Debian's /usr/bin/python3 (python3-torch), not a pyenv python.  Prints a
PASS or FAIL line per check and "N passed, M failed"; exit 1 on a failure.
"""
import os
import re
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TOL = 1e-5


class Mlp(nn.Module):
    """models/mlp.net"""
    inputs = {"image": (1, 28, 28)}

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        h = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.softmax(self.fc3(F.relu(self.fc2(h))), dim=1)


class Mnist(nn.Module):
    """models/mnist.net (and mnist-adam.net): "same" 5x5 convolutions are padding=2."""
    inputs = {"image": (1, 28, 28)}

    def __init__(self, view=False):
        super().__init__()
        self.view = view
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)
        self.fc1, self.fc2 = nn.Linear(7 * 7 * 64, 1024), nn.Linear(1024, 10)
        self.drop = nn.Dropout(0.4)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2, 2)
        h = h.view(h.size(0), -1) if self.view else torch.flatten(h, 1)
        return F.softmax(self.fc2(self.drop(F.relu(self.fc1(h)))), dim=1)


class Lenet5(nn.Module):
    """models/lenet5.net"""
    inputs = {"image": (1, 28, 28)}

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        h = F.avg_pool2d(torch.tanh(self.c1(x)), 2)
        h = F.avg_pool2d(torch.tanh(self.c2(h)), 2)
        h = torch.tanh(self.f2(torch.tanh(self.f1(torch.flatten(h, 1)))))
        return F.softmax(self.f3(h), dim=1)


class Resnet(nn.Module):
    """models/resnet.net: global average pooling as adaptive_avg_pool2d then flatten,
    or (mean=True) as a mean over height and width (ReduceMean)."""
    inputs = {"image": (1, 28, 28)}

    def __init__(self, mean=False):
        super().__init__()
        self.mean = mean
        self.c0 = nn.Conv2d(1, 16, 3, padding=1)
        self.c = nn.ModuleList([nn.Conv2d(16, 16, 3, padding=1) for _ in range(4)])
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.c0(x))
        x = F.relu(x + self.c[1](F.relu(self.c[0](x))))
        x = F.max_pool2d(x, 2)
        x = F.relu(x + self.c[3](F.relu(self.c[2](x))))
        g = x.mean((2, 3)) if self.mean else torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return F.softmax(self.fc(g), dim=1)


class Siamese(nn.Module):
    """models/siamese.net: one encoder (shared weights) on two inputs."""
    inputs = {"left": (1, 28, 28), "right": (1, 28, 28)}

    def __init__(self):
        super().__init__()
        self.enc, self.fc = nn.Linear(784, 64), nn.Linear(192, 2)

    def forward(self, left, right):
        a = F.relu(self.enc(torch.flatten(left, 1)))
        c = F.relu(self.enc(torch.flatten(right, 1)))
        return F.softmax(self.fc(torch.cat([a, c, a * c], dim=1)), dim=1)


class Large(nn.Module):
    """models/large.net: its first convolution is "same" at stride 2 on 1080x1920, which
    TensorFlow's rule pads 0 before and 1 after: an explicit F.pad (a Pad node), which
    graphc takes into the Conv's padding."""
    inputs = {"image": (3, 1080, 1920)}

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, stride=2), nn.Conv2d(8, 16, 3, padding=1)
        self.f1, self.f2 = nn.Linear(33 * 60 * 16, 64), nn.Linear(64, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.c1(F.pad(x, (0, 1, 0, 1)))), 4)
        h = F.max_pool2d(F.relu(self.c2(h)), 4)
        return F.softmax(self.f2(F.relu(self.f1(torch.flatten(h, 1)))), dim=1)


class BatchNorm(nn.Module):
    """Batch norm after convolutions with and without a bias (folded into them) and
    after a dense layer (a mul and an add of params)."""
    inputs = {"image": (3, 16, 16)}

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.f1, self.b3, self.f2 = nn.Linear(8 * 8 * 8, 32), nn.BatchNorm1d(32), nn.Linear(32, 5)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        h = F.relu(self.b2(self.c2(h)))
        h = F.relu(self.b3(self.f1(torch.flatten(h, 1))))
        return F.softmax(self.f2(h), dim=1)


# name, model, opset, batch, what the .net must say
CASES = [
    ("mlp", lambda: Mlp(), 13, 3, ["dense(flatten(image), units=256"]),
    ("mnist", lambda: Mnist(), 13, 3, ["conv2d(image, filters=32, kernel=5, padding=\"same\", activation=\"relu\")"]),
    ("mnist-view", lambda: Mnist(view=True), 11, 3, ["dense("]),
    ("lenet5", lambda: Lenet5(), 13, 3, ["avgpool("]),
    ("resnet", lambda: Resnet(), 17, 3, ["global_avgpool("]),
    ("resnet-mean", lambda: Resnet(mean=True), 13, 3, ["global_avgpool("]),
    ("siamese", lambda: Siamese(), 13, 3, ["concat("]),
    # opset 10: PyTorch writes F.pad's pads as an attribute there; from opset 11 on it
    # computes them with ConstantOfShape, Slice and Transpose of integer tensors, which
    # graphc does not evaluate (docs/onnx.md)
    ("large", lambda: Large(), 10, 1, ["stride=2, padding=\"same\""]),
    ("batchnorm", lambda: BatchNorm(), 13, 3, ["conv2d(image, filters=8, kernel=3, padding=\"same\", activation=\"relu\")"]),
]


def randomize_norms(model, gen):
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            n = m.num_features
            m.running_mean.copy_(torch.rand(n, generator=gen) - 0.5)
            m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(n, generator=gen) - 0.5)


def net_inputs(text):
    """{name: [dims...]} of a .net file's input lines."""
    return {m.group(1): [d.strip() for d in m.group(2).split(",")]
            for m in re.finditer(r"^input (\w+): f32\[([^\]]*)\]", text, re.M)}


def main():
    graphc, onnx_run, work = sys.argv[1:4]
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("PASS: " if ok else "FAIL: ") + what, flush=True)
        if ok:
            passed += 1
        else:
            failed += 1

    for name, make, opset, batch, expect in CASES:
        torch.manual_seed(1)
        gen = torch.Generator().manual_seed(2)
        model = make().eval()
        with torch.no_grad():
            randomize_norms(model, gen)
            xs = [torch.rand(batch, *shape, generator=gen) for shape in model.inputs.values()]
            want = model(*xs).numpy()
        path = os.path.join(work, name)
        names = list(model.inputs)
        torch.onnx.export(model, tuple(xs), path + ".onnx", opset_version=opset, input_names=names,
                          output_names=["probs"], dynamic_axes={n: {0: "batch"} for n in names + ["probs"]})
        r = subprocess.run([graphc, "import", path + ".onnx", "-o", path + ".net", "--weights-out", path + ".ckpt"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            check(False, f"{name}: graphc import: {r.stderr.strip()}")
            continue
        text = open(path + ".net").read()
        missing = [e for e in expect if e not in text]
        check(not missing, f"{name}: the .net has {expect}" + (f"; it is:\n{text}" if missing else ""))
        if name == "batchnorm":
            # two folds, one mul-and-add: only the dense layer's batch norm has params
            n = len(re.findall(r"^param batch_normalization", text, re.M))
            check(n == 2, f"{name}: convolutions' batch norms folded, the dense one's a mul and add ({n} params)")
        decl = net_inputs(text)
        for n, x in zip(names, xs):
            a = x.numpy()
            dims = decl.get(n, [])
            if dims[1:] == [str(d) for d in a.shape[2:]] + [str(a.shape[1])]:
                a = a.transpose(0, 2, 3, 1)   # graphc's input is the image in NHWC
            np.ascontiguousarray(a, dtype="<f4").tofile(f"{path}.in.{n}.f32")
        r = subprocess.run([onnx_run, "run", path + ".net", path + ".ckpt", str(batch), path], capture_output=True, text=True)
        if r.returncode != 0:
            check(False, f"{name}: graphc inference: {r.stderr.strip()}")
            continue
        got = np.fromfile(path + ".out.probs.f32", dtype="<f4").reshape(want.shape)
        diff = float(np.max(np.abs(got - want)))
        check(diff <= TOL, f"{name} (opset {opset}): graphc within {TOL} of PyTorch: max |graphc - torch| = {diff:.2e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
