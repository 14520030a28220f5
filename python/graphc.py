"""graphc from Python: load, run and train graphc models through libgraphc.so.

    import graphc
    m = graphc.Model("models/mnist.net")      # a .net file, or an ONNX model (.onnx)
    m.load_weights("mnist.ckpt")              # as `graphc run --save` writes them
    probs = m.predict(images)                 # float32 [n, 28, 28, 1] -> [n, 10]
    loss = m.train_step(images, labels)       # one step of the model's train block

ctypes and NumPy only, no compiled extension.  Arrays go to the library without a
copy when they are C-contiguous and of the input's dtype (else they are converted
first); outputs are NumPy arrays the library writes into.  A failed call raises
graphc.Error with the library's message.  docs/api.md is the guide.

The library is found at $GRAPHC_LIBRARY if set, else in the build tree this file
sits in (../.libs), else by the dynamic loader (libgraphc.so.0 in LD_LIBRARY_PATH
or the system's folders).
"""
import collections
import ctypes
import math
import os
import threading

import numpy as np

__all__ = ["Model", "Error", "TensorInfo", "version", "library"]

SONAME = "libgraphc.so.0"
MAX_RANK = 8  # GRAPHC_MAX_RANK

# graphc_status, by value
STATUS = ["GRAPHC_OK", "GRAPHC_ERR_MODEL", "GRAPHC_ERR_ARG", "GRAPHC_ERR_FILE", "GRAPHC_ERR_RUN",
          "GRAPHC_ERR_MEMORY", "GRAPHC_ERR_UNSUPPORTED"]
# graphc_dtype, by value
DTYPES = [np.dtype(np.float32), np.dtype(np.int32)]


class Error(Exception):
    """A graphc call failed.  str(e) is the library's message (every error of a
    .net file, with file:line:col); e.status names the graphc_status."""

    def __init__(self, status, message):
        self.status = STATUS[status] if 0 <= status < len(STATUS) else "status %d" % status
        super().__init__(message.rstrip("\n") or self.status)


TensorInfo = collections.namedtuple("TensorInfo", "name dtype shape label")
TensorInfo.__doc__ = """An input or output of a model: its .net name, a NumPy dtype, its
shape with None where the size is the batch's, and (inputs) whether it is a label
that no output reads (class labels: predict does not need it)."""


class _Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_RANK), ("count", ctypes.c_int64), ("label", ctypes.c_int)]


_lib = None
_lib_lock = threading.Lock()


def _find_library():
    path = os.environ.get("GRAPHC_LIBRARY")
    if path:
        return path
    built = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, ".libs", SONAME)
    return built if os.path.exists(built) else SONAME


def library():
    """The loaded libgraphc (a ctypes.CDLL), loaded on first use."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _declare(ctypes.CDLL(_find_library()))
        return _lib


def _declare(lib):
    P, I, I64, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_char_p
    PP = ctypes.POINTER(ctypes.c_void_p)
    F = ctypes.POINTER(ctypes.c_float)
    protos = {
        "graphc_version": (S, []),
        "graphc_load": (I, [S, PP]),
        "graphc_load_string": (I, [S, S, PP]),
        "graphc_free": (None, [P]),
        "graphc_message": (S, [P]),
        "graphc_load_weights": (I, [P, S]),
        "graphc_save_weights": (I, [P, S]),
        "graphc_input_count": (I, [P, ctypes.POINTER(I)]),
        "graphc_output_count": (I, [P, ctypes.POINTER(I)]),
        "graphc_input_info": (I, [P, I, I64, ctypes.POINTER(_Info)]),
        "graphc_output_info": (I, [P, I, I64, ctypes.POINTER(_Info)]),
        "graphc_run": (I, [P, I64, PP, PP]),
        "graphc_train_step": (I, [P, I64, PP, F, F]),
        "graphc_evaluate": (I, [P, I64, PP, F, F]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def version():
    """The library's version, such as "0.1.0"."""
    return library().graphc_version().decode()


def _pointers(arrays):
    """A C array of the arrays' data pointers (NULL for None)."""
    return (ctypes.c_void_p * max(len(arrays), 1))(*[None if a is None else a.ctypes.data for a in arrays])


