"""Find the SGLang install (or an unpacked tree) without importing it, and classify its code.

Importing SGLang takes 8-16 s and can fail on a CPU box, so everything here reads files:
package metadata for the version, and the eagle worker sources (stdlib ``ast``) for the
structural family named in docs/reference/compatibility.md (V1a ... V2c, from the version map, section 2.1).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from .errors import UserError

V1_FILE = "srt/speculative/eagle_worker.py"
V2_FILE = "srt/speculative/eagle_worker_v2.py"
COMMON_FILE = "srt/speculative/eagle_worker_common.py"
PLUGINS_FILE = "srt/plugins/hook_registry.py"
REGISTRY_FILE = "srt/speculative/spec_registry.py"


def parse_version(v: str) -> tuple[int, ...]:
    """'0.5.12.post1' -> (0, 5, 12, 1, 0); rc/dev sort before the release: '0.5.0rc0' -> (0,5,0,-1,0)."""
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)(?:(rc|a|b|\.dev)(\d+))?(?:\.post(\d+))?", v.strip())
    if not m:
        raise UserError(f"cannot read SGLang version {v!r}")
    major, minor, patch, pre, pre_n, post = m.groups()
    if pre:
        return (int(major), int(minor), int(patch), -1, int(pre_n))
    return (int(major), int(minor), int(patch), int(post or 0), 0)


@dataclass
class SGLangEnv:
    """What we know about one SGLang source tree. ``package_dir`` is the ``sglang/`` folder."""

    package_dir: Path
    version: str
    source: str  # "installed" or "--sglang-root"
    notes: list[str] = field(default_factory=list)

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return parse_version(self.version)

    def at_least(self, v: str) -> bool:
        return self.version_tuple >= parse_version(v)

    def path(self, rel: str) -> Path:
        """Path of a file given relative to the ``sglang/`` package folder."""
        return self.package_dir / rel

    @property
    def has_plugins(self) -> bool:
        return self.path(PLUGINS_FILE).is_file()

    @property
    def has_spec_registry(self) -> bool:
        return self.path(REGISTRY_FILE).is_file()

    @cached_property
    def v1_family(self) -> str | None:
        return _v1_family(self.path(V1_FILE))

    @cached_property
    def v2_family(self) -> str | None:
        p = self.path(V2_FILE)
        return _v2_family(p, has_common=self.path(COMMON_FILE).is_file()) if p.is_file() else None

    @property
    def families(self) -> list[str]:
        return [f for f in (self.v1_family, self.v2_family) if f]

    @property
    def decode_worker(self) -> str:
        """Which worker runs EAGLE-3 decode with default flags (version map, section 1)."""
        if not self.v2_family:
            return "v1"
        if not self.v1_family:
            return "v2"
        if self.at_least("0.5.11"):
            return "v2 (v1 when topk > 1, SGLANG_ENABLE_SPEC_V2=0 or --disable-overlap-schedule)"
        if self.at_least("0.5.5"):
            return "v1 (v2 with SGLANG_ENABLE_SPEC_V2=1)"
        return "v1 (v2 with --enable-beta-spec)"

    @property
    def routes(self) -> dict[str, bool]:
        """Delivery routes for probes: the source patch works wherever a worker family is known."""
        return {"source-patch": bool(self.families), "plugin": self.has_plugins}

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            package_dir=str(self.package_dir),
            v1_family=self.v1_family,
            v2_family=self.v2_family,
            families=self.families,
            decode_worker=self.decode_worker,
            has_plugins=self.has_plugins,
            has_spec_registry=self.has_spec_registry,
            routes=self.routes,
        )
        return d


def _tree(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_bytes().decode("utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise UserError(f"{path}: not valid Python ({exc.msg}, line {exc.lineno}); this SGLang file is "
                        "damaged or hand-edited: reinstall SGLang (or `patch revert` if we patched it)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: not readable as UTF-8 Python ({exc}); reinstall SGLang") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror})") from None


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def _class_bases(tree: ast.Module, cls: str) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [ast.unparse(b) for b in node.bases]
    return []


def _first_if_is_decode(fn: ast.FunctionDef) -> bool:
    """True when the entry method branches on ``...forward_mode.is_decode()`` (V1a / early V2)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and "is_decode()" in ast.unparse(node.test):
            return True
    return False


