"""python/graphc.py against this build's libgraphc.so (tests/python.sh runs it, with
GRAPHC_LIBRARY, top_srcdir and top_builddir set): predictions as `graphc predict`
gives them on the same images, a training step that lowers the loss, descriptions of
inputs and outputs, weights through a checkpoint, ONNX models, and the library's
messages as exceptions."""
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

SRC = os.environ.get("top_srcdir", ".")
BUILD = os.environ.get("top_builddir", ".")
sys.path.insert(0, os.path.join(SRC, "python"))
import graphc  # noqa: E402

GRAPHC = os.path.join(BUILD, "graphc")
MNIST = os.path.join(SRC, "models", "mnist.net")
N_IMAGES = 8


def graphc_cli(*args):
    return subprocess.run([GRAPHC, *args], check=True, capture_output=True, text=True).stdout


def test_digits(n):
    """The first n MNIST test images: raw bytes [n, 28, 28] and labels."""
    with gzip.open(os.path.join(SRC, "data", "mnist", "t10k-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16)[:n * 784].reshape(n, 28, 28)
    with gzip.open(os.path.join(SRC, "data", "mnist", "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:n].astype(np.int32)
    return images, labels


def setUpModule():
    global tmp, ckpt, raw, labels, pixels
    tmp = tempfile.mkdtemp(prefix="graphc-py-")
    ckpt = os.path.join(tmp, "mnist.ckpt")
    # weights from a few steps: what is compared is the two paths, not the accuracy
    graphc_cli("run", MNIST, "--data", os.path.join(SRC, "data", "mnist"), "--epochs", "1", "--steps", "5",
               "--test-limit", "100", "--log", "quiet", "--save", ckpt)
    raw, labels = test_digits(N_IMAGES)
    pixels = (raw.astype(np.float32) / np.float32(255))[..., np.newaxis]   # as graphc reads a PGM


def tearDownModule():
    shutil.rmtree(tmp)


class Predict(unittest.TestCase):
    def test_matches_graphc_predict(self):
        paths = []
        for i, img in enumerate(raw):
            paths.append(os.path.join(tmp, "digit%d.pgm" % i))
            with open(paths[-1], "wb") as f:
                f.write(b"P5\n28 28\n255\n" + img.tobytes())
        out = graphc_cli("predict", MNIST, "--weights", ckpt, "--top", "10", *paths)
        # "PATH:  c (p)  c (p) ..." with all ten classes, four decimals each
        cli = np.zeros((N_IMAGES, 10))
        for i, line in enumerate(out.splitlines()):
            self.assertTrue(line.startswith(paths[i] + ":"), line)
            for c, p in re.findall(r"  (\d) \(([01]\.\d{4})\)", line):
                cli[i, int(c)] = float(p)
        self.assertTrue(np.all(cli.sum(axis=1) > 0.99), cli)
        with graphc.Model(MNIST) as m:
            m.load_weights(ckpt)
            probs = m.predict(pixels)
        self.assertEqual(probs.shape, (N_IMAGES, 10))
        self.assertEqual(probs.dtype, np.float32)
        # the CLI rounds to four decimals: 5e-5, and a little for the rounding itself
        np.testing.assert_allclose(probs, cli, rtol=0, atol=5.1e-5)
        self.assertEqual(probs.argmax(axis=1).tolist(), cli.argmax(axis=1).tolist())

    def test_inputs_by_name_and_layouts_alike(self):
        with graphc.Model(MNIST) as m:
            m.load_weights(ckpt)
            want = m.predict(pixels)
            # a dict by name; labels given to predict are not needed and not read
            np.testing.assert_array_equal(m.predict({"image": pixels, "label": labels}), want)
            # a Fortran-ordered float64 array is converted, not misread
            np.testing.assert_array_equal(m.predict(np.asfortranarray(pixels.astype(np.float64))), want)
            # a batch of one gives the rows of a batch of eight (another plan: a tolerance)
            np.testing.assert_allclose(m.predict(pixels[2:3]), want[2:3], rtol=1e-5, atol=1e-6)


class Describe(unittest.TestCase):
    def test_mnist(self):
        with graphc.Model.load(MNIST) as m:
            self.assertEqual([(t.name, t.dtype, t.shape, t.label) for t in m.inputs],
                             [("image", np.float32, (None, 28, 28, 1), False), ("label", np.int32, (None,), True)])
            self.assertEqual([(t.name, t.dtype, t.shape) for t in m.outputs], [("probs", np.float32, (None, 10))])

    def test_several_inputs_and_outputs(self):
        src = ("input a: f32[B, 3]\ninput b: f32[B, 3]\ninput k: i32[B]\n"
               "output s = a + b\noutput p = a * b\n"
               "loss = cross_entropy(dense(a - b, units=2), k)\n"
               "train { data = synthetic(count=8); optimizer = sgd(lr=0.1); batch = 4; minimize = loss }\n")
        with graphc.Model.from_string(src, name="two.net") as m:
            self.assertEqual([t.name for t in m.inputs], ["a", "b", "k"])
            self.assertEqual([t.label for t in m.inputs], [False, False, True])
            a = np.arange(6, dtype=np.float32).reshape(2, 3)
            b = np.full((2, 3), 0.5, np.float32)
            out = m.predict({"a": a, "b": b})
            self.assertEqual(sorted(out), ["p", "s"])
            np.testing.assert_array_equal(out["s"], a + b)
            np.testing.assert_array_equal(out["p"], a * b)
            with self.assertRaisesRegex(ValueError, "2 inputs that are not labels"):
                m.predict(a)


class Train(unittest.TestCase):
    def test_a_step_lowers_the_loss(self):
        x, y = test_digits(64)
        x = (x.astype(np.float32) / np.float32(255))[..., np.newaxis]
        # mlp.net (SGD with momentum at lr 0.1, no dropout): mnist.net's lr 0.001 moves
        # too slowly to tell a step from noise
        with graphc.Model(os.path.join(SRC, "models", "mlp.net")) as m:
            before, acc = m.evaluate(x, y)
            self.assertTrue(0 <= acc <= 1)
            # the step's loss is the loss before its update: the evaluation's
            self.assertAlmostEqual(m.train_step(x, y), before, delta=1e-5 * before)
            after, _ = m.evaluate(x, y)
            self.assertLess(after, before - 0.05, "loss %.6f after a step, %.6f before" % (after, before))
            for _ in range(9):
                m.train_step(x, y)
            later, _ = m.evaluate(x, y)
            self.assertLess(later, after / 2, "loss %.6f after ten steps, %.6f after one" % (later, after))

    def test_weights_through_a_checkpoint(self):
        path = os.path.join(tmp, "trained.ckpt")
        with graphc.Model(MNIST) as a, graphc.Model(MNIST) as b:
            a.train_step(pixels, labels)
            a.save_weights(path)
            b.load_weights(path)
            np.testing.assert_array_equal(a.predict(pixels), b.predict(pixels))
            # the optimizer's step count came too: the next steps agree
            self.assertEqual(a.train_step(pixels, labels), b.train_step(pixels, labels))


class Onnx(unittest.TestCase):
    def test_an_exported_model_loads(self):
        if "with ONNX" not in graphc_cli("--version"):
            self.skipTest("graphc built without ONNX")
        path = os.path.join(tmp, "mnist.onnx")
        graphc_cli("export", MNIST, "--weights", ckpt, "-o", path)
        with graphc.Model(MNIST) as net, graphc.Model.load(path) as onnx:
            net.load_weights(ckpt)
            self.assertEqual([(t.name, t.shape) for t in onnx.inputs], [("image", (None, 28, 28, 1))])
            np.testing.assert_allclose(onnx.predict(pixels), net.predict(pixels), rtol=0, atol=1e-5)


class Errors(unittest.TestCase):
    def test_messages_are_raised(self):
        bad = os.path.join(tmp, "bad.net")
        with open(bad, "w") as f:
            f.write("input x: f32[B, 4]\noutput y = relux(x)\n")
        with self.assertRaises(graphc.Error) as e:
            graphc.Model(bad)
        self.assertEqual(e.exception.status, "GRAPHC_ERR_MODEL")
        self.assertIn("bad.net:2:12: error: unknown function 'relux'", str(e.exception))
        with self.assertRaisesRegex(graphc.Error, "nonexistent.net") as e:
            graphc.Model(os.path.join(tmp, "nonexistent.net"))
        self.assertEqual(e.exception.status, "GRAPHC_ERR_FILE")
        with graphc.Model(MNIST) as m:
            with self.assertRaisesRegex(graphc.Error, "cannot open checkpoint.*missing.ckpt"):
                m.load_weights(os.path.join(tmp, "missing.ckpt"))
            with self.assertRaisesRegex(ValueError, r"input 'image': shape \(8, 28, 28\), expected \(8, 28, 28, 1\)"):
                m.predict(pixels[..., 0])
            with self.assertRaisesRegex(TypeError, "input 'label' is int32; float64"):
                m.train_step(pixels, labels.astype(np.float64))
            with self.assertRaisesRegex(graphc.Error, r"input 1 \('label'\) is needed"):
                m.train_step(pixels)
            with self.assertRaisesRegex(graphc.Error, r"mnist.net:17:8: cross_entropy: label 12 in row 0 is outside \[0, 10\)") as e:
                m.train_step(pixels, np.full(N_IMAGES, 12, np.int32))
            self.assertEqual(e.exception.status, "GRAPHC_ERR_RUN")
        with graphc.Model.from_string("input x: f32[B, 2]\noutput y = x * 2\n", name="plain.net") as m:
            with self.assertRaisesRegex(graphc.Error, "plain.net has no train block"):
                m.train_step(np.ones((1, 2), np.float32))
        m.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            m.predict(np.ones((1, 2), np.float32))


class Example(unittest.TestCase):
    def test_examples_mnist_py(self):
        out = subprocess.run([sys.executable, os.path.join(SRC, "examples", "mnist.py"), "--steps", "100", "--test", "500"],
                             check=True, capture_output=True, text=True).stdout
        acc = float(re.search(r"accuracy on 500 test images: ([\d.]+)%", out).group(1))
        # mlp.net after 100 steps of 128: about 90%; chance is 10%
        self.assertGreater(acc, 70, out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
