"""Scaffolds of what really runs on a GPU and of real kernels: a
backend-specific operator (cudnn_batch_norm) gives a portable project whose own
tests pass on this CPU and whose override cannot call itself; the convolution's
direct kernel equals ATen on a seeded grid of shapes (groups, stride, padding,
dilation, 1/2/3-d, transposed), in Half, BFloat16 and channels_last too; its
tiled CUDA kernel compiles with nvcc; schemas carry the writes batch norm makes;
opcheck runs in every generated test file."""

from __future__ import annotations

import itertools
import random
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
import torch
from torch.utils.cpp_extension import COMMON_NVCC_FLAGS  # what torch's extension builds pass nvcc: no implicit Half/BFloat16 conversions

from kernelmap.extend import override, scaffold
from kernelmap.extend.families import BACKEND_OPS

from .conftest import build
from .test_build import run_generated_tests

pytestmark = pytest.mark.slow

NVCC = shutil.which("nvcc")


@pytest.fixture(scope="module")
def catalog():
    from kernelmap.catalog import load_catalog

    return load_catalog()


@pytest.fixture(scope="module")
def mycbn(projects):
    root = projects / "mycbn"
    scaffold("aten::cudnn_batch_norm", "mycbn", out=root, cuda=True)
    return build(root)


def test_cudnn_batch_norm_scaffold_is_portable_and_its_tests_pass_on_cpu(mycbn):
    """No file calls at::cudnn_batch_norm (it has a CUDA kernel only, and an
    override of it that calls it calls itself); the project's own tests, opcheck
    included, pass here."""
    for path in [*mycbn.root.glob("csrc/*"), *mycbn.root.glob("mycbn/*.py")]:
        text = path.read_text()
        assert "at::cudnn_batch_norm(" not in text and "aten.cudnn_batch_norm.default(" not in text, path
    assert "at::native_batch_norm(" in (mycbn.root / "csrc" / "mycbn_cuda.cpp").read_text()
    done = run_generated_tests(mycbn.root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", done.stdout).group(1))
    assert passed >= 30 and "failed" not in done.stdout, done.stdout[-2000:]


def test_an_override_of_cudnn_batch_norm_by_its_scaffold_does_not_recurse(mycbn):
    """The dispatcher sends aten::cudnn_batch_norm's CPU calls to the custom op,
    which computes through native_batch_norm: one call, the portable result,
    the running statistics updated once."""
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
    weight, bias = torch.rand(3, dtype=torch.float64) + 0.5, torch.randn(3, dtype=torch.float64)
    mean, var = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    mean2, var2 = mean.clone(), var.clone()
    with override("aten::cudnn_batch_norm", mycbn.op, key="CPU") as o:
        out = torch.ops.aten.cudnn_batch_norm(x, weight, bias, mean, var, True, 0.1, 1e-5)
    assert o.calls == 1
    expected = torch.ops.aten.native_batch_norm(x, weight, bias, mean2, var2, True, 0.1, 1e-5)
    torch.testing.assert_close(out[:3], expected)
    torch.testing.assert_close((mean, var), (mean2, var2))
    assert out[3].dtype == torch.uint8 and out[3].numel() == 0  # cuDNN's reserve space: nothing to keep


def test_in_evaluation_the_cudnn_batch_norm_scaffold_saves_no_statistics_as_cudnn(mycbn, tree_2_6):
    """cuDNN's batch norm returns save_mean and save_var empty in evaluation
    (read from the tree's cudnn/BatchNorm.cpp); the scaffold's reference did
    not, and its generated test failed on an H100 for that. Training returns
    them per channel."""
    source = (tree_2_6 / "aten/src/ATen/native/cudnn/BatchNorm.cpp").read_text()
    inference = source[source.index("cudnnBatchNormalizationForwardInference") - 400 : source.index("cudnnBatchNormalizationForwardInference")]
    assert "save_mean = at::empty({0}" in inference and "save_var = at::empty({0}" in inference
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
    weight, bias = torch.rand(3, dtype=torch.float64) + 0.5, torch.randn(3, dtype=torch.float64)
    for training, channels in ((False, 0), (True, 3)):
        mean, var = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
        out = torch.ops.kernelmap_ext.mycbn(x, weight, bias, mean, var, training, 0.1, 1e-5)
        assert out[1].shape == out[2].shape == (channels,), training
        assert out[3].numel() == 0


def test_schemas_keep_and_add_the_writes_batch_norm_makes(mycbn, catalog):
    """2.13's yaml marks nothing written in native/cudnn/miopen_batch_norm; the
    kernels write running_mean and running_var when training, so the custom
    operator says so; _native_batch_norm_legit's own (a!) are kept."""
    from kernelmap.extend.project import render_project

    schema = torch.ops.kernelmap_ext.mycbn.default._schema
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert written == {"running_mean", "running_var"}
    original = torch.ops.aten.cudnn_batch_norm.default._schema
    assert not any(a.alias_info is not None for a in original.arguments)  # what the yaml says
    for op in ("aten::native_batch_norm", "aten::miopen_batch_norm"):
        spec, _, _ = render_project(catalog.get(op), "bn")
        assert "Tensor(a!)? running_mean, Tensor(b!)? running_var" in spec.schema, spec.schema
    legit = catalog.get("aten::_native_batch_norm_legit")
    assert "Tensor(a!) running_mean" in legit.schema
    spec, _, _ = render_project(legit, "legit")
    assert "Tensor(a!) running_mean, Tensor(b!) running_var" in spec.schema


def test_every_generated_test_file_runs_the_whole_opcheck(tmp_path):
    for op in ("aten::relu", "aten::sum.dim_IntList", "aten::convolution", "aten::native_batch_norm", "aten::erfinv",
               *BACKEND_OPS):
        name = re.sub(r"\W", "_", op.split("::")[1])[:20] + "x"
        scaffold(op, name, out=tmp_path / name)
        text = (tmp_path / name / "tests" / f"test_{name}.py").read_text()
        call = re.search(r"torch\.library\.opcheck\(CUSTOM, [^\n]*\)", text)
        assert call is not None and "test_utils" not in call.group(0), op


@pytest.mark.parametrize("op", sorted(BACKEND_OPS))
def test_backend_scaffolds_never_call_their_own_operator(op, tmp_path):
    """cuDNN/MIOpen operators: every route computes through portable operators,
    with cuDNN/MIOpen off and the call's own flags (never constants)."""
    base = op.split("::")[1]
    out = tmp_path / "p"
    result = scaffold(op, "mine", out=out, cuda=True)
    assert result.family == BACKEND_OPS[op].family
    for rel in ("csrc/mine.cpp", "csrc/mine_cuda.cpp", "mine/__init__.py"):
        text = (out / rel).read_text()
        assert f"at::{base}(" not in text and f"aten.{base}.default(" not in text, rel
    if result.family == "convolution":
        cpp = (out / "csrc" / "mine.cpp").read_text()
        assert "/*cudnn_enabled=*/false" in cpp and ", benchmark, deterministic," in cpp
        assert not re.search(r"benchmark=\*/\s*(true|false)", cpp)


def _grid(seed=0, count=30):
    """Seeded random convolutions: dims, groups, stride, padding, dilation, transposed."""
    rng = random.Random(seed)
    for _ in range(count):
        dims = rng.choice([1, 2, 2, 3])
        groups = rng.choice([1, 1, 2, 3])
        c_in, c_out = groups * rng.randint(1, 3), groups * rng.randint(1, 3)
        transposed = rng.random() < 0.3
        k = [rng.randint(1, 3) for _ in range(dims)]
        stride = [rng.randint(1, 3) for _ in range(dims)]
        dilation = [rng.randint(1, 2) for _ in range(dims)]
        padding = [rng.randint(0, 2) for _ in range(dims)]
        size = [rng.randint(dilation[j] * (k[j] - 1) + 1, 9) for j in range(dims)]
        output_padding = [rng.randint(0, max(stride[j], dilation[j]) - 1) for j in range(dims)] if transposed else [0] * dims
        if transposed and any((size[j] - 1) * stride[j] - 2 * padding[j] + dilation[j] * (k[j] - 1) + output_padding[j] < 0
                              for j in range(dims)):
            continue  # no output element: ATen refuses it too
        n = rng.randint(1, 2)
        wshape = [c_in, c_out // groups, *k] if transposed else [c_out, c_in // groups, *k]
        yield dict(x=[n, c_in, *size], w=wshape, bias=rng.random() < 0.5, stride=stride, padding=padding,
                   dilation=dilation, transposed=transposed, output_padding=output_padding, groups=groups)


def _conv_args(case, dtype, gen, memory_format=None):
    x = torch.randn(case["x"], generator=gen, dtype=dtype)
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    w = torch.randn(case["w"], generator=gen, dtype=dtype)
    c_out = case["w"][1] * case["groups"] if case["transposed"] else case["w"][0]
    b = torch.randn(c_out, generator=gen, dtype=dtype) if case["bias"] else None
    return (x, w, b, case["stride"], case["padding"], case["dilation"], case["transposed"], case["output_padding"], case["groups"])


def test_the_direct_convolution_equals_aten_on_a_seeded_grid(mydconv):
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for i, case in enumerate(_grid()):
        args = _conv_args(case, torch.float64, gen)
        mine = torch.ops.kernelmap_ext.mydconv(*args)
        theirs = torch.ops.aten.convolution(*args)
        torch.testing.assert_close(mine, theirs, msg=lambda m, case=case: f"{case}: {m}")
        seen.add((len(case["x"]) - 2, case["groups"] > 1, max(case["dilation"]) > 1, max(case["stride"]) > 1,
                  case["transposed"]))
    dims = {s[0] for s in seen}
    assert dims == {1, 2, 3}
    assert any(s[1] and s[2] for s in seen)  # groups and dilation together
    assert any(s[4] for s in seen) and any(s[3] for s in seen)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 1e-2), (torch.bfloat16, 6e-2)], ids=["half", "bfloat16"])
