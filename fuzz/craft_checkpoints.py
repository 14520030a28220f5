#!/usr/bin/env python3
"""Crafts hostile checkpoints from a good one (docs/checkpoint.md), for the campaign of
fuzz/ckpt_campaign.sh and for tests/resume.sh.

Every file but those of the "crc" and "truncate" classes has valid CRCs, so what it
tests is the fields behind them: huge, zero and negative counts, lengths, ranks and
dims, wrong roles, names with NULs, duplicate, missing and unknown tensors, shapes
that disagree with the model, steps past the run, non-finite values, trailing bytes.
Each file comes with what graphc must do with it, for three readers:

  eval    graphc eval --weights F          (the forward graph: parameters only)
  resume  graphc run --resume F            (the training graph: optimizer state needed)
  reset   graphc run --resume F --reset-optimizer

"ok" (exit 0) or "refuse" (exit 1, a message naming the file).  The expectations come
from the class of damage, not from a second reading of the format, so a loader that
accepts what it should refuse is caught.

usage: craft_checkpoints.py BASE.ckpt OUTDIR --total-steps N [--count N] [--seed S]
writes OUTDIR/NNNN-CLASS.ckpt and OUTDIR/manifest.tsv (file, eval, resume, reset, what).
"""
import argparse
import os
import random
import struct
import zlib

MAGIC = b"GRAPHCKP"
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF
PARAM, STATE = 0, 1


class Rec:
    """A tensor record; any field may be set to a hostile value, and name_len, rank
    and crc follow the others unless set."""

    def __init__(self, name, role, dims, data):
        self.name, self.role, self.dims, self.data = name, role, list(dims), data
        self.name_len = self.rank = self.crc = None

    def copy(self):
        r = Rec(self.name, self.role, self.dims, self.data)
        r.name_len, r.rank, r.crc = self.name_len, self.rank, self.crc
        return r

    def body(self):
        nl = len(self.name) if self.name_len is None else self.name_len
        rank = len(self.dims) if self.rank is None else self.rank
        b = struct.pack("<I", nl) + self.name + struct.pack("<II", self.role, rank)
        b += b"".join(struct.pack("<Q", d) for d in self.dims)
        return b + self.data

    def bytes(self):
        b = self.body()
        crc = zlib.crc32(b) if self.crc is None else self.crc
        return b + struct.pack("<I", crc)


class Ckpt:
    def __init__(self, step, seed, recs, version=1, nvars=None):
        self.step, self.seed, self.recs, self.version, self.nvars = step, seed, recs, version, nvars
        self.magic, self.hcrc, self.tail = MAGIC, None, b"END."

    def bytes(self):
        nvars = len(self.recs) if self.nvars is None else self.nvars
        h = self.magic + struct.pack("<IIQQ", self.version, nvars, self.step, self.seed)
        h += struct.pack("<I", zlib.crc32(h) if self.hcrc is None else self.hcrc)
        return h + b"".join(r.bytes() for r in self.recs) + self.tail


def parse(blob):
    assert blob[:8] == MAGIC, "not a checkpoint"
    version, nvars, step, seed, _ = struct.unpack_from("<IIQQI", blob, 8)
    pos, recs = 36, []
    for _ in range(nvars):
        (nl,) = struct.unpack_from("<I", blob, pos)
        name = blob[pos + 4:pos + 4 + nl]
        pos += 4 + nl
        role, rank = struct.unpack_from("<II", blob, pos)
        pos += 8
        dims = list(struct.unpack_from("<%dQ" % rank, blob, pos))
        pos += 8 * rank
        n = 4
        for d in dims:
            n *= d
        recs.append(Rec(name, role, dims, blob[pos:pos + n]))
        pos += n + 4
    assert blob[pos:] == b"END.", "trailing bytes in the base checkpoint"
    return Ckpt(step, seed, recs, version)


OK, NO = "ok", "refuse"
ALL_NO = (NO, NO, NO)
ALL_OK = (OK, OK, OK)


def floats(n, rnd, hostile=False):
    vals = [rnd.uniform(-1, 1) for _ in range(n)]
    if hostile:
        vals[rnd.randrange(n)] = rnd.choice([float("nan"), float("inf"), -float("inf")])
    return struct.pack("<%df" % n, *vals)


