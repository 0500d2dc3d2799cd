"""Stand-in for torchvision on CPU CI: every attribute is an inert module/class (tests only)."""

import enum
import importlib
import importlib.machinery
import sys
import types

__version__ = "0.28.0"  # transformers parses it; must be a PEP 440 string


class _Mock(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)

    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        full = f"{self.__name__}.{n}"
        if full in sys.modules:
            return sys.modules[full]
        if n[:1].isupper():
            c = type(n, (), {"__module__": self.__name__, "__getattr__": lambda s, a: a})
            setattr(self, n, c)
            return c
        m = _Mock(full)
        sys.modules[full] = m
        setattr(self, n, m)
        return m

    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else (lambda f: f)


class _Finder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            if fullname not in sys.modules:
                m = _Mock(fullname)
                sys.modules[fullname] = m
                parent, _, child = fullname.rpartition(".")
                setattr(sys.modules[parent], child, m)
            return sys.modules[fullname].__spec__
        return None


sys.meta_path.insert(0, _Finder())


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


importlib.import_module("torchvision.transforms").InterpolationMode = InterpolationMode
importlib.import_module("torchvision.transforms.functional").InterpolationMode = InterpolationMode
