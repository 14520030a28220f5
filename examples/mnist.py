#!/usr/bin/python3
"""Train a model on the MNIST digits bundled in data/mnist and classify the test
images, from Python through graphc's shared library (python/graphc.py).

    python3 examples/mnist.py                          # models/mlp.net, 300 steps
    python3 examples/mnist.py models/mnist-adam.net --steps 500 --save mnist.ckpt
    python3 examples/mnist.py models/mnist-adam.net --weights mnist.ckpt   # no training

From a build tree it finds python/graphc.py and .libs/libgraphc.so.0 itself; after
`make install`, set PYTHONPATH to the folder of graphc.py and LD_LIBRARY_PATH to the
library's (or GRAPHC_LIBRARY to the library).
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
try:
    import graphc
except ImportError:
    sys.path.insert(0, os.path.join(TOP, "python"))
    import graphc


def read_idx(path):
    """An IDX file (MNIST's format) as a uint8 array of its dimensions."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_mnist(folder, kind):
    """Images as float32 [n, 28, 28, 1] in [0, 1] (as graphc scales them), labels as int32."""
    images = read_idx(os.path.join(folder, "%s-images-idx3-ubyte.gz" % kind))
    labels = read_idx(os.path.join(folder, "%s-labels-idx1-ubyte.gz" % kind))
    return (images.astype(np.float32) / np.float32(255))[..., np.newaxis], labels.astype(np.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=os.path.join(TOP, "models", "mlp.net"))
    ap.add_argument("--data", default=os.path.join(TOP, "data", "mnist"), help="folder of the MNIST files")
    ap.add_argument("--weights", help="load these weights instead of training")
    ap.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--test", type=int, default=10000, help="test images to classify (default all)")
    ap.add_argument("--save", help="save the weights here after training")
    args = ap.parse_args()

    with graphc.Model(args.model) as m:
        print(m)
        if args.weights:
            m.load_weights(args.weights)
        else:
            x, y = load_mnist(args.data, "train")
            order = np.random.default_rng(1).permutation(len(x))
            start, losses = time.time(), []
            for step in range(args.steps):
                rows = order[(step * args.batch + np.arange(args.batch)) % len(x)]
                losses.append(m.train_step(x[rows], y[rows]))
                if (step + 1) % 50 == 0 or step + 1 == args.steps:
                    print("step %d: loss %.4f (mean of the last 50), %.1f s"
                          % (step + 1, np.mean(losses[-50:]), time.time() - start))
            if args.save:
                m.save_weights(args.save)
        x, y = load_mnist(args.data, "t10k")
        x, y = x[:args.test], y[:args.test]
        predicted = np.concatenate([m.predict(x[i:i + 1000]).argmax(axis=1) for i in range(0, len(x), 1000)])
        print("test images 0-9: predicted %s, true %s" % (" ".join(map(str, predicted[:10])), " ".join(map(str, y[:10]))))
        print("accuracy on %d test images: %.2f%%" % (len(x), 100.0 * np.mean(predicted == y)))


if __name__ == "__main__":
    main()
