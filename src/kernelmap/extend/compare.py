"""`verify`: run a model with and without overrides and give a verdict: per
tensor of the outputs (and, with `backward`, of the gradients of the input and
every parameter) how far the overridden run is from the original and whether
that is within tolerance (Note [verify tolerances]), the time of each side
split into forward and backward, and per overridden operator: calls routed,
its own error on the calls it got (the tensor farthest from its tolerance) and
time, whether the backward re-runs the original, and, when it got no calls,
the operators of its kind that the model does run.

The model file convention: a Python file defining
  - `example_input()` -> a tensor, or a tuple of tensors passed positionally;
  - the model factory: `model()` -> a module or callable; or, when there is no
    `model`, the one public function the file defines besides `example_input`
    (`resnet50` in examples/resnet50.py); or any function named by `model_fn`.
Factories are called with no arguments, after `torch.manual_seed(0)`. The model
runs in eval mode (batch norm uses its running statistics), so runs compare.

Note [verify runs]
TensorFloat-32 is off in cuDNN and cuBLAS while verify runs, so float32 is
compared at float32 precision on a GPU too. One untimed warm-up run of the
original; `runs` timed runs of the original (forward and backward timed
apart); with the overrides installed, one probe run under torch.profiler that
keeps the arguments and results of the first calls of each override and
records which operators ran; then `runs` timed runs. The probe run's
results are the ones compared. After the overrides are removed, the kept calls
are replayed through the original operator and the override alone, which gives
each operator's own error and time. The error of a tensor is reported as its
largest absolute difference, that over the largest |original| (max rel), the
relative norm of the difference, and the share of its tolerance it uses.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmap.model import Answer
from kernelmap.errors import BadInput
from kernelmap.extend.build import load_extension
from kernelmap.extend.overrides import Override, check_override_schema, override, resolve_op

__all__ = ["TensorDifference", "Difference", "Timing", "OpReport", "VerifyReport", "verify", "load_model_file", "parse_override",
           "parse_extra_args", "ops_like"]

FORMAT = "verify/2"
SAMPLES = 16  # calls of each override kept in the probe run for its own error and time


# Note [verify tolerances]
# Two rules, one per question.
# Each override's own calls (the kept arguments replayed through the original
# and the override alone) are held to torch.testing.assert_close's rule, per
# element: |mine - original| <= atol + rtol * |original|, with its defaults
# per dtype (float32: rtol 1.3e-6, atol 1e-5; float16: 1e-3, 1e-5; bfloat16:
# 1.6e-2, 1e-5; float64: 1e-7, 1e-7; integers and bool: exact), NaN matching
# NaN, and the same dtype on both sides.
# The model's outputs and gradients are held to the same tolerances in norm,
# per tensor: ||mine - original||_2 <= atol * sqrt(n) + rtol * ||original||_2.
# A correct kernel that sums in another order (a direct convolution, a batch
# norm's own loop) moves each result by a few ulps of the terms it sums, and
# over fifty layers an element that cancels to near zero keeps an error
# that is tiny beside the tensor but larger than atol + rtol * |itself|: the
# per-element rule then fails the unmodified reference kernels on ResNet-50
# (max |d| 3.8e-5 beside outputs of ~100). The norm of the difference is what
# rounding bounds; the rule is implied by the per-element one (a tensor within
# element by element is within in norm), so it never fails what assert_close
# passes. A kernel off by 1e-3 is 1e-3 off in norm, about 770 times float32's rtol.
# The alternative, the unmodified reference's own run-to-run spread, is zero
# on a CPU (the same kernels in the same order give the same bits), which
# would pass nothing that reorders a sum.

RULES = ("elementwise", "norm")


@dataclass(frozen=True)
class TensorDifference:
    """One tensor of the overridden run against the same tensor of the original
    run (Note [verify tolerances])."""

    name: str  # "output", "output[0]", "layer1.0.conv1.weight.grad", "call 3[0]"
    dtype: str  # the original's: "float32"
    shape: tuple[int, ...]
    max_abs: float  # max |mine - original|
    max_rel: float  # max |mine - original| / max |original|
    norm_rel: float  # ||mine - original||_2 / ||original||_2
    rtol: float  # the tolerances applied: given, else assert_close's for the dtype
    atol: float
    rule: str  # "elementwise" or "norm"
    share: float  # the difference over what the rule allows (the worst element, or the norm): within iff <= 1
    mismatch: str = ""  # what no tolerance covers: "dtype float64, the original float32", "NaN where the original has none"

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"a tolerance rule is one of {', '.join(RULES)}, not {self.rule!r}")

    @property
    def within(self) -> bool:
        return not self.mismatch and self.share <= 1.0

    @property
    def identical(self) -> bool:
        return not self.mismatch and self.max_abs == 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "max_abs": _num(self.max_abs),
                "max_rel": _num(self.max_rel), "norm_rel": _num(self.norm_rel), "rtol": self.rtol, "atol": self.atol,
                "rule": self.rule, "share": _num(self.share), "mismatch": self.mismatch, "within": self.within,
                "identical": self.identical}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TensorDifference:
        return cls(d["name"], d["dtype"], tuple(d["shape"]), float(d["max_abs"]), float(d["max_rel"]), float(d["norm_rel"]),
                   float(d["rtol"]), float(d["atol"]), d["rule"], float(d["share"]), d.get("mismatch", ""))


@dataclass(frozen=True)
class Difference:
    """How far the overridden run is from the original, tensor by tensor, under one rule."""

    rule: str  # "elementwise" (each override's calls) or "norm" (the model's outputs and gradients)
    tensors: tuple[TensorDifference, ...]

    @property
    def count(self) -> int:
        return len(self.tensors)

    @property
    def within(self) -> bool:
        return all(t.within for t in self.tensors)

    @property
    def identical(self) -> bool:
        return all(t.identical for t in self.tensors)

    @property
    def outside(self) -> tuple[TensorDifference, ...]:
        """The tensors not within tolerance, the farthest first."""
        return tuple(sorted((t for t in self.tensors if not t.within), key=_farthest))

    @property
    def worst(self) -> TensorDifference | None:
        """The tensor farthest from its tolerance (a mismatch first): the one a summary names."""
        return min(self.tensors, key=_farthest) if self.tensors else None

    @property
    def max_abs(self) -> float:
        return max((t.max_abs for t in self.tensors), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((t.max_rel for t in self.tensors), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "identical": self.identical, "within": self.within,
                "tensors": [t.to_json() for t in self.tensors]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Difference:
        return cls(d["rule"], tuple(TensorDifference.from_json(t) for t in d["tensors"]))


def _farthest(t: TensorDifference) -> tuple[int, float, str]:
    return (0 if t.mismatch else 1, -t.share if t.share == t.share else float("-inf"), t.name)


def _num(x: float) -> float | str:
    """JSON has no inf or nan: those go as strings float() reads back."""
    return x if x == x and abs(x) != float("inf") else str(x)


@dataclass(frozen=True)
class Timing:
    """Median seconds per run of one side."""

    forward_s: float
    backward_s: float | None  # with backward only

    @property
    def total_s(self) -> float:
        return self.forward_s + (self.backward_s or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"forward_s": self.forward_s, "backward_s": self.backward_s}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Timing:
        return cls(d["forward_s"], d["backward_s"])


@dataclass(frozen=True)
class OpReport:
    """One overridden operator in a verify run."""

    op: str  # "aten::convolution"
    target: str  # "kernelmap_ext::myconv", or a Python qualname
    key: str
    extra_args: Mapping[str, Any]
    calls_per_run: int  # calls routed to the target in one forward (and backward) run
    backward_reruns: int  # calls of the original operator made during one backward of the overridden run
    error: Difference | None  # the target against the original on the calls it got (None: no calls)
    sampled: int  # calls that error and times are measured on
    original_s: float | None  # median seconds over the sampled calls, the original operator
    override_s: float | None  # the same calls, the target alone
    runs_instead: tuple[tuple[str, int], ...] = ()  # with no calls: operators of its kind that ran, calls per run

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op, "target": self.target, "key": self.key, "extra_args": dict(self.extra_args),
            "calls_per_run": self.calls_per_run, "backward_reruns": self.backward_reruns,
            "error": self.error.to_json() if self.error else None, "sampled": self.sampled,
            "time_s": {"original": self.original_s, "override": self.override_s},
            "runs_instead": [{"op": op, "calls_per_run": n} for op, n in self.runs_instead],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OpReport:
        return cls(d["op"], d["target"], d["key"], dict(d["extra_args"]), d["calls_per_run"], d["backward_reruns"],
                   Difference.from_json(d["error"]) if d["error"] else None, d["sampled"],
                   d["time_s"]["original"], d["time_s"]["override"],
                   tuple((r["op"], r["calls_per_run"]) for r in d["runs_instead"]))


@dataclass(frozen=True)
class VerifyReport(Answer):
    """The answer of `verify` (Note [verify runs])."""

    DOCUMENT = "verify"  # the renderer table's key; the document is verify/2

    model: str
    runs: int
    backward: bool
    rtol: float | None  # as given; None: assert_close's default for each tensor's dtype
    atol: float | None
    outputs: Difference
    gradients: Difference | None  # with backward only
    original: Timing
    override: Timing
    ops: tuple[OpReport, ...]

    @property
    def passed(self) -> bool:
        """Within tolerance (the model's results and each override's own), and every override
        received calls (else nothing of it was verified)."""
        return (self.outputs.within and (self.gradients is None or self.gradients.within)
                and all(o.calls_per_run > 0 and o.error is not None and o.error.within for o in self.ops))

    @property
    def calls_per_run(self) -> dict[str, int]:
        return {o.op: o.calls_per_run for o in self.ops}

    @property
    def original_s(self) -> float:
        return self.original.total_s

    @property
    def override_s(self) -> float:
        return self.override.total_s

    def to_json(self) -> dict[str, Any]:
        return {
            "kernelmap": FORMAT,
            "model": self.model,
            "runs": self.runs,
            "backward": self.backward,
            "rtol": self.rtol,
            "atol": self.atol,
            "passed": self.passed,
            "outputs": self.outputs.to_json(),
            "gradients": self.gradients.to_json() if self.gradients else None,
            "time_s": {"original": self.original.to_json(), "override": self.override.to_json()},
            "ops": [o.to_json() for o in self.ops],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> VerifyReport:
        if not isinstance(d, Mapping) or d.get("kernelmap") != FORMAT:
            found = d.get("kernelmap") if isinstance(d, Mapping) else type(d).__name__
            raise BadInput(f"not a {FORMAT} document (its kernelmap field is {found!r})")
        try:
            return cls(
                d["model"], d["runs"], d["backward"], d["rtol"], d["atol"], Difference.from_json(d["outputs"]),
                Difference.from_json(d["gradients"]) if d["gradients"] else None,
                Timing.from_json(d["time_s"]["original"]), Timing.from_json(d["time_s"]["override"]),
                tuple(OpReport.from_json(o) for o in d["ops"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"a {FORMAT} document with a missing or malformed field: {e}") from None


def parse_override(text: str) -> tuple[str, str]:
    """"aten::convolution=kernelmap_ext::myconv" -> (op, target)."""
    op, sep, target = text.partition("=")
    if not sep or not op.strip() or not target.strip():
        raise BadInput(f"--override takes OP=CUSTOM_OP (aten::convolution=kernelmap_ext::myconv), not {text!r}")
    return op.strip(), target.strip()


def parse_extra_args(texts) -> dict[str, Any]:
    """["scale=1.5", "flag=True"] -> {"scale": 1.5, "flag": True} (values are Python literals)."""
    import ast

    out: dict[str, Any] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name.strip().isidentifier():
            raise BadInput(f"--extra-args takes NAME=VALUE (scale=1.5), not {text!r}")
        try:
            out[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):  # hostile nesting is no literal either
            raise BadInput(f"--extra-args {name.strip()}: {value.strip()!r} is not a Python literal") from None
    return out


def load_model_file(path: str | Path, model_fn: str | None = None) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(model factory, example_input) from a model file (see the module's docstring)."""
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"no model file {path}")
    name = f"_kernelmap_model_{abs(hash(str(p.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise BadInput(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # the user's file, not an override: say so in one line (sys.exit at import too)
        del sys.modules[name]
        raise BadInput(f"model file {path} fails to load: {type(e).__name__}: {e}") from None
    example = getattr(module, "example_input", None)
    if not callable(example):
        raise BadInput(f"{path} defines no example_input() (it returns the model's input)")
    if model_fn is not None:
        factory = getattr(module, model_fn, None)
        if not callable(factory):
            raise BadInput(f"{path} defines no function {model_fn}()")
        return factory, example
    factory = getattr(module, "model", None)
    if callable(factory):
        return factory, example
    candidates = [
        f
        for n, f in vars(module).items()
        if inspect.isfunction(f) and f.__module__ == name and not n.startswith("_") and n != "example_input"
    ]
    if len(candidates) != 1:
        names = ", ".join(f.__name__ for f in candidates) or "none"
        raise BadInput(f"{path}: define model() (or name the factory with --model-fn); public functions found: {names}")
    return candidates[0], example


