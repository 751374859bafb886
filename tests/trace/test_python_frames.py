"""Python frames of a trace read from a file: placed in the installed torch's
files only where their line lies in the function they name (a trace names no
torch version, and one recorded elsewhere may come from another)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from kernelmap.model import OriginKind
from kernelmap.trace import load

CUDA = Path(__file__).resolve().parent / "cuda"


def enclosing_def(lines: list[str], line: int) -> str | None:
    """The name of the innermost `def` around `line` (1-based), read from the
    indentation alone (independently of kernelmap's own reading, by ast)."""
    text = lines[line - 1]
    indent = len(text) - len(text.lstrip()) if text.strip() else 10**9
    for i in range(line - 1, -1, -1):
        m = re.match(r"^(\s*)(?:async\s+)?def\s+(\w+)", lines[i])
        if m and (len(m.group(1)) < indent or i == line - 1):
            return m.group(2)
        if lines[i].strip() and not lines[i].lstrip().startswith(("#", "@", ")")):
            indent = min(indent, len(lines[i]) - len(lines[i].lstrip()))
    return None


def python_frames(t):
    return [n for _, n in t.tree.walk() if n.kind == "python" and n.location is not None and n.location.path.startswith("torch/")]


def test_frames_of_another_torch_version_are_not_linked_to_the_installed_files():
    # Recorded on an H100 with torch 2.11; the installed torch is another version.
    t = load(CUDA / "resnet50_fwd_fp32_bench.json.gz")
    frames = python_frames(t)
    assert frames
    linked = [n for n in frames if n.location.origin is not None]
    unlinked = [n for n in frames if n.location.origin is None]
    for n in linked:  # each linked line lies in the function the frame names, in the installed file
        assert n.location.origin.kind is OriginKind.WHEEL
        lines = n.location.disk_path.read_text().splitlines()
        func = n.name.rsplit(".", 1)[-1]
        assert enclosing_def(lines, n.location.line) == func, (n.name, n.location)
    assert unlinked  # conv.py(552): forward is outside any forward of the installed conv.py
    names = {n.name for n in unlinked}
    assert any("Python frame name(s) of torch point at lines outside the function they name" in note for note in t.notes)
    for n in unlinked:
        assert n.location.url is None and n.location.disk_path is None
    assert "torch.nn.modules.conv.forward" in names


def test_a_frame_naming_a_line_outside_its_function_is_kept_as_the_trace_says(tmp_path):
    events = [
        {"ph": "X", "cat": "python_function", "name": "torch/nn/modules/conv.py(1): forward", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 5, "pid": 1, "tid": 1, "args": {}},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = load(path, keep_frames=True)
    [frame] = [n for n in python_frames(t) if n.name.endswith("conv.forward")]
    assert (frame.location.path, frame.location.line, frame.location.origin) == ("torch/nn/modules/conv.py", 1, None)
    assert any("1 Python frame name(s) of torch point at lines outside" in note for note in t.notes)


def test_a_frame_inside_its_function_is_linked(tmp_path):
    from kernelmap import env

    conv = env.torch_install().site_packages / "torch/nn/modules/conv.py"
    lines = conv.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if re.match(r"\s+def forward\(", text)) + 1
    events = [
        {"ph": "X", "cat": "python_function", "name": f"torch/nn/modules/conv.py({line}): forward", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 5, "pid": 1, "tid": 1, "args": {}},
    ]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    t = load(path, keep_frames=True)
    [frame] = [n for n in python_frames(t) if n.name.endswith("conv.forward")]
    assert frame.location.origin.kind is OriginKind.WHEEL and frame.location.disk_path == conv
    assert not any("Python frame name(s)" in note for note in t.notes)
