"""What a trace event is: the kind of node its category makes, the name the
node shows, and the Python frame a `python_function` event names, placed at
its line of its file (Note [trace tree shape] in trace/build.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from kernelmap.model import Location


HOST_CATEGORIES = {"python_function": 0, "user_annotation": 1, "cpu_op": 2, "cuda_runtime": 3, "cuda_driver": 3}
CONV_OPS = frozenset({"aten::_convolution", "aten::convolution_backward"})  # what select_conv_backend decides (Note [conv backend] in resolve)
_EPS = 0.002  # µs: ends rounded to the nanosecond may overshoot their parent by this much

_PY_FRAME = re.compile(r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
_BUILTIN = re.compile(r"^<built-in (?:method|function) (?P<name>[\w.]+)(?: of (?P<owner>[\w.]+) object)?")
# Python frames every module call passes through, and frames of the profiler
# and of kernelmap itself: spliced out of the tree (their children stay).
_SPLICED_FRAMES = re.compile(
    r"^(torch/nn/modules/module\.py\(\d+\): (_call_impl|_wrapped_call_impl|__getattr__|__call__)"
    r"|torch/profiler/|torch/autograd/profiler|kernelmap/|runpy\.py|<frozen runpy>|contextlib\.py"
    r"|torch/utils/_contextlib\.py|<built-in method _get_tracing_state|<built-in function exec>"
    r"|click/|kernelmap\(\d+\): <module>)"
)


class Attrs(Mapping):
    """A node's own attributes over the facts it shares with every call of the
    same operator (dispatch key, kernel, source...): one dict per distinct
    call instead of one copy per node. Keys starting with "_" stay private."""

    __slots__ = ("own", "shared")

    def __init__(self, own: dict[str, Any], shared: dict[str, Any]):
        self.own = own
        self.shared = shared

    def __getitem__(self, key: str) -> Any:
        if key in self.own:
            return self.own[key]
        if key[:1] != "_" and key in self.shared:
            return self.shared[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from self.own
        for key in self.shared:
            if key[:1] != "_" and key not in self.own:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    # Fast paths of Mapping's generic methods: the summary reads every node's facts.
    def get(self, key: str, default: Any = None) -> Any:
        own = self.own
        if key in own:
            return own[key]
        if key[:1] != "_":
            return self.shared.get(key, default)
        return default

    def __contains__(self, key: object) -> bool:
        return key in self.own or (isinstance(key, str) and key[:1] != "_" and key in self.shared)

    def __repr__(self) -> str:
        return repr(dict(self))


def classify(name: str, cat: str) -> str:
    """The CallNode kind of a trace event."""
    if cat == "python_function":
        if name.startswith("nn.Module: "):
            return "module"
        if name.startswith("<built-in"):
            return "builtin"
        return "python"
    if cat == "cpu_op":
        if name.startswith("autograd::engine::evaluate_function: "):
            return "autograd"
        if "::" in name and name.split("::", 1)[0] in ("aten", "prims", "quantized", "torchvision", "c10d", "_c10d_functional"):
            return "op"
        if name.startswith("torch::autograd::"):
            return "autograd"
        return "annotation"
    if cat == "user_annotation":
        return "annotation"
    if cat in ("cuda_runtime", "cuda_driver"):
        return "runtime"
    if cat == "kernel":
        return "gpu_kernel"
    if cat in ("gpu_memcpy", "gpu_memset"):
        return cat
    return "annotation"


def display_name(name: str, kind: str) -> str:
    """The name a node shows: `Conv2d_0` for `nn.Module: Conv2d_0`,
    `torch.conv2d` for `<built-in method conv2d of type object at 0x..>`,
    `ConvolutionBackward0` for the autograd engine's record."""
    if kind == "module":
        return name[len("nn.Module: ") :]
    if kind == "builtin":
        m = _BUILTIN.match(name)
        if m:
            owner = m["owner"]
            if owner == "Tensor":
                return f"Tensor.{m['name']}"
            if owner == "type":  # torch._C._VariableFunctions: the torch.* builtins
                return f"torch.{m['name']}"
            return m["name"] if owner is None else f"{owner}.{m['name']}"
        return name
    if kind == "python":
        m = _PY_FRAME.match(name)
        if m:
            module = m["path"].removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            return f"{module}.{m['func']}"
    if kind == "autograd" and name.startswith("autograd::engine::evaluate_function: "):
        return name.split(": ", 1)[1]
    return name