class Model:
    """A graphc model: Model(path) loads a .net file or an ONNX model (.onnx, with its
    weights); Model.from_string(text) compiles .net text.  Calls on one model run one
    at a time (threads may share it); free it with close() or a with block."""

    def __init__(self, path=None, *, source=None, name="<string>"):
        lib = library()
        self._lib, self._lock = lib, threading.Lock()
        handle = ctypes.c_void_p()
        if source is not None:
            status = lib.graphc_load_string(name.encode(), source.encode(), ctypes.byref(handle))
        else:
            status = lib.graphc_load(os.fsencode(path), ctypes.byref(handle))
        self._h = handle.value
        if status != 0:
            message = lib.graphc_message(self._h).decode(errors="replace")
            self.close()
            raise Error(status, message)
        self.inputs = self._describe(lib.graphc_input_count, lib.graphc_input_info)
        self.outputs = self._describe(lib.graphc_output_count, lib.graphc_output_info)

    @classmethod
    def load(cls, path):
        """The model of a .net file, or of an ONNX file (a path ending in .onnx)."""
        return cls(path)

    @classmethod
    def from_string(cls, source, name="<string>"):
        """The model of .net text; `name` names it in messages."""
        return cls(source=source, name=name)

    def close(self):
        """Frees the library's model; the object is unusable afterwards."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.graphc_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def __repr__(self):
        def show(ts):
            return ", ".join("%s: %s%s" % (t.name, t.dtype, list(t.shape)) for t in ts)
        return "<graphc.Model inputs (%s) outputs (%s)>" % (show(self.inputs), show(self.outputs))

    # ---- calls ---------------------------------------------------------------------

    def _call(self, fn, *args):
        """fn(model, *args) under the model's lock; its message raised on failure."""
        with self._lock:
            if not self._h:
                raise ValueError("the model is closed")
            status = fn(self._h, *args)
            if status != 0:
                raise Error(status, self._lib.graphc_message(self._h).decode(errors="replace"))

    def _info(self, query, i, batch):
        info = _Info()
        self._call(query, i, batch, ctypes.byref(info))
        return info

    def _describe(self, count_fn, info_fn):
        n = ctypes.c_int()
        self._call(count_fn, ctypes.byref(n))
        out = []
        for i in range(n.value):
            t = self._info(info_fn, i, 0)
            shape = tuple(None if d < 0 else d for d in t.dims[:t.rank])
            out.append(TensorInfo(t.name.decode(), DTYPES[t.dtype], shape, bool(t.label)))
        return out

    def _shape(self, query, i, batch):
        t = self._info(query, i, batch)
        return tuple(t.dims[:t.rank])

    def load_weights(self, path):
        """Loads a checkpoint (graphc run --save's): parameters, and optimizer state."""
        self._call(self._lib.graphc_load_weights, os.fsencode(path))

    def save_weights(self, path):
        """Saves the weights (and optimizer state) as a checkpoint."""
        self._call(self._lib.graphc_save_weights, os.fsencode(path))

    def _feeds(self, x, y, training):
        """The inputs as a list of arrays (None where not given) and the batch.  x is an
        array (the one input that is not a label) or a dict by input name; y, when
        given, is the one label input."""
        given = {}
        if isinstance(x, dict):
            given.update(x)
        else:
            data = [t.name for t in self.inputs if not t.label]
            if len(data) != 1:
                raise ValueError("the model has %d inputs that are not labels (%s): give a dict by name"
                                 % (len(data), ", ".join(data)))
            given[data[0]] = x
        if y is not None:
            labels = [t.name for t in self.inputs if t.label]
            if len(labels) != 1:
                raise ValueError("the model has %d label inputs: give y in the dict by name" % len(labels))
            given[labels[0]] = y
        names = [t.name for t in self.inputs]
        unknown = [k for k in given if k not in names]
        if unknown:
            raise KeyError("no input named %s; the inputs are %s" % (", ".join(map(repr, unknown)), ", ".join(names)))
        arrays = [None] * len(self.inputs)
        for i, t in enumerate(self.inputs):
            if t.name not in given or (t.label and not training):
                continue
            a = np.asarray(given[t.name])
            if a.dtype != t.dtype and not np.can_cast(a.dtype, t.dtype, casting="same_kind"):
                raise TypeError("input '%s' is %s; %s cannot be converted to it" % (t.name, t.dtype, a.dtype))
            arrays[i] = np.ascontiguousarray(a, dtype=t.dtype)   # a itself when it can be
        batch = next((a.shape[0] for a in arrays if a is not None and a.ndim > 0), 1)
        for i, a in enumerate(arrays):
            if a is None:
                continue
            want = self._shape(self._lib.graphc_input_info, i, batch)
            if a.shape != want:
                raise ValueError("input '%s': shape %s, expected %s for a batch of %d"
                                 % (self.inputs[i].name, a.shape, want, batch))
        return arrays, batch

    def predict(self, x):
        """Runs the model (dropout off) on x: an array for its one input that is not a
        label, or a dict by input name.  Returns the output as an array, or a dict by
        name when the model has several."""
        arrays, batch = self._feeds(x, None, False)
        outs = [np.empty(self._shape(self._lib.graphc_output_info, j, batch), dtype=t.dtype)
                for j, t in enumerate(self.outputs)]
        self._call(self._lib.graphc_run, batch, _pointers(arrays), _pointers(outs))
        return outs[0] if len(outs) == 1 else {t.name: a for t, a in zip(self.outputs, outs)}

    def _metrics(self, fn, x, y):
        arrays, batch = self._feeds(x, y, True)
        loss, acc = ctypes.c_float(), ctypes.c_float()
        self._call(fn, batch, _pointers(arrays), ctypes.byref(loss), ctypes.byref(acc))
        return loss.value, None if math.isnan(acc.value) else acc.value

    def train_step(self, x, y=None):
        """One training step as the model's train block says, on inputs x (an array or
        a dict, as predict takes) and labels y.  Returns the batch's loss before the
        update."""
        return self._metrics(self._lib.graphc_train_step, x, y)[0]

    def evaluate(self, x, y=None):
        """(loss, accuracy) on a batch without training; accuracy None when the model
        does not classify."""
        return self._metrics(self._lib.graphc_evaluate, x, y)