def _v1_family(path: Path) -> str | None:
    if not path.is_file():
        return None
    tree = _tree(path)
    old = _method(tree, "EAGLEWorker", "forward_batch_speculative_generation")
    if old is not None:
        return "V1a" if _first_if_is_decode(old) else "V1b"
    if _method(tree, "EAGLEWorker", "forward_batch_generation") is not None:
        return "V1c"
    return "V1?"


def _v2_family(path: Path, has_common: bool) -> str:
    tree = _tree(path)
    if "EAGLEWorker" in _class_bases(tree, "EAGLEWorkerV2"):
        return "V2-beta"
    entry = _method(tree, "EAGLEWorkerV2", "forward_batch_generation")
    if entry is None:
        return "V2?"
    first_arg = entry.args.args[1].arg if len(entry.args.args) > 1 else ""
    if first_arg == "model_worker_batch":
        return "V2a"
    if has_common:
        return "V2c"
    return "V2b"


def _module_version(path: Path, names: tuple[str, ...]) -> str | None:
    """A string assigned at module level to one of ``names`` (stdlib ``ast``): ``_version.py``
    (setuptools-scm writes ``__version__ = version = '0.5.23'``) or an old plain ``version.py``.
    Assignments inside ``try``/``except`` are fallbacks (0.5.x version.py: ``"0.0.0.dev0"``), skipped."""
    if not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        value = getattr(node, "value", None)
        if (any(isinstance(t, ast.Name) and t.id in names for t in targets)
                and isinstance(value, ast.Constant) and isinstance(value.value, str)):
            return value.value
    return None


def _version_from_tree(root: Path, package_dir: Path) -> str | None:
    """dist-info METADATA, else ``_version.py`` (a bare unpack, a built source checkout), else a
    plain top-level ``__version__`` in ``version.py`` (releases before 0.5). Never the fallback."""
    for meta in sorted(root.glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return (_module_version(package_dir / "_version.py", ("__version__", "version"))
            or _module_version(package_dir / "version.py", ("__version__",)))


def _checked_version(version: str | None, where: str) -> str:
    """Refuse, with the reason, a version we cannot trust to pick the patch set."""
    if version is None:
        raise UserError(f"{where}: cannot tell the SGLang version (no dist-info METADATA, no "
                        "sglang/_version.py, no plain __version__ in sglang/version.py); a bare source "
                        "checkout: build it once (`pip install -e python`) so setuptools-scm writes "
                        "_version.py")
    try:
        parse_version(version)
    except UserError:
        raise UserError(f"{where}: SGLang version {version!r} is not a release number") from None
    if version.startswith("0.0.0"):
        raise UserError(f"{where}: SGLang version {version} is setuptools-scm's fallback (a source "
                        "checkout without git metadata): the patch set depends on the release, so it is "
                        "refused; build from a git clone or use a release")
    return version


def locate(sglang_root: str | Path | None = None) -> SGLangEnv:
    """The SGLang to work on: ``sglang_root`` (a folder holding ``sglang/``, or ``sglang/`` itself)
    or else the one installed in this Python, found with ``find_spec`` (which does not import it)."""
    if sglang_root is not None:
        root = Path(sglang_root).expanduser().resolve()
        if not root.is_dir():
            raise UserError(f"--sglang-root {root}: no such folder", exit_code=2)
        if (root / "srt").is_dir() and root.name == "sglang":
            root = root.parent
        package_dir = root / "sglang"
        if not (package_dir / "srt").is_dir():
            raise UserError(f"--sglang-root {root}: no sglang/srt/ inside; point it at an unpacked SGLang", exit_code=2)
        version = _checked_version(_version_from_tree(root, package_dir), f"--sglang-root {root}")
        return SGLangEnv(package_dir=package_dir, version=version, source="--sglang-root")

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("SGLang is not installed in this Python; install it or pass --sglang-root PATH")
    package_dir = Path(next(iter(spec.submodule_search_locations))).resolve()
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is None or version.startswith("0.0.0"):  # no metadata, or an scm fallback in it
        version = _version_from_tree(package_dir.parent, package_dir) or version
    version = _checked_version(version, f"SGLang at {package_dir}")
    env = SGLangEnv(package_dir=package_dir, version=version, source="installed")
    if not (package_dir / "srt").is_dir():
        raise UserError(f"SGLang at {package_dir} has no srt/ package (runtime not installed?)")
    return env