class PythonFrames:
    """Where the Python frames of a trace are (`torch/nn/modules/conv.py(552):
    forward`). Frames of torch are located in `origin`, the installed torch.
    A trace names no torch version, and one recorded elsewhere may come from
    another: with `check`, a frame is placed in the installed file only where
    its line lies in a function of its name there, and kept as the trace
    names it otherwise (counted in `mismatched`, for one note)."""

    def __init__(self, origin, check: bool):
        self.origin = origin
        self.check = check
        self.mismatched = 0
        self._spans: dict[str, dict[str, list[tuple[int, int]]] | None] = {}

    def location(self, name: str) -> Location | None:
        m = _PY_FRAME.match(name)
        if not m or m["path"].startswith("/") or m["path"].startswith("<"):
            return None
        path = m["path"]
        line = max(int(m["line"]), 1)
        if not path.startswith("torch/") or self.origin is None:
            return Location(path, line)
        if self.check and not self._in_function(path, line, m["func"]):
            self.mismatched += 1
            return Location(path, line)
        return Location(path, line, origin=self.origin)

    def _in_function(self, path: str, line: int, func: str) -> bool:
        spans = self._spans.get(path, False)
        if spans is False:
            spans = self._spans[path] = _function_spans(self.origin.disk_path(path))
        if spans is None:
            return False
        return any(first <= line <= last for first, last in spans.get(func, ()))


_UNPLACED = PythonFrames(None, check=False)  # no torch to place frames in


def _function_spans(file) -> dict[str, list[tuple[int, int]]] | None:
    """Name -> (first, last) lines of each function, lambda and comprehension
    of a Python file, and of the module itself (`<module>`); None when the file
    cannot be read or parsed. Kept in the cache by the file's path, size and
    mtime: parsing torch/nn/functional.py costs a third of a second, every
    import of a trace that names it."""
    import hashlib
    import json
    import os

    try:
        st = os.stat(file)
        from kernelmap import env

        key = hashlib.sha256(f"{os.path.realpath(file)}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:32]
        kept = env.cache_dir() / "trace" / "spans" / f"{key}.json"
    except (OSError, TypeError, ValueError):
        kept = None
    if kept is not None:
        try:
            return {k: [tuple(x) for x in v] for k, v in json.loads(kept.read_text()).items()}
        except (OSError, ValueError, TypeError, AttributeError):
            pass
    spans = _parsed_spans(file)
    if kept is not None and spans is not None:
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            tmp = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(spans))
            os.replace(tmp, kept)
        except OSError:
            pass  # an unwritable cache: parsed again next time
    return spans


def _parsed_spans(file) -> dict[str, list[tuple[int, int]]] | None:
    import ast

    try:
        text = file.read_text(encoding="utf-8") if file is not None else None
        tree = ast.parse(text) if text is not None else None
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return None
    if tree is None:
        return None
    spans: dict[str, list[tuple[int, int]]] = {"<module>": [(1, max(text.count("\n") + 1, 1))]}
    frames = {ast.Lambda: "<lambda>", ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>", ast.DictComp: "<dictcomp>",
              ast.GeneratorExp: "<genexpr>"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.setdefault(node.name, []).append((first, node.end_lineno or node.lineno))
        elif type(node) in frames:
            spans.setdefault(frames[type(node)], []).append((node.lineno, node.end_lineno or node.lineno))
    return spans