def test_the_direct_convolution_computes_low_precision(mydconv, dtype, tol):
    gen = torch.Generator().manual_seed(1)
    for case in itertools.islice(_grid(seed=1), 8):
        args = _conv_args(case, torch.float32, gen)
        low = tuple(a.to(dtype) if isinstance(a, torch.Tensor) else a for a in args)
        mine = torch.ops.kernelmap_ext.mydconv(*low)
        assert mine.dtype == dtype
        theirs = torch.ops.aten.convolution(*(a.float() if isinstance(a, torch.Tensor) else a for a in low))
        torch.testing.assert_close(mine.float(), theirs, rtol=tol, atol=tol)


def test_the_direct_projects_own_tests_pass_half_precision_included(mydconv):
    """The generated tests hold Half and BFloat16 to ATen's own accuracy
    against float64 (on an H100 the same file passed on CUDA too: tests/trace/cuda)."""
    done = run_generated_tests(mydconv.root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "failed" not in done.stdout
    assert len(re.findall(r"test_half_precision_is_as_accurate_as_atens", (mydconv.root / "tests" / "test_mydconv.py").read_text())) == 1
    assert int(re.search(r"(\d+) passed", done.stdout).group(1)) >= 60


def test_the_dispatcher_names_the_extensions_own_file(mydconv):
    """Note [registrations from outside torch]: the CPU kernel is registered in
    the project's csrc/mydconv.cpp, named from the project (its kernelmap.json)
    with an origin of kind extension, on the line of its TORCH_LIBRARY_IMPL."""
    from kernelmap import dispatch
    from kernelmap.model import Location, OriginKind, OriginTable

    (cpu,) = [r.kernel for r in dispatch.registrations("kernelmap_ext::mydconv") if r.kernel.key == "CPU"]
    loc = cpu.location
    assert cpu.kind == "cpp" and loc.path == "csrc/mydconv.cpp"
    assert loc.origin.kind is OriginKind.EXTENSION and Path(loc.origin.root) == mydconv.root.resolve()
    assert loc.url is None  # in no public repository
    assert loc.disk_path.read_text().splitlines()[loc.line - 1].startswith("TORCH_LIBRARY_IMPL(kernelmap_ext, CPU, m)")
    origins = OriginTable()
    back = Location.from_json(loc.to_json(origins), OriginTable.from_json(origins.to_json()))
    assert back == loc


def test_a_trace_names_the_scaffolded_kernel_it_ran_from_the_project(mydconv):
    """tests/trace/cuda/extension: ResNet-50 on an H100 with every convolution
    routed to a scaffolded direct kernel `mydconv` (the same project as this
    module's). With that project loaded here, its kernel is found in its
    sources (Note [kernels of an extension]): at the line of its __global__
    definition in csrc/mydconv_kernel.cu, under the aten::convolution it served."""
    from kernelmap.trace import load

    fixture = Path(__file__).resolve().parents[1] / "trace/cuda/extension/resnet50_fwd_fp32_mydconv.json.gz"
    t = load(fixture)
    kernels = [n for _, n in t.tree.walk() if n.kind == "gpu_kernel" and "mydconv_conv2d_kernel" in n.name]
    assert len(kernels) == 53  # one per convolution of ResNet-50
    for k in kernels:
        path, line = k.attrs["source"].rsplit(":", 1)
        assert Path(path) == (mydconv.root / "csrc" / "mydconv_kernel.cu").resolve()
        assert "__global__ void mydconv_conv2d_kernel(" in Path(path).read_text().splitlines()[int(line) - 1]
        assert (k.attrs["library"], k.attrs["closed"], k.attrs["launched_by"]) == ("extension mydconv", False, "aten::convolution")
    gpu = t.summary().gpu  # the summary counts them as time with a source location
    assert gpu.source_us >= sum(k.attrs["duration_us"] for k in kernels) > 0.99 * gpu.total_us


def test_the_direct_convolution_reads_channels_last(mydconv):
    gen = torch.Generator().manual_seed(2)
    for case in (c for c in _grid(seed=2, count=40) if len(c["x"]) == 4):
        args = _conv_args(case, torch.float64, gen, memory_format=torch.channels_last)
        assert args[0].is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(torch.ops.kernelmap_ext.mydconv(*args), torch.ops.aten.convolution(*args))


def test_a_dtype_the_kernel_is_not_written_for_is_a_clear_error_at_call_time(mydconv):
    x, w = torch.ones(1, 1, 3, 3, dtype=torch.int64), torch.ones(1, 1, 2, 2, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        torch.ops.kernelmap_ext.mydconv(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_the_tiled_cuda_kernel_compiles_with_nvcc_and_its_glue_with_gxx(mydconv, tmp_path):
    from torch.utils.cpp_extension import include_paths

    source = mydconv.root / "csrc" / "mydconv_kernel.cu"
    text = source.read_text()
    assert "__shared__" in text and "__nv_bfloat16" in text and "__half" in text
    done = subprocess.run([NVCC, *COMMON_NVCC_FLAGS, "-c", str(source), "-o", str(tmp_path / "k.o")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    glue = mydconv.root / "csrc" / "mydconv_cuda.cpp"
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    done = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", *includes, str(glue)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # what the tiled kernel does not compute is refused by a TORCH_CHECK with the reason
    checks = glue.read_text()
    for reason in ("not transposed ones", "the tiled CUDA kernel is 2-d", "float, double, Half and BFloat16, not "):
        assert reason in checks
    # the generated tests expect those refusals on CUDA, in the glue's own words
    refusals = re.search(r"CUDA_REFUSES = \{(.*?)\}", (mydconv.root / "mydconv" / "cases.py").read_text(), re.S).group(1)
    words = re.findall(r'": "([^"]+)"', refusals)
    assert len(words) == 3 and all(w in checks for w in words)
