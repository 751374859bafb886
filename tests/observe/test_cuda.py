"""The CUDA host-stack path, on recorded stacks: the launches of a real
Kineto trace (tests/trace/data, recorded on a GPU), each nested in its
operators as the trace records them, joined to the kernels the GPU ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelmap.model import NodeKind
from kernelmap.observe.cuda import HostStack, host_kind, join_launches, launch_tree, read_kineto

from tests.observe.conftest import walk

TRACE = Path(__file__).resolve().parents[1] / "trace" / "data" / "hta-timeline_analysis-sampled_rank-0.json.gz"


@pytest.fixture(scope="module")
def recorded():
    return read_kineto(TRACE)


def test_every_launch_meets_the_kernel_it_ran(recorded):
    kernels, stacks = recorded
    assert stacks and kernels
    tree = join_launches(stacks, kernels)
    names = {k.name for k in kernels}
    by_corr = {k.correlation: k.name for k in kernels}
    shown = [(n, path) for n, path in walk(tree) if n.kind is NodeKind.GPU_KERNEL]
    assert shown
    for node, path in shown:
        assert node.name in names
        assert path[-2].kind is NodeKind.RUNTIME and path[-2].name.startswith("cuda")
        assert node.attrs["linked_by"] == "correlation"
    assert sum(n.attrs["hits"] for n, _ in shown) == sum(1 for s in stacks if s.correlation in by_corr)
    # a launch made inside an aten operator hangs under that operator
    assert any(p.kind is NodeKind.OPERATOR for n, path in shown for p in path)


def test_gdb_stacks_join_by_launch_order(recorded):
    """Stacks captured under gdb carry no correlation: the i-th launch is the i-th kernel."""
    kernels, _ = recorded
    ordered = sorted(kernels, key=lambda k: k.correlation)[:3]
    stacks = [HostStack(("at::native::cudnn_convolution", "cudnnConvolutionForward", "cudaLaunchKernel")) for _ in ordered]
    tree = join_launches(stacks, ordered)
    [launch] = [n for n, _ in walk(tree) if n.kind is NodeKind.RUNTIME]
    assert {c.name for c in launch.children} == {k.name for k in ordered}
    assert all(c.attrs["linked_by"] == "launch order" for c in launch.children)
    assert host_kind("cudnnConvolutionForward") is NodeKind.VENDOR and host_kind("cublasLtMatmul") is NodeKind.VENDOR


# --- host stacks recorded on a GPU (scripts/record_cuda_launches.py) --------------------------------

RECORDED = Path(__file__).resolve().parent / "data" / "cuda-launches-h200.jsonl.gz"


@pytest.fixture(scope="module")
def launches():
    from kernelmap.observe.cuda import read_recorded

    return read_recorded(RECORDED)


def _raw_stops():
    import gzip
    import json

    with gzip.open(RECORDED, "rt") as f:
        lines = [json.loads(line) for line in f]
    table = lines[1]["frames"]
    return {r["call"]: [[table[k] for k in s["frames"]] for s in r["stacks"]] for r in lines[2:]}


def test_a_runtime_launch_stopped_twice_is_one_launch(launches):
    """cudaLaunchKernel calls cuLaunchKernel: the driver's stop under it is dropped; cuDNN's and cuBLAS's own
    driver launches (no runtime frame below them) are kept."""
    header, calls = launches
    raw = _raw_stops()
    for call in calls:
        stops = raw[call.call]
        nested = [s for s in stops if any(n and n.split("(")[0] in ("cudaLaunchKernel", "cudaLaunchKernelExC") for n, _ in s[:-1])]
        assert len(call.stacks) == len(stops) - len(nested)
        for st in call.stacks:
            assert st.frames[0].name.split("(")[0] in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
            assert not any(f.name and f.name.split("(")[0].startswith(("cudaLaunch", "cuLaunch")) for f in st.frames[1:])
    assert header["gpu"] and "+cu" in header["torch"]  # a CUDA build's recording


def test_recorded_launch_stacks_reach_the_vendor_entry_and_the_launch(launches, source_map):
    """Each launch's host stack, joined to the 2.6.0 tree: the binding, the operator's entry, the CUDA kernel's
    definition at its file:line, the vendor entry (a library outside the tree) and the launch at the bottom."""
    from tests.observe.conftest import holds_function

    header, calls = launches
    by_call = {c.call: c for c in calls}
    raw = _raw_stops()
    checked = 0
    for name, call in by_call.items():
        tree = launch_tree(header, call, source_map)
        leaves = [(n, p) for n, p in walk(tree) if not n.children]
        assert sum(n.attrs["hits"] for n, _ in leaves) == len(call.stacks)  # the same host stack twice is one path, hit twice
        for leaf, path in leaves:
            assert leaf.kind is NodeKind.RUNTIME and leaf.name.startswith(("cudaLaunch", "cuLaunch"))
            kinds = [n.kind for n in path]
            assert NodeKind.BINDING in kinds and NodeKind.OPS_ENTRY in kinds
            for node in path[1:]:
                if node.location is not None:
                    assert holds_function(node), (node.name, node.location)
                    checked += 1
                elif node.kind in (NodeKind.VENDOR, NodeKind.RUNTIME):
                    assert "outside the tree" in node.attrs["source_reason"]
        # every library frame the debugger named is in the tree, in order (the unnamed ones are folded)
        for stop in raw[name]:
            named = [n.split("(")[0] for n, lib in stop if n and lib and lib.startswith(("libcudnn", "libcublas"))]
            shown = {n.name for n, _ in walk(tree) if n.kind is NodeKind.VENDOR}
            assert set(named) <= {s.split("(")[0] for s in shown}
    assert checked >= 10
    conv = launch_tree(header, by_call["torch.nn.Conv2d"], source_map)
    vendor = [p for n, p in walk(conv) if n.name == "cudnnBackendExecute"]
    assert vendor, "the cuDNN entry under conv2d"
    assert [n.name for n in vendor[0] if n.name.startswith("at::native::")][-1] == "at::native::run_conv_plan"
    mm = launch_tree(header, by_call["torch.mm"], source_map)
    assert any(n.name == "cublasSgemm_v2" for n, _ in walk(mm))


def test_a_recording_without_the_plain_runs_trace_says_there_are_no_kernel_names(launches, source_map):
    header, calls = launches
    tree = launch_tree(header, calls[0], source_map)
    assert not [n for n, _ in walk(tree) if n.kind is NodeKind.GPU_KERNEL]
    assert any("no kernel names" in n for n in tree.notes)
    assert any(header["gpu"] in n for n in tree.notes)


def test_launches_join_the_plain_runs_kernels_by_order(launches, source_map, tmp_path):
    """A recording with the plain run's trace (as the script now keeps): the i-th launch meets the i-th
    launch's kernel of that trace, by correlation id within it."""
    import gzip
    import json

    from kernelmap.observe.cuda import read_recorded

    with gzip.open(RECORDED, "rt") as f:
        lines = [json.loads(line) for line in f]
    names = {}
    for r in lines[2:]:
        count = len(read_recorded(RECORDED)[1][lines[2:].index(r)].stacks)
        launches_ = [{"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": i, "correlation": 100 + i} for i in range(count)]
        kernels = [{"name": f"{r['call']} kernel {i}", "correlation": 100 + i, "dur": 2.0} for i in reversed(range(count))]
        r["trace"] = {"launches": launches_, "kernels": kernels, "ops": []}
        names[r["call"]] = [k["name"] for k in sorted(kernels, key=lambda k: k["correlation"])]
    path = tmp_path / "with-trace.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in lines)
    header, calls = read_recorded(path)
    for call in calls:
        tree = launch_tree(header, call, source_map)
        shown = [(n, p) for n, p in walk(tree) if n.kind is NodeKind.GPU_KERNEL]
        assert sorted(n.name for n, _ in shown) == sorted(names[call.call])
        for n, p in shown:
            assert p[-2].kind is NodeKind.RUNTIME and n.attrs["linked_by"] == "launch order"
        # in launch order: the i-th stop's kernel is the i-th launch's
        assert [k.name for k in call.kernels] == names[call.call]


