#!/usr/bin/env python3
"""Hostile data sets through graphc run, eval and predict (docs/fuzzing.md, "Data sets").

    python3 fuzz/data_campaign.py GRAPHC [WORKDIR]

GRAPHC is the graphc binary to try, meant to be the ASan + UBSan build (configure
--enable-sanitizers).  Each case is a crafted MNIST folder (IDX files, plain or gzip)
or image file, with what graphc must do with it:

  accept  exit 0, no diagnostic;
  refuse  exit 1 and an error that names the file at fault and holds the expected words.

Either way no sanitizer report, no "runtime error", no signal.  Each folder case is
tried with the damage in the training set (graphc run) and in the test set (graphc run
and graphc eval); images through graphc predict, alone and all in one command (every
bad one reported, the good ones classified, exit 1).  Prints one line per run and a
summary; exits 1 if any run did otherwise.  Nothing outside WORKDIR (default: a fresh
temporary folder, removed at the end) is written.
"""
import gzip
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
SANITIZER = ("Sanitizer", "runtime error", "Segmentation fault", "Aborted")


def idx(dims, body=None, type_=8, magic=b"\0\0"):
    """An IDX file: magic, type, rank, big-endian dims, then body (default: a pattern)."""
    head = magic + bytes([type_, len(dims)]) + b"".join(struct.pack(">I", d & 0xFFFFFFFF) for d in dims)
    if body is None:
        n = 1
        for d in dims:
            n *= d
        body = bytes((i * 7) % 256 for i in range(n))
    return head + body


def images(n, rows=28, cols=28):
    return idx([n, rows, cols])


def labels(n, classes=10):
    return idx([n], bytes(i % classes for i in range(n)))


def good_set(n=32):
    return {"images": images(n), "labels": labels(n)}


# ---- the folder cases: name -> (what the damaged set's files are, words expected) ----
# "images"/"labels": the bytes of each file; a ".gz" suffix on the key writes it gzip'd;
# None as the words: the set is fine and must be accepted.
def gz(b):
    return gzip.compress(b, mtime=0)