class Crafter:
    def __init__(self, base, total, rnd):
        self.base, self.total, self.rnd = base, total, rnd
        self.params = [r for r in base.recs if r.role == PARAM]
        self.states = [r for r in base.recs if r.role == STATE]

    def fresh(self):
        c = Ckpt(self.base.step, self.base.seed, [r.copy() for r in self.base.recs])
        return c

    def pick(self, c, role=None):
        recs = [r for r in c.recs if role is None or r.role == role]
        return self.rnd.choice(recs)

    def big(self, bits):
        return self.rnd.choice([1 << bits, U64 >> 1, U64, (1 << 63) + self.rnd.randrange(1 << 20),
                                self.rnd.randrange(1 << bits, U64)])

    # ---- each class: returns (ckpt or bytes, (eval, resume, reset), what) -------------
    def c_identity(self):
        return self.fresh(), ALL_OK, "unchanged"

    def c_shuffle(self):
        c = self.fresh()
        self.rnd.shuffle(c.recs)
        return c, ALL_OK, "records in another order"

    def c_step_huge(self):
        c = self.fresh()
        c.step = self.rnd.choice([U64, 1 << 63, (1 << 53) + 1, U64 - self.rnd.randrange(1 << 30),
                                  self.rnd.randrange(1 << 53, U64)])
        return c, ALL_NO, "step %d" % c.step

    def c_step_past_run(self):
        c = self.fresh()
        c.step = self.rnd.choice([self.total + 1, self.total + self.rnd.randrange(1, 1 << 20),
                                  self.rnd.randrange(self.total + 1, 1 << 53)])
        return c, (OK, NO, NO), "step %d past the run's %d" % (c.step, self.total)

    def c_step_in_run(self):
        c = self.fresh()
        c.step = self.rnd.randrange(0, self.total + 1)
        return c, ALL_OK, "step %d" % c.step

    def c_seed(self):
        c = self.fresh()
        c.seed = self.rnd.choice([0, U64, self.rnd.randrange(U64)])
        return c, ALL_OK, "seed %d" % c.seed

    def c_nvars(self):
        c = self.fresh()
        n = len(c.recs)
        c.nvars = self.rnd.choice([0, n - 1, n + 1, U32, 1 << 31, self.rnd.randrange(n + 2, U32)])
        return c, ALL_NO, "tensor count %d of %d" % (c.nvars, n)

    def c_version(self):
        c = self.fresh()
        c.version = self.rnd.choice([0, 2, U32, self.rnd.randrange(2, U32)])
        return c, ALL_NO, "version %d" % c.version

    def c_magic(self):
        c = self.fresh()
        m = bytearray(MAGIC)
        m[self.rnd.randrange(8)] ^= 1 << self.rnd.randrange(8)
        c.magic = bytes(m)
        return c, ALL_NO, "magic %r" % c.magic

    def c_name_len(self):
        c = self.fresh()
        r = self.pick(c)
        n = len(r.name)
        r.name_len = self.rnd.choice([0, 512, U32, 1 << 31, n + 1, n - 1, self.rnd.randrange(n + 1, U32)])
        return c, ALL_NO, "name length %d of '%s'" % (r.name_len, r.name.decode())

    def c_name_bytes(self):
        c = self.fresh()
        r = self.pick(c)
        old = r.name
        i = self.rnd.randrange(len(old) + 1)
        bad = self.rnd.choice([b"\0", b"\n", b"\x1b", b"\x7f", b"\xff", b"\xc3", b"\xed\xa0\x80"])
        r.name = old[:i] + bad + old[i:]
        return c, ALL_NO, "name '%s' with %r at %d" % (old.decode(), bad, i)

    def c_name_unknown_param(self):
        c = self.fresh()
        r = self.pick(c, PARAM)
        r.name = self.rnd.choice([b"zz", b"dense_9/kernel", r.name + b"x", r.name[:-1]])
        return c, ALL_NO, "parameter renamed '%s'" % r.name.decode()

    def c_name_unknown_state(self):
        # state of no parameter
        c = self.fresh()
        r = self.pick(c, STATE)
        r.name = self.rnd.choice([b"zz:m", b":m", b"nothing:v", r.name.split(b":")[0] + b"x:m"])
        return c, ALL_NO, "state renamed '%s'" % r.name.decode()

    def c_name_other_state(self):
        # the state of a known parameter under a suffix this optimizer does not use
        c = self.fresh()
        r = self.pick(c, STATE)
        r.name = r.name.split(b":")[0] + b":" + self.rnd.choice([b"velocity", b"q", b"m2"])
        return c, (OK, NO, OK), "state renamed '%s'" % r.name.decode()

    def c_name_duplicate(self):
        c = self.fresh()
        a, b = self.rnd.sample(c.recs, 2)
        b.name = a.name
        return c, ALL_NO, "'%s' twice" % a.name.decode()

    def c_role(self):
        c = self.fresh()
        r = self.pick(c)
        r.role = self.rnd.choice([1 - r.role, 2, U32, self.rnd.randrange(2, U32)])
        return c, ALL_NO, "role %d of '%s'" % (r.role, r.name.decode())

    def c_rank(self):
        c = self.fresh()
        r = self.pick(c)
        r.rank = self.rnd.choice([7, U32, 1 << 31, len(r.dims) + 1, max(len(r.dims) - 1, 0) if len(r.dims) > 1 else 9,
                                  self.rnd.randrange(8, U32)])
        return c, ALL_NO, "rank %d of '%s'" % (r.rank, r.name.decode())

    def c_rank_reshaped(self):
        # a consistent record of another rank (dims and data agree): the shape differs
        c = self.fresh()
        r = self.pick(c)
        r.dims = r.dims + [1] if self.rnd.random() < 0.5 or len(r.dims) == 1 else [r.dims[0] * r.dims[1]] + r.dims[2:]
        return c, ALL_NO, "'%s' reshaped to %s" % (r.name.decode(), r.dims)

    def c_dim_huge(self):
        c = self.fresh()
        r = self.pick(c)
        k = self.rnd.randrange(len(r.dims))
        r.dims[k] = self.rnd.choice([0, (1 << 40) + 1, self.big(40), 1 << 40, 1 << 32, (1 << 31) + 1])
        if self.rnd.random() < 0.5 and len(r.dims) > 1:
            r.dims[(k + 1) % len(r.dims)] = 1 << 40   # a product past 2^61
        return c, ALL_NO, "dims %s of '%s'" % (r.dims, r.name.decode())

    def c_dim_consistent(self):
        # another shape with data to match: lengths and CRC agree, the model does not
        c = self.fresh()
        r = self.pick(c)
        k = self.rnd.randrange(len(r.dims))
        r.dims[k] = self.rnd.choice([r.dims[k] + 1, max(r.dims[k] - 1, 2) if r.dims[k] != 2 else 3, r.dims[k] * 2])
        n = 1
        for d in r.dims:
            n *= d
        r.data = floats(n, self.rnd)
        return c, ALL_NO, "'%s' as %s with its data" % (r.name.decode(), r.dims)

    def c_dims_transposed(self):
        c = self.fresh()
        cands = [r for r in c.recs if len(r.dims) >= 2 and r.dims[0] != r.dims[-1]]
        r = self.rnd.choice(cands)
        r.dims = r.dims[::-1]
        return c, ALL_NO, "'%s' transposed to %s" % (r.name.decode(), r.dims)

    def c_state_shape(self):
        c = self.fresh()
        r = self.pick(c, STATE)
        r.dims = r.dims + [2]
        r.data = r.data + r.data
        return c, ALL_NO, "state '%s' of shape %s" % (r.name.decode(), r.dims)

    def c_data(self):
        c = self.fresh()
        r = self.pick(c)
        hostile = self.rnd.random() < 0.5
        r.data = floats(len(r.data) // 4, self.rnd, hostile)
        if not hostile:
            return c, ALL_OK, "new finite data in '%s'" % r.name.decode()
        exp = ALL_NO if r.role == PARAM else (OK, NO, OK)   # eval and reset do not use state
        return c, exp, "a non-finite value in '%s'" % r.name.decode()

    def c_data_short(self):
        c = self.fresh()
        r = self.pick(c)
        cut = self.rnd.randrange(1, len(r.data) + 1)
        r.data = r.data[:-cut] if self.rnd.random() < 0.5 else r.data + bytes(cut)
        return c, ALL_NO, "data of '%s' %d bytes off" % (r.name.decode(), cut)

    def c_drop_param(self):
        c = self.fresh()
        r = self.pick(c, PARAM)
        c.recs.remove(r)
        return c, ALL_NO, "no '%s'" % r.name.decode()

    def c_drop_state(self):
        c = self.fresh()
        r = self.pick(c, STATE)
        c.recs.remove(r)
        return c, (OK, NO, OK), "no '%s'" % r.name.decode()

    def c_drop_all_state(self):
        c = self.fresh()
        c.recs = [r for r in c.recs if r.role == PARAM]
        return c, (OK, NO, OK), "no optimizer state"

    def c_duplicate(self):
        c = self.fresh()
        r = self.pick(c)
        c.recs.insert(self.rnd.randrange(len(c.recs) + 1), r.copy())
        return c, ALL_NO, "'%s' twice" % r.name.decode()

    def c_extra_param(self):
        c = self.fresh()
        r = self.pick(c, PARAM).copy()
        r.name = b"extra_" + r.name
        c.recs.insert(self.rnd.randrange(len(c.recs) + 1), r)
        return c, ALL_NO, "an extra parameter '%s'" % r.name.decode()

    def c_extra_state(self):
        # Adam's two and two more: more than any optimizer keeps (3, RMSprop's)
        c = self.fresh()
        r = self.pick(c, STATE)
        for suffix in (b":w", b":u"):
            x = r.copy()
            x.name = r.name.split(b":")[0] + suffix
            c.recs.insert(self.rnd.randrange(len(c.recs) + 1), x)
        return c, ALL_NO, "a third and a fourth state tensor of '%s'" % r.name.split(b":")[0].decode()

    def c_many_records(self):
        # a header and records that claim far more than the model has
        c = self.fresh()
        r = self.pick(c, STATE)
        for i in range(self.rnd.randrange(3, 40)):
            x = r.copy()
            x.name = r.name + b"%d" % i
            c.recs.append(x)
        return c, ALL_NO, "%d records" % len(c.recs)

    def c_random_field(self):
        # one integer field behind the CRC set to another value
        c = self.fresh()
        r = self.pick(c)
        field = self.rnd.choice(["name_len", "role", "rank", "dim"])
        if field == "dim":
            k = self.rnd.randrange(len(r.dims))
            old = r.dims[k]
            while r.dims[k] == old:
                r.dims[k] = self.rnd.choice([self.rnd.randrange(U64), self.rnd.randrange(64), old ^ (1 << self.rnd.randrange(64))])
        else:
            cur = {"name_len": len(r.name), "role": r.role, "rank": len(r.dims)}[field]
            v = cur
            while v == cur:
                v = self.rnd.choice([self.rnd.randrange(U32 + 1), self.rnd.randrange(16), cur ^ (1 << self.rnd.randrange(32))])
            setattr(r, field, v)
        return c, ALL_NO, "%s of '%s' changed" % (field, r.name.decode())

    def c_crc(self):
        c = self.fresh()
        if self.rnd.random() < 0.3:
            c.hcrc = self.rnd.randrange(U32 + 1)
            return c, ALL_NO, "header CRC"
        r = self.pick(c)
        r.crc = zlib.crc32(r.body()) ^ (1 << self.rnd.randrange(32))
        return c, ALL_NO, "CRC of '%s'" % r.name.decode()

    def c_bitflip(self):
        b = bytearray(self.fresh().bytes())
        i = self.rnd.randrange(len(b))
        b[i] ^= 1 << self.rnd.randrange(8)
        return bytes(b), ALL_NO, "bit flipped at byte %d, CRCs not fixed" % i

    def c_truncate(self):
        b = self.fresh().bytes()
        n = self.rnd.randrange(len(b))
        return b[:n], ALL_NO, "truncated to %d of %d bytes" % (n, len(b))

    def c_trailing(self):
        c = self.fresh()
        c.tail = self.rnd.choice([b"END.\0", b"END.END.", b"END." + os.urandom(self.rnd.randrange(1, 64)), b"END",
                                  b"", b"DNE."])
        return c, ALL_NO, "ends with %r" % c.tail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("outdir")
    ap.add_argument("--total-steps", type=int, required=True, help="steps of the run that resumes")
    ap.add_argument("--count", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    with open(a.base, "rb") as f:
        base = parse(f.read())
    assert base.step <= a.total_steps, "the base checkpoint is past the run"
    rnd = random.Random(a.seed)
    cr = Crafter(base, a.total_steps, rnd)
    classes = sorted(m for m in dir(cr) if m.startswith("c_"))
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "manifest.tsv"), "w") as man:
        for i in range(a.count):
            cls = classes[i % len(classes)]
            c, exp, what = getattr(cr, cls)()
            blob = c if isinstance(c, bytes) else c.bytes()
            name = "%04d-%s.ckpt" % (i, cls[2:])
            with open(os.path.join(a.outdir, name), "wb") as f:
                f.write(blob)
            man.write("%s\t%s\t%s\t%s\t%s\n" % (name, exp[0], exp[1], exp[2], what.replace("\t", " ")))


if __name__ == "__main__":
    main()
