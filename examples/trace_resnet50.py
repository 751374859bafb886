"""Trace ResNet-50's forward and backward pass on the CPU and print what ran:
per operator the dispatch key and kernel that served it, per module and per
source file, then the top of the call tree.

    python examples/trace_resnet50.py            # summary and a shallow tree
    python examples/trace_resnet50.py --tree     # the whole tree
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from resnet50 import example_input, resnet50  # noqa: E402

from kernelmap.render import render  # noqa: E402
from kernelmap.trace import trace  # noqa: E402


def step(model: torch.nn.Module, x: torch.Tensor) -> None:
    """One training step's compute: forward, a scalar loss, backward."""
    model(x).sum().backward()


def main(argv: list[str]) -> None:
    torch.manual_seed(0)
    model = resnet50()
    x = example_input()
    step(model, x)  # warm up: first-call allocations stay out of the trace
    model.zero_grad(set_to_none=True)
    result = trace(step, model, x)
    print(result.summary().to_text(top=20, width=120))
    print(render(result.tree, "text", width=160, color=False, max_depth=None if "--tree" in argv else 11, min_us=0 if "--tree" in argv else 1000))


if __name__ == "__main__":
    main(sys.argv[1:])