def folder_cases():
    c = {}
    n = 32
    lab = labels(n)
    # shapes against the model's f32[B, 28, 28, 1]
    for rows, cols in ((32, 32), (27, 29), (28, 27), (29, 28), (14, 56), (56, 14), (1, 783), (2, 392)):
        c[f"images {rows}x{cols}"] = ({"images": images(n, rows, cols), "labels": lab},
                                      ("images", f"images are {rows}x{cols}x1, but input 'image'"))
    c["images 784x1 (flat, fits)"] = ({"images": images(n, 784, 1), "labels": lab}, None)
    c["images 28x28 gzip (fits)"] = ({"images.gz": images(n), "labels.gz": lab}, None)
    c["images 28x28 plain (fits)"] = (good_set(n), None)
    c["gzip content named plain (fits)"] = ({"images": gz(images(n)), "labels": lab}, None)
    c["images rank 2"] = ({"images": idx([n, 784]), "labels": lab}, ("images", "images must have rank 3"))
    c["images rank 4"] = ({"images": idx([n, 28, 28, 1]), "labels": lab}, ("images", "images must have rank 3"))
    # labels
    for k in (1, -1, n):
        c[f"labels count {n + k}"] = ({"images": images(n), "labels": labels(n + k)},
                                      ("images", "image/label count mismatch"))
    for v in (10, 11, 127, 255):
        body = bytearray(i % 10 for i in range(n))
        body[n // 2] = v
        c[f"label {v}"] = ({"images": images(n), "labels": idx([n], bytes(body))},
                           ("labels", f"label {v} at index {n // 2} is out of range 0..9"))
    c["labels rank 2"] = ({"images": images(n), "labels": idx([n, 1], bytes(n))}, ("labels", "labels must have rank 1"))
    c["labels rank 0"] = ({"images": images(n), "labels": idx([], b"")}, ("labels", "unsupported rank 0"))
    # headers
    for name, f, words in (
        ("bad magic", idx([n, 28, 28], magic=b"\1\0"), "bad magic"),
        ("gzip inside gzip", gz(gz(images(n))), "gzip inside gzip"),
        ("type signed byte", idx([n, 28, 28], type_=0x09), "unsupported data type 0x09"),
        ("type float32", idx([n, 28, 28], type_=0x0D, body=bytes(4 * n * 784)), "unsupported data type 0x0d"),
        ("type unknown", idx([n, 28, 28], type_=0x42), "unsupported data type 0x42"),
        ("rank 5", idx([n, 28, 28, 1, 1]), "unsupported rank 5"),
        ("rank 255", idx([n, 28, 28], magic=b"\0\0")[:3] + b"\xff" + b"\0" * 64, "unsupported rank 255"),
        ("dim 0", idx([n, 0, 28], body=b""), "dimension 2 of 3 is 0"),
        ("count 0", idx([0, 28, 28], body=b""), "dimension 1 of 3 is 0"),
        ("dims overflow", idx([0xFFFFFFFF] * 3, body=b""), "product overflows"),
        ("dims over 2 GiB", idx([0xFFFF, 0xFFFF, 2], body=b""), "GiB limit"),
        ("declares 2 GB, holds 4 bytes", idx([32767, 256, 256], body=b"\1\2\3\4"), "truncated"),
        ("header cut in the dims", idx([n, 28, 28])[:9], "truncated header"),
        ("header cut in the magic", b"\0\0", "truncated header"),
        ("empty file", b"", "truncated header"),
        ("data cut", images(n)[:16 + 784 * 5 + 3], "truncated: header promises"),
        ("data cut, gzip", gz(images(n)[:100]), "truncated"),
        ("trailing data", images(n) + b"\0" * 9, "trailing data: 9 bytes"),
        ("trailing data, gzip", gz(images(n) + b"x"), "trailing data"),
        ("gzip stream cut", gz(images(n))[:200], "truncated"),
        ("gzip trailer missing", gz(images(n))[:-8], "gzip"),
        ("gzip CRC wrong", gz(images(n))[:-8] + b"\0\0\0\0" + gz(images(n))[-4:], "corrupt gzip stream"),
        ("gzip body flipped", (lambda b: b[:40] + bytes([b[40] ^ 0x55]) + b[41:])(gz(images(n))), "gzip"),
    ):
        c[f"images: {name}"] = ({"images": f, "labels": lab}, ("images", words))
    for name, f, words in (
        ("labels cut", labels(n)[:20], "truncated"),
        ("labels trailing", labels(n) + b"\0", "trailing data"),
        ("labels bad magic", b"\x08\x00" + labels(n)[2:], "bad magic"),
        ("labels gzip cut", gz(labels(n))[:15], "truncated"),
    ):
        c[name] = ({"images": images(n), "labels": f}, ("labels", words))
    c["images missing"] = ({"labels": lab}, ("images.gz", "cannot open"))
    c["labels missing"] = ({"images": images(n)}, ("labels.gz", "cannot open"))
    c["images a folder"] = ({"images/": None, "labels": lab}, ("images", "read error"))
    c["labels a symlink loop"] = ({"images": images(n), "labels@": "loop"}, ("labels", "cannot open"))
    return c


def write_set(folder, which, files):
    """The two files of set `which` in folder, from a case's dict."""
    img, lab = NAMES[which]
    for key, data in files.items():
        base = img if key.startswith("images") else lab
        if key.endswith(".gz"):
            with open(os.path.join(folder, base + ".gz"), "wb") as f:
                f.write(gz(data))
        elif key.endswith("/"):
            os.mkdir(os.path.join(folder, base))
        elif key.endswith("@"):
            os.symlink(base, os.path.join(folder, base))   # points at itself: ELOOP
        else:
            with open(os.path.join(folder, base), "wb") as f:
                f.write(data)


MODEL = """input image: f32[B, 28, 28, 1]
input label: i32[B]
logits = dense(relu(dense(flatten(image), units=16)), units=10)
output probs = softmax(logits)
loss = cross_entropy(logits, label)
train { data = mnist("unused"); optimizer = adam(); batch = 8; epochs = 1; minimize = loss }
"""


class Campaign:
    def __init__(self, graphc, work):
        self.graphc, self.work = graphc, work
        self.runs = self.bad = 0
        self.sets = 0

    def run(self, label, args, expect, names=()):
        """One graphc command; expect None: accepted, else the words its error must hold."""
        p = subprocess.run([self.graphc] + args, capture_output=True, text=True, errors="replace", timeout=600)
        self.runs += 1
        err = p.stderr
        problems = []
        if any(s in err for s in SANITIZER) or p.returncode < 0:
            problems.append(f"crash or sanitizer report (exit {p.returncode})")
        if expect is None:
            if p.returncode != 0 or "error:" in err:
                problems.append(f"refused a good set (exit {p.returncode})")
        else:
            if p.returncode == 0:
                problems.append("ACCEPTED SILENTLY")
            elif p.returncode != 1:
                problems.append(f"exit {p.returncode}, wanted 1")
            for w in (expect if isinstance(expect, (list, tuple)) else [expect]):
                if w not in err:
                    problems.append(f"no '{w}' in the error")
            for n in names:
                if n not in err:
                    problems.append(f"the error does not name {n}")
        status = "ok  " if not problems else "FAIL"
        print(f"{status} {label}: exit {p.returncode}; {err.strip().splitlines()[-1] if err.strip() else '(silent)'}"
              + ("" if not problems else "\n     " + "; ".join(problems)))
        if problems:
            self.bad += 1
            print("     stderr:", err[-2000:].replace("\n", "\n     "))

    def folders(self, weights):
        model = os.path.join(self.work, "m.net")
        for name, (files, expect) in folder_cases().items():
            for which in ("train", "test"):
                folder = os.path.join(self.work, "sets", f"{which}-{len(os.listdir(os.path.join(self.work, 'sets')))}")
                os.makedirs(folder)
                write_set(folder, "train" if which == "test" else "test", good_set())
                write_set(folder, which, files)
                self.sets += 1
                words, names = None, ()
                if expect is not None:
                    kind, words = expect
                    base = NAMES[which][0 if kind.startswith("images") else 1]
                    names = (os.path.join(folder, base),)
                self.run(f"run, {which} set: {name}", ["run", model, "--data", folder, "--steps", "2", "--log",
                                                       "quiet"], words, names)
                if which == "test":
                    self.run(f"eval, test set: {name}", ["eval", model, "--weights", weights, "--data", folder],
                             words, names)
        # the model's side: 5 classes on labels 0..9; inputs that take 28x28 images or not
        folder = os.path.join(self.work, "sets", "good")
        os.makedirs(folder)
        write_set(folder, "train", good_set())
        write_set(folder, "test", good_set())
        self.sets += 1
        for name, src, dst, expect in (
            ("5 classes, labels 0..9", "units=10)", "units=5)", "out of range for the model's 5 classes"),
            ("input f32[B, 784]", "f32[B, 28, 28, 1]", "f32[B, 784]", None),
            ("input f32[B, 28, 28]", "f32[B, 28, 28, 1]", "f32[B, 28, 28]", None),
            ("input f32[B, 1, 28, 28]", "f32[B, 28, 28, 1]", "f32[B, 1, 28, 28]", None),
            ("input f32[B, 14, 56, 1]", "f32[B, 28, 28, 1]", "f32[B, 14, 56, 1]", "images are 28x28x1, but input"),
            ("input f32[B, 785]", "f32[B, 28, 28, 1]", "f32[B, 785]", "images are 28x28x1, but input"),
        ):
            path = os.path.join(self.work, f"model-{self.runs}.net")
            with open(path, "w") as f:
                f.write(MODEL.replace(src, dst))
            self.run(f"run, model {name}", ["run", path, "--data", folder, "--steps", "2", "--log", "quiet"], expect,
                     (folder,) if expect else ())


def png(w, h, rows=None, depth=8, ctype=0, interlace=0, extra=(), iend=True, crc_ok=True, idat=None):
    def chunk(t, d, ok=True):
        crc = zlib.crc32(t + d) & 0xFFFFFFFF
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", crc if ok else crc ^ 1)
    if idat is None:
        rows = rows if rows is not None else h
        ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype, 1)
        rb = (w * ch * depth + 7) // 8
        idat = zlib.compress(b"".join(b"\0" + bytes((y * 31 + x) % 256 for x in range(rb)) for y in range(rows)))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace), crc_ok)
    for t, d in extra:
        out += chunk(t, d)
    out += chunk(b"IDAT", idat)
    return out + (chunk(b"IEND", b"") if iend else b"")


