"""Stand-in for sgl_kernel on CPU CI (tests only): every op raises when called, so a test
that reaches a real kernel fails loudly; the one KV copy a CPU server needs is plain Python."""

import importlib.abc
import importlib.machinery
import sys

__version__ = "0.4.10"


class _Op:
    def __init__(self, n):
        self.n = n

    def __call__(self, *a, **k):
        raise NotImplementedError(f"sgl_kernel stub op called: {self.n}")

    def __getattr__(self, a):
        if a.startswith("__"):
            raise AttributeError(a)
        return _Op(f"{self.n}.{a}")


def _ga(modname):
    def g(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Op(f"{modname}.{name}")

    return g


__getattr__ = _ga("sgl_kernel")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, m):
        m.__path__ = []
        m.__getattr__ = _ga(m.__name__)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


sys.meta_path.insert(0, _Finder())


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    import ctypes

    for p, s in zip(data_ptrs.tolist(), strides.tolist()):
        for t, sr in zip(tgt_loc.tolist(), src_loc.tolist()):
            if t != sr:
                ctypes.memmove(p + t * s, p + sr * s, s)
