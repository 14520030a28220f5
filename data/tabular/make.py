#!/usr/bin/env python3
"""Writes the two small data sets of models/spirals.net and models/rings.net, from a
seed, with Python's standard library alone (no NumPy needed to make them):

  spirals.csv  three interleaved spiral arms in the plane, 900 points: columns x and y
               (the position, noise 0.04), r and t (two distractors: the radius with
               noise 0.3, and uniform noise), and 'arm', the class by name (one, two,
               three).  No straight line separates the arms.
  rings.npz    two concentric rings with noise, as numpy.savez_compressed writes it
               (deflated zip64 members): x float32 [800, 2], y int64 [800], and a test
               set x_test [200, 2], y_test [200].

They are generated, not collected: free to use like the rest of graphc (its LICENSE).
Run it as python3 data/tabular/make.py: it writes beside itself (the files are
committed; running it again writes the same bytes).
"""
import math
import os
import random
import struct
import zipfile

rng = random.Random(20261201)


def spirals(n_per_arm=300):
    rows = []
    names = ["one", "two", "three"]
    for arm in range(3):
        for i in range(n_per_arm):
            s = i / n_per_arm                       # 0..1 along the arm
            r = 0.1 + 0.9 * s
            t = 2 * math.pi * (arm / 3 + 1.25 * s)  # arms a third of a turn apart, 1.25 turns long
            x = r * math.cos(t) + rng.gauss(0, 0.04)
            y = r * math.sin(t) + rng.gauss(0, 0.04)
            rows.append((x, y, r + rng.gauss(0, 0.3), rng.uniform(-1, 1), names[arm]))
    rng.shuffle(rows)
    with open("spirals.csv", "w") as f:
        f.write("x,y,r,t,arm\n")
        for x, y, r, t, arm in rows:
            f.write("%.4f,%.4f,%.4f,%.4f,%s\n" % (x, y, r, t, arm))


def npy(descr, shape, values):
    fmt = {"<f4": "f", "<i8": "q"}[descr]
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        descr, "(%d,)" % shape[0] if len(shape) == 1 else str(tuple(shape)))
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * (pad % 64) + "\n"
    return (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")
            + struct.pack("<%d%s" % (len(values), fmt), *values))


def rings(n):
    xs, ys = [], []
    for _ in range(n):
        c = rng.randrange(2)
        r = (0.5 if c == 0 else 1.0) + rng.gauss(0, 0.1)
        a = rng.uniform(0, 2 * math.pi)
        xs += [r * math.cos(a), r * math.sin(a)]
        ys.append(c)
    return xs, ys


def write_rings():
    x, y = rings(800)
    xt, yt = rings(200)
    members = [("x.npy", npy("<f4", (800, 2), x)), ("y.npy", npy("<i8", (800,), y)),
               ("x_test.npy", npy("<f4", (200, 2), xt)), ("y_test.npy", npy("<i8", (200,), yt))]
    with zipfile.ZipFile("rings.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            # as numpy.savez_compressed: zip64 members, a fixed date
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w", force_zip64=True) as f:
                f.write(data)


os.chdir(os.path.dirname(os.path.abspath(__file__)))
spirals()
write_rings()