def adam7_bytes(w, h):
    """The filtered size of an interlaced 8-bit grey w x h image: seven passes' rows."""
    n = 0
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        pw, ph = (w - x0 + dx - 1) // dx, (h - y0 + dy - 1) // dy
        n += ph * (1 + pw) if pw and ph else 0
    return n


def image_cases():
    """name -> (bytes, words expected or None)."""
    px = bytes((i * 3) % 256 for i in range(784))
    good = png(28, 28)
    c = {
        "PGM P5": (b"P5\n28 28\n255\n" + px, None),
        "PGM P5 with comments": (b"P5\n# made by hand\n28 # width\n28\n255\n" + px, None),
        "PGM P5 16-bit": (b"P5 28 28 65535\n" + b"".join(bytes([v, v]) for v in px), None),
        "PGM P2": (b"P2\n28 28\n255\n" + " ".join(str(v) for v in px).encode() + b"\n", None),
        "PNG grey": (good, None),
        "PNG RGB": (png(28, 28, ctype=2), None),
        "PNG grey+alpha 16-bit": (png(28, 28, ctype=4, depth=16), None),
        "PNG palette": (png(28, 28, ctype=3, extra=[(b"PLTE", bytes(range(48)) * 16)]), None),
        "PNG 1-bit": (png(28, 28, depth=1), None),
        "PNG interlaced": (png(28, 28, interlace=1, idat=zlib.compress(bytes(adam7_bytes(28, 28)))), None),
        "PNG interlaced, too much data": (png(28, 28, interlace=1, idat=zlib.compress(bytes(28 * 29 * 2))),
                                          "bad PNG: IDAT: Too much image data"),
        "PNG extra compressed data": (png(28, 28, idat=zlib.compress(bytes(29 * 28)) + b"junkjunk"),
                                      "bad PNG: IDAT: Extra compressed data"),
        "PPM P6": (b"P6\n28 28\n255\n" + px * 3, "a PPM image (P6"),
        "PPM P3": (b"P3\n28 28\n255\n" + b"0 " * 2352, "a PPM image (P3"),
        "PBM P4": (b"P4\n28 28\n" + bytes(98), "a PBM image (P4"),
        "PBM P1": (b"P1\n28 28\n" + b"0 " * 784, "a PBM image (P1"),
        "PAM P7": (b"P7\nWIDTH 28\nHEIGHT 28\nDEPTH 1\nMAXVAL 255\nTUPLTYPE GRAYSCALE\nENDHDR\n" + px, "a PAM image"),
        "unknown P9": (b"P9\n28 28\n255\n" + px, "unknown Netpbm format 'P9'"),
        "unknown P0": (b"P0\n28 28\n255\n" + px, "unknown Netpbm format 'P0'"),
        "JPEG": (b"\xff\xd8\xff\xe0\0\x10JFIF\0" + px, "a JPEG image"),
        "GIF": (b"GIF89a" + px, "a GIF image"),
        "BMP": (b"BM" + px, "a BMP image"),
        "TIFF": (b"II*\0" + px, "a TIFF image"),
        "WebP": (b"RIFF\0\0\0\0WEBPVP8 " + px, "a RIFF file"),
        "text": (b"hello\n", "not a PGM or PNG image"),
        "empty": (b"", "empty file"),
        "PGM 32x32": (b"P5\n32 32\n255\n" + bytes(1024), "the image is 32x32; the model's input is 28x28"),
        "PGM 27x29": (b"P5\n27 29\n255\n" + bytes(783), "the image is 27x29"),
        "PGM width 0": (b"P5\n0 28\n255\n", "the width is 0"),
        "PGM width huge": (b"P5\n99999999999999999999 28\n255\n", "the width is too large"),
        "PGM width negative": (b"P5\n-28 28\n255\n", "the width is not a number"),
        "PGM width 28x": (b"P5\n28x 28\n255\n" + px, "the width is not a number"),
        "PGM maxval 0": (b"P5\n28 28\n0\n" + px, "the maxval is 0"),
        "PGM maxval 65536": (b"P5\n28 28\n65536\n" + px, "the maxval is too large"),
        "PGM no maxval": (b"P5\n28 28\n", "the maxval is missing"),
        "PGM glued magic": (b"P528 28 255\n" + px, "no blank after the magic"),
        "PGM cut": (b"P5\n28 28\n255\n" + px[:500], "truncated at pixel 500 of 784"),
        "PGM trailing": (b"P5\n28 28\n255\n" + px + b"\0", "data after the 28x28 pixels"),
        "PGM two images": (b"P5\n28 28\n255\n" + px + b"P5\n28 28\n255\n" + px, "data after the 28x28 pixels"),
        "PGM CRLF header": (b"P5\r\n28 28\r\n255\r\n" + px, "data after the 28x28 pixels"),
        "PGM above maxval": (b"P5\n28 28\n100\n" + px, "value above maxval"),
        "PGM 16-bit above maxval": (b"P5\n28 28\n1000\n" + b"\xff\xff" * 784, "value above maxval"),
        "PGM P2 bad token": (b"P2\n28 28\n255\n1 2 three", "not a number at pixel 2 of 784"),
        "PGM P2 cut": (b"P2\n28 28\n255\n1 2 3", "truncated at pixel 3 of 784"),
        "PGM P2 above maxval": (b"P2\n28 28\n9\n" + b"10 " * 784, "value above maxval at pixel 0"),
        "PNG 32x32": (png(32, 32), "the image is 32x32"),
        "PNG 1000000x1000000": (png(1000000, 1000000, rows=0), "the image is 1000000x1000000"),
        "PNG width 0": (png(0, 28, rows=0), "bad PNG"),
        "PNG bad depth": (png(28, 28, depth=3, rows=0), "bad PNG"),
        "PNG bad colour type": (png(28, 28, ctype=5, rows=0), "bad PNG"),
        "PNG IHDR CRC": (png(28, 28, crc_ok=False), "bad PNG: IHDR: CRC error"),
        "PNG few rows": (png(28, 28, rows=3), "bad PNG"),
        "PNG IDAT not zlib": (png(28, 28, idat=b"\x78\x9c" + b"\xff" * 40), "bad PNG"),
        "PNG IDAT empty": (png(28, 28, idat=b""), "bad PNG"),
        "PNG no IEND": (png(28, 28, iend=False), "bad PNG: the file ends early"),
        "PNG palette without PLTE": (png(28, 28, ctype=3), "bad PNG"),
        "PNG signature damaged": (b"\x89PNG\n\x1a\n\n" + good[8:], "the signature's last bytes are wrong"),
    }
    for cut in (4, 8, 20, 33, 50, len(good) - 20, len(good) - 1):
        c[f"PNG cut at {cut}"] = (good[:cut], "bad PNG")
    return c