MAX_RUNS = 10_000  # a median needs a few; more than this is a typo, not a measurement


def _user_call(fn: Callable[[], Any], model_file) -> Any:
    """`fn()` of the user's model file; what it raises is the file's failure, in one line."""
    try:
        return fn()
    except (Exception, SystemExit) as e:
        raise BadInput(f"model file {model_file}: {getattr(fn, '__name__', 'a function')}() raised {type(e).__name__}: {e}") from None


def _leaves(value, prefix: str) -> list[tuple[str, Any]]:
    import torch

    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in _leaves(v, f"{prefix}[{i}]")]
    if isinstance(value, Mapping):
        return [x for k, v in value.items() for x in _leaves(v, f"{prefix}[{k!r}]")]
    return []


def _tolerance(t, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """assert_close's (rtol, atol) for a tensor: given values, else the default of its dtype."""
    from torch.testing._comparison import default_tolerances

    d_rtol, d_atol = default_tolerances(t)
    return (d_rtol if rtol is None else rtol), (d_atol if atol is None else atol)


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor_difference(name: str, mine, theirs, rule: str, rtol: float | None, atol: float | None) -> TensorDifference:
    """`mine` against `theirs` (the original's) under `rule` (Note [verify tolerances])."""
    import math

    import torch

    r, t = _tolerance(theirs, rtol, atol)
    shape = tuple(theirs.shape)

    def result(max_abs=0.0, max_rel=0.0, norm_rel=0.0, share=0.0, mismatch=""):
        return TensorDifference(name, _dtype_name(theirs.dtype), shape, max_abs, max_rel, norm_rel, r, t, rule, share, mismatch)

    if mine.dtype != theirs.dtype:
        return result(math.inf, math.inf, math.inf, math.inf,
                      f"dtype {_dtype_name(mine.dtype)}, the original's {_dtype_name(theirs.dtype)}")
    if theirs.numel() == 0:
        return result()
    wide = torch.complex128 if theirs.is_complex() else torch.float64
    a, b = mine.detach().cpu().to(wide), theirs.detach().cpu().to(wide)
    same = (a == b) | (a.isnan() & b.isnan())  # equal infinities and NaN beside NaN differ by nothing
    if bool((a.isnan() != b.isnan()).any()):
        return result(math.inf, math.inf, math.inf, math.inf, "NaN where the original has none, or the reverse")
    d = (a - b).abs().masked_fill(same, 0.0)
    if not bool(d.isfinite().all()):  # an infinity on one side only
        return result(math.inf, math.inf, math.inf, math.inf, "an infinity where the original has a finite value, or the reverse")
    scale = b.abs().masked_fill(~b.isfinite(), 0.0)
    max_abs = float(d.max())
    top = float(scale.max())
    max_rel = max_abs / top if top > 0 else (0.0 if max_abs == 0 else math.inf)
    d_norm, b_norm = float(torch.linalg.vector_norm(d)), float(torch.linalg.vector_norm(scale))
    norm_rel = d_norm / b_norm if b_norm > 0 else (0.0 if d_norm == 0 else math.inf)
    if rule == "elementwise":
        allowed = t + r * scale
        over = torch.where(allowed > 0, d / allowed, torch.where(d > 0, math.inf, 0.0))
        share = float(over.max())
    else:
        allowed = t * math.sqrt(theirs.numel()) + r * b_norm
        share = d_norm / allowed if allowed > 0 else (0.0 if d_norm == 0 else math.inf)
    return result(max_abs, max_rel, norm_rel, share)


def _difference(mine: list[tuple[str, Any]], theirs: list[tuple[str, Any]], rule: str, rtol: float | None = None,
                atol: float | None = None) -> Difference:
    if [n for n, _ in mine] != [n for n, _ in theirs]:
        raise BadInput("the overridden run returned other tensors than the original run")
    tensors = []
    for (name, a), (_, b) in zip(mine, theirs):
        if a is None or b is None or a.shape != b.shape:
            shape_a, shape_b = getattr(a, "shape", None), getattr(b, "shape", None)
            raise BadInput(f"{name}: shape {tuple(shape_a) if shape_a is not None else None} with the override, "
                           f"{tuple(shape_b) if shape_b is not None else None} without")
        tensors.append(_tensor_difference(name, a, b, rule, rtol, atol))
    return Difference(rule, tuple(tensors))


# Words of an operator's name that say which backend or variant it is, not what it computes:
# cudnn_batch_norm and native_batch_norm are both batch norms.
_VARIANT_WORDS = {"cudnn", "miopen", "mkldnn", "mps", "native", "legit", "no", "training", "impl", "index", "slow",
                  "forward", "nnpack", "thnn", "xnnpack", "cpu", "cuda", "out", "default", "functional", "backward"}


def ops_like(op: str, ran: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """The operators in `ran` ({"aten::native_batch_norm": 53, ...}) that compute what `op` computes,
    by the words of their names other than backend and variant words; most calls first."""
    def words(name: str) -> set[str]:
        base = name.split("::")[-1].split(".")[0]
        return {w for w in base.split("_") if w and w not in _VARIANT_WORDS}

    mine = words(op)
    base = op.split(".")[0]
    found = [(name, n) for name, n in ran.items() if name.split(".")[0] != base and mine and mine <= words(name)]
    return tuple(sorted(found, key=lambda x: (-x[1], x[0])))


def _profile(run: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """(run's result, calls per aten operator during it), from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    from kernelmap.trace.record import quiet_stderr

    prof = profile(activities=[ProfilerActivity.CPU])
    with quiet_stderr():  # the profiler's own "profiler_start" / "profiler_stop" lines
        prof.__enter__()
    try:
        result = run()
    finally:
        with quiet_stderr():
            prof.__exit__(None, None, None)
    counts: dict[str, int] = {}
    for event in prof.events():
        if re.match(r"\w+::\w+$", event.name or ""):
            counts[event.name] = counts.get(event.name, 0) + 1
    return result, counts


@contextlib.contextmanager
def _float32_as_float32():
    """TensorFloat-32 off in cuDNN and cuBLAS for the block, as it was after
    (Note [verify runs]): torch's defaults let cuDNN's float32 convolutions
    round their inputs to TF32's 10-bit mantissa, so an exact float32 kernel
    would differ from the original by about 5e-4 relative, far outside
    float32's tolerance. With TF32 off both sides compute in float32."""
    import torch

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def verify(
    model_file: str | Path,
    overrides: Mapping[str, str | Callable],
    *,
    key: str = "CPU",
    backward: bool = False,
    runs: int = 5,
    load: tuple[str | Path, ...] | list[str | Path] = (),
    extra_args: Mapping[str, Any] | None = None,
    model_fn: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> VerifyReport:
    """Run the model of `model_file` without, then with, `overrides`
    ({"aten::convolution": "kernelmap_ext::myconv"}) for dispatch key `key`, and
    compare (Note [verify runs]). `load` lists libraries or scaffolded folders
    to load first. `extra_args` go to every override whose custom operator
    takes them. `rtol`/`atol` default per dtype as in torch.testing.assert_close."""
    # what needs no torch first: importing it takes seconds, more on a busy machine
    if not Path(model_file).is_file():
        raise BadInput(f"no model file {model_file}")
    if not 1 <= runs <= MAX_RUNS:
        raise BadInput(f"--runs is 1 to {MAX_RUNS:,}, not {runs}")
    for name, value in (("--rtol", rtol), ("--atol", atol)):
        if value is not None and not (value >= 0 and value != float("inf")):
            raise BadInput(f"{name} must be a finite number >= 0, not {value}")
    if not overrides:
        raise BadInput("give at least one override: --override aten::convolution=kernelmap_ext::myconv")
    return _verify(model_file, overrides, key, backward, runs, load, extra_args, model_fn, rtol, atol)


@_float32_as_float32()
def _verify(model_file, overrides, key, backward, runs, load, extra_args, model_fn, rtol, atol) -> VerifyReport:
    """`verify` once its arguments are checked (TF32 off while it runs: Note [verify runs])."""
    import torch

    for item in load:
        load_extension(item)
    # the model file may itself define the custom operators; every override is
    # checked (schema, extra arguments) before the model is built
    factory, example = load_model_file(model_file, model_fn)
    plan = _plan(overrides, dict(extra_args or {}))
    torch.manual_seed(0)
    model = _user_call(factory, model_file)
    if not callable(model):
        raise BadInput(f"model file {model_file}: {getattr(factory, '__name__', 'the factory')}() returned a {type(model).__name__}, not a model")
    if isinstance(model, torch.nn.Module):
        model.eval()
    torch.manual_seed(0)
    inputs = _user_call(example, model_file)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    params = list(model.named_parameters()) if isinstance(model, torch.nn.Module) else []

    def forward():
        if not backward:
            with torch.no_grad():
                return None, _leaves(model(*inputs), "output")
        for _, p in params:
            p.grad = None
        xs = tuple(x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x for x in inputs)
        return xs, _leaves(model(*xs), "output")

    def backward_of(xs, outs):
        diffable = [(n, o) for n, o in outs if o.requires_grad]
        gen = torch.Generator().manual_seed(1)
        grads_out = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for _, o in diffable]
        torch.autograd.backward([o for _, o in diffable], grads_out)
        grads = [(f"input[{i}].grad", x.grad) for i, x in enumerate(xs) if isinstance(x, torch.Tensor) and x.grad is not None]
        grads += [(f"{n}.grad", p.grad) for n, p in params if p.grad is not None]
        return [(n, g.detach().clone()) for n, g in grads]

    def run_once():
        xs, outs = forward()
        grads = backward_of(xs, outs) if backward else []
        return [(n, o.detach()) for n, o in outs], grads

    def timed() -> Timing:
        fwd, bwd = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            xs, outs = forward()
            t1 = time.perf_counter()
            if backward:
                backward_of(xs, outs)
                bwd.append(time.perf_counter() - t1)
            fwd.append(t1 - t0)
        return Timing(statistics.median(fwd), statistics.median(bwd) if backward else None)

    try:  # the original model, no override yet: what it raises is the model file's failure
        base_out, base_grads = run_once()  # also the warm-up: first-call costs fall on neither side's timing
    except (Exception, SystemExit) as e:
        first = (str(e).splitlines() or [""])[0]
        raise BadInput(f"model file {model_file}: the model raised {type(e).__name__}: {first}") from None
    base_time = timed()
    with contextlib.ExitStack() as stack:
        active = [stack.enter_context(override(op, target, key=key, extra_args=wanted, warn_unused=False)) for op, target, wanted in plan]
        for o in active:
            o.record = SAMPLES
        (xs, outs), ran = _profile(forward)
        reruns: dict[str, int] = {}
        mine_grads: list = []
        if backward:
            mine_grads, ran_backward = _profile(lambda: backward_of(xs, outs))
            reruns = {o.op: ran_backward.get(o.op.split(".")[0], 0) for o in active}
        mine_out = [(n, o.detach()) for n, o in outs]
        probe_calls = {o.op: o.calls for o in active}  # forward and backward, as in every run
        for o in active:
            o.record = 0
            o.calls = 0
        mine_time = timed()
    ops = tuple(
        _op_report(o, target, probe_calls[o.op], reruns.get(o.op, 0), ran, runs, rtol, atol)
        for o, (_, target, _) in zip(active, plan)
    )
    return VerifyReport(
        model=str(model_file),
        runs=runs,
        backward=backward,
        rtol=rtol,
        atol=atol,
        outputs=_difference(mine_out, base_out, "norm", rtol, atol),
        gradients=_difference(mine_grads, base_grads, "norm", rtol, atol) if backward else None,
        original=base_time,
        override=mine_time,
        ops=ops,
    )


def _op_report(o: Override, fn: str | Callable, calls: int, reruns: int, ran: Mapping[str, int], runs: int,
               rtol: float | None, atol: float | None) -> OpReport:
    """One override's row: its own error and time, replayed on the calls it kept."""
    original = resolve_op(o.op)
    if not o.samples:
        return OpReport(o.op, o.target, o.key, dict(o.extra_args), calls, reruns, None, 0, None, None, ops_like(o.op, ran))
    target = resolve_op(fn) if isinstance(fn, str) else fn
    mine, theirs = [], []
    t_original, t_override = [], []
    import torch

    with torch.no_grad():
        for i, (args, kwargs, result) in enumerate(o.samples):
            theirs += _leaves(original(*args, **kwargs), f"call {i}")
            mine += _leaves(result, f"call {i}")
        for _ in range(runs):
            t0 = time.perf_counter()
            for args, kwargs, _ in o.samples:
                original(*args, **kwargs)
            t1 = time.perf_counter()
            for args, kwargs, _ in o.samples:
                target(*args, **kwargs, **o.extra_args)
            t_original.append(t1 - t0)
            t_override.append(time.perf_counter() - t1)
    return OpReport(
        o.op, o.target, o.key, dict(o.extra_args), calls, reruns,
        _difference(mine, theirs, "elementwise", rtol, atol), len(o.samples),
        statistics.median(t_original), statistics.median(t_override),
    )


def _plan(overrides: Mapping[str, str | Callable], extra: dict[str, Any]) -> list[tuple[str, str | Callable, dict[str, Any]]]:
    """(op, target, extra arguments it takes) per override, each checked as
    `override` will check it; every extra argument must go somewhere."""
    plan, taken = [], set()
    for op, target in overrides.items():
        original = resolve_op(op)
        if isinstance(target, str):
            target_op = resolve_op(target)
            takes = {a.name for a in target_op._schema.arguments} - {a.name for a in original._schema.arguments}
            wanted = {k: v for k, v in extra.items() if k in takes}
            check_override_schema(original._schema, target_op._schema, wanted)
        else:
            wanted = dict(extra)
        taken |= set(wanted)
        plan.append((op, target, wanted))
    unused = sorted(set(extra) - taken)
    if unused:
        raise BadInput(f"--extra-args {', '.join(unused)}: no override takes such an argument")
    return plan