def test_a_cuda_librarys_frame_is_placed_at_the_definition_the_cuda_build_compiles(launches, source_map, indexed_tree):
    """cudnn_convolution is defined twice (cudnn/ConvShared.cpp under AT_CUDNN_ENABLED, ConvPlaceholders.cpp
    under its negation), add_kernel in UfuncCPUKernel_add.cpp and UfuncCUDA_add.cu: a frame of libtorch_cuda
    is placed at the one the CUDA build compiles (Note [the definition a library holds])."""
    from kernelmap.source.config import build_config

    header, calls = launches
    tree = launch_tree(header, calls, source_map)
    cuda = build_config(indexed_tree.root, "cuda")
    several = 0
    for node, _ in walk(tree):
        if node.attrs.get("library_file") != "libtorch_cuda.so" or node.location is None or node.location.origin.kind == "generated":
            continue
        defs = source_map.index.definitions(node.name.removesuffix("::lambda"))
        if len(defs) < 2:
            continue
        [shown] = [d for d in defs if (d.location.path, d.location.line) == (node.location.path, node.location.line)]
        assert cuda.evaluate(shown.symbol.condition) is not False, (node.name, shown.symbol.condition)
        several += any(cuda.evaluate(d.symbol.condition) is False for d in defs)  # a definition the CUDA build leaves out, passed over
    assert several >= 2
    generated = [n for n, _ in walk(tree) if n.name == "at::native::add_kernel"]
    assert generated and all(n.location.path.endswith(".cu") for n in generated)


def test_launches_bad_input_is_one_line(tmp_path):
    from tests.conftest import run_kernelmap

    bad = tmp_path / "not-a-recording.jsonl.gz"
    bad.write_text("plain text")
    for args, says in (([str(tmp_path / "missing.gz")], "no such recording"), ([str(bad)], "is not a recording"),
                       ([str(RECORDED), "torch.nope"], "holds no call 'torch.nope'")):
        result = run_kernelmap("observe", "--launches", *args)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        [line] = result.stderr.strip().splitlines()
        assert says in line