def images_campaign(camp, weights):
    model = os.path.join(camp.work, "m.net")
    folder = os.path.join(camp.work, "images")
    os.makedirs(folder)
    paths, bad = [], 0
    for name, (data, expect) in image_cases().items():
        path = os.path.join(folder, name.replace(" ", "_").replace("/", "_") + ".img")
        with open(path, "wb") as f:
            f.write(data)
        camp.sets += 1
        camp.run(f"predict: {name}", ["predict", model, "--weights", weights, path], expect,
                 (path,) if expect else ())
        paths.append(path)
        bad += expect is not None
    # all at once: every bad one reported, the good ones classified, exit 1
    p = subprocess.run([camp.graphc, "predict", model, "--weights", weights] + paths, capture_output=True, text=True,
                       errors="replace", timeout=600)
    camp.runs += 1
    lines = p.stdout.splitlines()
    errors = p.stderr.count("error:")
    okay = (p.returncode == 1 and len(lines) == len(paths) - bad and errors == bad
            and not any(s in p.stderr for s in SANITIZER))
    print(f"{'ok  ' if okay else 'FAIL'} predict, all {len(paths)} images at once: exit {p.returncode}, "
          f"{len(lines)} predictions, {errors} errors (want {len(paths) - bad} and {bad})")
    camp.bad += not okay


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    graphc = os.path.abspath(sys.argv[1])
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="graphc-data-campaign-")
    os.makedirs(os.path.join(work, "sets"), exist_ok=True)
    camp = Campaign(graphc, work)
    with open(os.path.join(work, "m.net"), "w") as f:
        f.write(MODEL)
    good = os.path.join(work, "sets", "weights")
    os.makedirs(good)
    write_set(good, "train", good_set())
    write_set(good, "test", good_set())
    weights = os.path.join(work, "w.ckpt")
    p = subprocess.run([graphc, "run", os.path.join(work, "m.net"), "--data", good, "--steps", "2", "--log", "quiet",
                        "--save", weights], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("cannot train the campaign's model: " + p.stderr)
    camp.folders(weights)
    images_campaign(camp, weights)
    print(f"\n{camp.sets} data sets and images, {camp.runs} runs of graphc: {camp.bad} did otherwise")
    if len(sys.argv) <= 2:
        shutil.rmtree(work)
    sys.exit(1 if camp.bad else 0)


if __name__ == "__main__":
    main()
