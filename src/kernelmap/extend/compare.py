"""`verify`: run a model with and without overrides and compare: the largest
absolute and relative differences of the outputs (and, with `backward`, of the
gradients of the input and every parameter), the median time of each, and how
many calls each override received.

The model file convention: a Python file defining
  - `example_input()` -> a tensor, or a tuple of tensors passed positionally;
  - the model factory: `model()` -> a module or callable; or, when there is no
    `model`, the one public function the file defines besides `example_input`
    (`resnet50` in examples/resnet50.py); or any function named by `model_fn`.
Factories are called with no arguments, after `torch.manual_seed(0)`. The model
runs in eval mode (batch norm uses its running statistics), so runs compare.

Timings are medians over `runs` runs, after one untimed warm-up run of the
original; the first timed run of each side gives the outputs compared. Relative error is normwise: max |custom - original| / max |original|, per
tensor, the largest over tensors.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelmap.errors import BadInput
from kernelmap.extend.build import load_extension
from kernelmap.extend.overrides import Override, check_override_schema, override, resolve_op

__all__ = ["Difference", "VerifyReport", "verify", "load_model_file", "parse_override", "parse_extra_args"]


@dataclass(frozen=True)
class Difference:
    """How far the overridden run is from the original, over a set of tensors."""

    max_abs: float
    max_rel: float
    worst: str  # the tensor with the largest absolute difference: "output[0]", "layer1.0.conv1.weight"
    count: int  # tensors compared

    @property
    def identical(self) -> bool:
        return self.max_abs == 0.0

    def to_json(self) -> dict[str, Any]:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "worst": self.worst, "tensors": self.count, "identical": self.identical}


@dataclass(frozen=True)
class VerifyReport:
    model: str
    overrides: tuple[Override, ...]
    runs: int
    backward: bool
    outputs: Difference
    gradients: Difference | None  # with backward only
    original_s: float  # median seconds per run (forward, or forward and backward)
    override_s: float
    calls_per_run: Mapping[str, int] = field(default_factory=dict)  # "aten::convolution" -> calls in one run

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "overrides": [o.to_json() for o in self.overrides],
            "runs": self.runs,
            "backward": self.backward,
            "outputs": self.outputs.to_json(),
            "gradients": self.gradients.to_json() if self.gradients else None,
            "time_s": {"original": self.original_s, "override": self.override_s},
            "calls_per_run": dict(self.calls_per_run),
        }

    def lines(self) -> list[str]:
        """The report as text, one fact a line."""

        def diff(label: str, d: Difference) -> str:
            verdict = "identical" if d.identical else f"differ (worst: {d.worst})"
            return f"{label:10s} max abs {d.max_abs:.3e}  max rel {d.max_rel:.3e}  over {d.count} tensor(s): {verdict}"

        out = [f"model      {self.model}"]
        for o in self.overrides:
            extra = "".join(f" {k}={v!r}" for k, v in o.extra_args.items())
            out.append(f"override   {o.op} -> {o.target} for {o.key}{extra}")
        out.append(diff("outputs", self.outputs))
        if self.gradients is not None:
            out.append(diff("gradients", self.gradients))
        what = "forward+backward" if self.backward else "forward"
        ratio = self.override_s / self.original_s if self.original_s else float("nan")
        out.append(
            f"time       original {self.original_s * 1e3:.2f} ms, override {self.override_s * 1e3:.2f} ms "
            f"({ratio:.2f}x; median of {self.runs} {what} run(s))"
        )
        for op, calls in self.calls_per_run.items():
            out.append(f"calls      {op}: {calls} per run routed to the override")
        return out


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
        except (ValueError, SyntaxError):
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
    spec.loader.exec_module(module)
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


def _leaves(value, prefix: str) -> list[tuple[str, Any]]:
    import torch

    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in _leaves(v, f"{prefix}[{i}]")]
    if isinstance(value, Mapping):
        return [x for k, v in value.items() for x in _leaves(v, f"{prefix}[{k!r}]")]
    return []


def _difference(mine: list[tuple[str, Any]], theirs: list[tuple[str, Any]]) -> Difference:
    if [n for n, _ in mine] != [n for n, _ in theirs]:
        raise BadInput("the overridden run returned other tensors than the original run")
    max_abs, max_rel, worst = 0.0, 0.0, ""
    for (name, a), (_, b) in zip(mine, theirs):
        if a is None or b is None or a.shape != b.shape:
            shape_a, shape_b = getattr(a, "shape", None), getattr(b, "shape", None)
            raise BadInput(f"{name}: shape {tuple(shape_a) if shape_a is not None else None} with the override, "
                           f"{tuple(shape_b) if shape_b is not None else None} without")
        if a.numel() == 0:
            continue
        d = (a.double() - b.double()).abs()
        if d.isnan().any() and not (a.isnan() == b.isnan()).all():
            abs_err = float("inf")
        else:
            abs_err = float(d.nan_to_num(0.0).max())
        scale = float(b.double().abs().nan_to_num(0.0).max())
        rel_err = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else float("inf"))
        if abs_err > max_abs:
            max_abs, worst = abs_err, name
        max_rel = max(max_rel, rel_err)
    return Difference(max_abs, max_rel, worst, len(mine))


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
) -> VerifyReport:
    """Run the model of `model_file` without, then with, `overrides`
    ({"aten::convolution": "kernelmap_ext::myconv"}) for dispatch key `key`, and
    compare. `load` lists libraries or scaffolded folders to load first.
    `extra_args` go to every override whose custom operator takes them."""
    import torch

    if runs < 1:
        raise BadInput(f"--runs must be at least 1, not {runs}")
    if not overrides:
        raise BadInput("give at least one override: --override aten::convolution=kernelmap_ext::myconv")
    for item in load:
        load_extension(item)
    # every override is checked (schema, extra arguments) before the model is even built
    plan = _plan(overrides, dict(extra_args or {}))
    factory, example = load_model_file(model_file, model_fn)
    torch.manual_seed(0)
    model = factory()
    if isinstance(model, torch.nn.Module):
        model.eval()
    torch.manual_seed(0)
    inputs = example()
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    params = list(model.named_parameters()) if isinstance(model, torch.nn.Module) else []

    def run_once():
        if not backward:
            with torch.no_grad():
                return _leaves(model(*inputs), "output"), []
        for _, p in params:
            p.grad = None
        xs = tuple(x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x for x in inputs)
        outs = _leaves(model(*xs), "output")
        diffable = [(n, o) for n, o in outs if o.requires_grad]
        gen = torch.Generator().manual_seed(1)
        grads_out = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for _, o in diffable]
        torch.autograd.backward([o for _, o in diffable], grads_out)
        grads = [(f"input[{i}].grad", x.grad) for i, x in enumerate(xs) if isinstance(x, torch.Tensor) and x.grad is not None]
        grads += [(f"{n}.grad", p.grad) for n, p in params if p.grad is not None]
        return [(n, o.detach()) for n, o in outs], [(n, g.detach().clone()) for n, g in grads]

    def timed() -> tuple[list, list, float]:
        results, times = None, []
        for _ in range(runs):
            t0 = time.perf_counter()
            result = run_once()
            times.append(time.perf_counter() - t0)
            results = results or result  # the first run's results are the ones compared
        assert results is not None
        return results[0], results[1], statistics.median(times)

    run_once()  # warm-up, untimed: first-call costs (allocator, thread pool, lazy init) fall on neither side
    base_out, base_grads, base_s = timed()
    with contextlib.ExitStack() as stack:
        active = [stack.enter_context(override(op, target, key=key, extra_args=wanted)) for op, target, wanted in plan]
        mine_out, mine_grads, mine_s = timed()
    calls = {o.op: o.calls // runs for o in active}
    return VerifyReport(
        model=str(model_file),
        overrides=tuple(active),
        runs=runs,
        backward=backward,
        outputs=_difference(mine_out, base_out),
        gradients=_difference(mine_grads, base_grads) if backward else None,
        original_s=base_s,
        override_s=mine_s,
        calls_per_run=calls,
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
