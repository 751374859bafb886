"""The index of the real Debian PyTorch 2.6.0 tree: definitions at their real
lines, classified calls, stub registrations, unparseable files.

Every expected line is checked by opening the file, never copied into the test.
"""

from __future__ import annotations

import re
from collections import deque

import pytest

from kernelmap.model import EdgeKind, OriginKind

from tests.conftest import pastes_into

from .conftest import line_of

pytestmark = pytest.mark.slow


def the_definition(ix, name, **kw):
    found = ix.definitions(name, **kw)
    assert found, f"no definition of {name}"
    return found


@pytest.mark.parametrize(
    "name, pattern",
    [
        ("at::native::cudnn_convolution", r"\bTensor cudnn_convolution\("),
        ("at::native::_convolution", r"\bTensor _convolution\("),
        ("at::native::conv2d_symint", r"\bTensor conv2d_symint\("),
    ],
)
def test_definitions_are_at_their_real_lines(real_index, real_tree, name, pattern):
    for d in the_definition(real_index, name):
        assert d.name == name or d.lookup == name
        text = line_of(real_tree.root, d.location.path, d.location.line)
        # The signature starts at the definition's first line (return type on it,
        # or on the line before for split declarations).
        head = text + line_of(real_tree.root, d.location.path, d.location.line + 1)
        assert re.search(pattern, head), f"{d.location}: {text!r}"
        end = line_of(real_tree.root, d.location.path, d.location.end_line)
        assert end.rstrip().endswith("}"), f"{d.location} ends at {d.location.end_line}: {end!r}"
        assert d.location.origin.kind is OriginKind.TREE and d.location.origin.version == real_tree.version


@pytest.mark.parametrize(
    "macro, kind, struct",
    [
        ("TORCH_IMPL_FUNC(mul_out)", "structured_impl", "at::native::structured_mul_out::impl"),
        ("TORCH_META_FUNC2(add, Tensor)", "structured_meta", "at::meta::structured_add_Tensor::meta"),
    ],
)
def test_structured_kernels_are_found_by_their_macro(real_index, real_tree, macro, kind, struct):
    [d] = the_definition(real_index, macro)
    assert (d.symbol.kind, d.name) == (kind, struct)
    text = line_of(real_tree.root, d.location.path, d.location.line)
    assert re.match(re.escape(macro.split("(")[0]) + r"\(" + r"\s*,\s*".join(re.findall(r"\w+", macro.split("(", 1)[1])) + r"\)", text)
    assert real_index.definitions(struct) == [d]


def test_convolution_calls_cudnn_convolution_through_the_dispatcher_under_its_case(real_index, real_tree):
    [conv] = [d for d in real_index.definitions("at::native::_convolution") if d.location.end_line - d.location.line > 100]
    calls = [c for c in real_index.calls_from(conv) if c.callee == "at::cudnn_convolution"]
    assert calls
    for c in calls:
        assert c.kind is EdgeKind.DISPATCHER and c.op == "cudnn_convolution"
        assert c.condition == "case ConvBackend::Cudnn"
        assert "at::cudnn_convolution(" in line_of(real_tree.root, c.location.path, c.location.line)
        assert conv.location.line < c.location.line <= conv.location.end_line
        assert c.edge.condition.startswith("case ConvBackend::Cudnn")
    assert any(c.location == calls[0].location for c in real_index.callers_of("at::cudnn_convolution"))


def test_raw_cudnn_convolution_forward_out_is_defined_once_per_condition(real_index, real_tree):
    defs = the_definition(real_index, "at::native::raw_cudnn_convolution_forward_out")
    assert len(defs) >= 2
    by_condition = {d.symbol.condition: d for d in defs}
    assert len(by_condition) == len(defs), "each definition has its own condition"
    placeholder = by_condition["!AT_CUDNN_ENABLED()"]
    assert "TORCH_CHECK" in "".join(
        line_of(real_tree.root, placeholder.location.path, n) for n in range(placeholder.location.line, placeholder.location.end_line + 1)
    )
    assert any(c and c.startswith("AT_CUDNN_ENABLED()") for c in by_condition)
    for d in defs:
        assert "raw_cudnn_convolution_forward_out(" in line_of(real_tree.root, d.location.path, d.location.line)


def test_cudnn_calls_of_the_v7_and_v8_files_are_vendor_calls(real_index, real_tree):
    cudnn = real_index.vendor_calls("cudnn")
    v7 = [c for c in cudnn if c.location.path.endswith("cudnn/Conv_v7.cpp")]
    v8 = [c for c in cudnn if c.location.path.endswith("cudnn/Conv_v8.cpp")]
    assert any(c.callee == "cudnnConvolutionForward" for c in v7)
    assert any(c.callee.startswith("cudnn_frontend::") for c in v8)
    assert any(c.callee.startswith("cudnnBackend") for c in v8)
    for c in v7 + v8:
        assert c.kind is EdgeKind.VENDOR
        assert c.name in line_of(real_tree.root, c.location.path, c.location.line)
        assert c.preproc and c.preproc.startswith("AT_CUDNN_ENABLED()")


def test_mul_stub_has_cpu_and_cuda_kernels(real_index, real_tree):
    regs = real_index.stub_registrations("mul_stub")
    devices = {r.device: r for r in regs}
    assert {"CPU", "CUDA"} <= set(devices)
    for r in regs:
        text = line_of(real_tree.root, r.location.path, r.location.line)
        assert "mul_stub" in text and r.kernel in text
        assert real_index.definitions(r.kernel), f"the kernel {r.kernel} is defined in the tree"
    assert "/cpu/" in devices["CPU"].location.path and "/cuda/" in devices["CUDA"].location.path
    assert real_index.is_stub("mul_stub")
    [impl] = real_index.definitions("TORCH_IMPL_FUNC(mul_out)")
    assert [c.kind for c in real_index.calls_from(impl) if c.name == "mul_stub"] == [EdgeKind.STUB]


def test_the_padding_kernels_local_add_stub_is_no_stub(real_index, real_tree):
    # add_stub's CPU kernel is registered by ufunc codegen, which is not in the tree.
    assert all(r.device != "CPU" for r in real_index.stub_registrations("add_stub"))
    assert real_index.is_stub("add_stub")
    sites = real_index.callers_of("add_stub")
    padding = [c for c in sites if c.location.path.endswith("cpu/PaddingKernel.cpp")]
    assert padding and all(c.kind is EdgeKind.DIRECT for c in padding)
    local = real_index.definitions_in(padding[0].location.path)
    assert any(d.symbol.location.path == padding[0].location.path and d.name.endswith("::add_stub") for d in local)
    assert any(c.kind is EdgeKind.STUB for c in sites if not c.location.path.endswith("PaddingKernel.cpp"))


def test_cuda_blas_gemm_reaches_a_cublas_call(real_index):
    """Following direct calls from at::cuda::blas::gemm, by name, reaches cuBLAS."""
    start = [d for d in real_index.definitions("at::cuda::blas::gemm") if d.location.path.endswith(".cpp")]
    assert start
    queue = deque((d, 0) for d in start)
    seen = {d.id for d in start}
    reached = []
    while queue and not reached:
        d, depth = queue.popleft()
        for c in real_index.calls_from(d):
            if c.kind is EdgeKind.VENDOR and c.library in ("cublas", "cublasLt"):
                reached.append(c)
            elif c.kind is EdgeKind.DIRECT and depth < 4 and c.callee.startswith(("gemm", "at::cuda::blas::")):
                for nxt in real_index.definitions(c.name):
                    if nxt.lookup.startswith("at::cuda::blas::") and nxt.id not in seen:
                        seen.add(nxt.id)
                        queue.append((nxt, depth + 1))
    assert reached, "no cuBLAS call within four direct calls of at::cuda::blas::gemm"


def test_library_impls_and_dtype_dispatch_sites(real_index, real_tree):
    impls = real_index.library_impls("add.Tensor")
    assert impls
    for r in impls:
        assert '"' in line_of(real_tree.root, r.location.path, r.location.line) or r.kind == "impl"
    [impl] = real_index.definitions("TORCH_IMPL_FUNC(mul_out)")
    kernel = real_index.stub_registrations("mul_stub")
    cpu = [r for r in kernel if r.device == "CPU"][0]
    [k] = [d for d in real_index.definitions(cpu.kernel) if d.location.path == cpu.location.path]
    sites = real_index.dtype_dispatches(k)
    for s in sites:
        assert s.macro in line_of(real_tree.root, s.location.path, s.location.line)
    assert real_index.global_kernels(), "CUDA files define __global__ kernels"


def test_files_the_grammar_cannot_fully_parse_still_yield_definitions(real_index, real_build):
    worst = real_index.worst_files(10)
    stats = real_index.stats()
    assert stats["files_with_errors"] == real_build.with_errors > 0
    assert worst[0].errors >= worst[-1].errors > 0
    # Even the worst files yield definitions.
    for f in worst[:5]:
        assert real_index.definitions_in(f.path), f.path
    assert stats["files"] > 4000 and stats["definitions"] > 40000
    print(f"\n{stats['files_with_errors']} of {stats['files']} files parse with errors; worst:")
    for f in worst:
        print(f"  {f.errors:5d}  {f.path}")


def test_search_finds_names_by_substring(real_index):
    names = real_index.search("cudnn_convolution")
    assert "at::native::cudnn_convolution" in names
    assert all("cudnn_convolution" in n for n in names)


def test_lookups_by_place_and_by_kernel(real_index, real_tree):
    [conv] = [d for d in real_index.definitions("at::native::_convolution") if d.location.end_line - d.location.line > 100]
    middle = (conv.location.line + conv.location.end_line) // 2
    assert real_index.definition_at(conv.location.path, middle) == conv
    cpu = [r for r in real_index.stub_registrations("mul_stub") if r.device == "CPU"][0]
    assert cpu in real_index.stubs_of_kernel(cpu.kernel)
    paths = {f.path for f in real_index.files()}
    assert conv.location.path in paths and len(paths) == real_index.stats()["files"]
    defs = real_index.library_defs("quantized::add")
    assert defs and all(d.namespace == "quantized" and d.kind == "def" for d in defs)
    for d in defs:
        text = line_of(real_tree.root, d.location.path, d.location.line)
        assert "m.def(" in text and f"quantized::{d.op}(" in text
        assert d.kernel is None  # `{at::Tag::pt2_compliant_tag}` is no kernel
    assert {d.op for d in defs} >= {"add", "add.out"}
    assert all(r.namespace == "quantized" for r in real_index.library_impls("quantized::add"))


def test_cudnn_rnn_keeps_its_namespaces_past_directives_in_lists(real_index, real_tree):
    """cudnn/RNN.cpp puts `#ifndef USE_CUDNN_RNN_V8_API` inside parameter and
    argument lists and between two heads of one function: every definition of
    the file is still in at::, and _cudnn_rnn is at the line that names it."""
    path = "aten/src/ATen/native/cudnn/RNN.cpp"
    lines = (real_tree.root / path).read_text(errors="replace").splitlines()
    defined = [d for d in real_index.definitions("_cudnn_rnn") if d.location.path == path]
    expected = {n for n, text in enumerate(lines, 1) if re.match(r"^std::tuple<.*> _cudnn_rnn\(", text)}
    assert len(expected) == 2  # the placeholder (#if !AT_CUDNN_ENABLED()) and the kernel
    assert {d.location.line for d in defined} == expected
    assert all(d.name == "at::native::_cudnn_rnn" for d in defined)
    everything = real_index.definitions_in(path)
    assert len(everything) > 50
    assert [d.name for d in everything if not d.name.startswith("at::")] == []


def test_search_ignores_case_and_reads_wildcards_as_text(real_index):
    names = real_index.search("CUDNN_Convolution")
    assert "at::native::cudnn_convolution" in names
    assert all("cudnn_convolution" in n.lower() for n in names)
    assert [len(n) for n in names] == sorted(len(n) for n in names)  # shortest first
    assert real_index.search("%%%") == real_index.search("_%_") == []
    assert all("add_out" in n.lower() for n in real_index.search("add_out"))


def test_every_call_registration_and_stub_is_on_a_line_holding_its_name(real_build, real_tree):
    """All of them, read from the database and the files: a call spelled over
    lines (`TensorIteratorConfig()` / `.check_all_same_dtype(false)`) is at
    its name's line, as is a registration whose stub or operator follows the
    macro's line; a dtype switch is at its macro's. Objective-C++ files, which
    the C++ grammar misreads, aside."""
    import sqlite3

    db = sqlite3.connect(f"file:{real_build.path}?mode=ro", uri=True)
    text = "(SELECT text FROM strings WHERE id = {})".format
    # A function object called where it is built (`X<true>()(self, ...)`) calls X::operator(): X is on the line.
    called = f"CASE WHEN {text('c.short_id')} = 'operator()' THEN {text('c.callee_id')} ELSE {text('c.short_id')} END"
    rows = [*db.execute(f"SELECT f.path, replace({called}, '::operator()', ''), c.line FROM calls c JOIN files f ON f.id = c.file_id"),
            *db.execute(f"SELECT f.path, {text('r.name_id')}, r.line FROM registrations r JOIN files f ON f.id = r.file_id"
                        " WHERE r.kind != 'at_dispatch'"),
            *db.execute(f"SELECT f.path, {text('r.key_id')}, r.line FROM registrations r JOIN files f ON f.id = r.file_id"
                        " WHERE r.kind = 'at_dispatch'"),  # a dtype switch: its macro's line
            *db.execute(f"SELECT f.path, {text('s.name_id')}, s.line FROM stubs s JOIN files f ON f.id = s.file_id")]
    db.close()
    files: dict[str, list[str]] = {}
    wrong = []
    pasted = 0
    for path, name, line in rows:
        if path not in files:
            source = (real_tree.root / path).read_text(encoding="utf-8", errors="replace")
            files[path] = [] if path.endswith(".mm") or "@interface" in source else source.splitlines()
        lines = files[path]
        short = name.lstrip(".").rsplit("::", 1)[-1]
        if lines and short not in lines[line - 1]:
            if pastes_into(lines, line, short):
                pasted += 1
            else:
                wrong.append((path, line, name))
    assert len(rows) > 200_000
    assert wrong == []
    assert pasted > 100  # `REGISTER_DISPATCH(op##_stub, ...)` in UnaryOpsKernel.cpp's macros, ...


def test_definitions_and_registrations_written_by_the_files_own_macros(real_index, real_tree):
    """`CREATE_UNARY_TORCH_IMPL_FUNC(sin_out, sin_stub)` defines sin's
    structured kernel, which calls sin_stub, and
    `STATIC_IMPLEMENT_COMPLEX_KERNEL_WITHOUT_AVX512(sin)` defines and registers
    its CPU kernel: each at the line of the macro's use, read from the files,
    and the calls written in a macro's body at their line of the `#define`."""
    unary = "aten/src/ATen/native/UnaryOps.cpp"
    lines = (real_tree.root / unary).read_text().splitlines()
    [use] = [n for n, text in enumerate(lines, 1) if re.match(r"CREATE_UNARY_TORCH_IMPL_FUNC\(sin_out, sin_stub\)", text)]
    [impl] = real_index.structured_kernels("sin_out", kind="structured_impl")
    assert (impl.symbol.qualified_name, impl.location.path, impl.location.line) == ("at::native::structured_sin_out::impl", unary, use)
    calls = {c.name: c for c in real_index.calls_from(impl)}
    assert calls["sin_stub"].kind.value == "stub" and calls["sin_stub"].location.line == use
    [body] = [n for n, text in enumerate(lines, 1) if "func_stub(device_type(), *this);" in text][:1]
    assert calls["device_type"].location.line == body  # written in the first macro's body

    kernels = "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp"
    lines = (real_tree.root / kernels).read_text().splitlines()
    [use] = [n for n, text in enumerate(lines, 1) if re.fullmatch(r"STATIC_IMPLEMENT_COMPLEX_KERNEL\w*\(sin\)\s*", text)]
    [cpu] = [r for r in real_index.stub_registrations("sin_stub") if r.device == "CPU"]
    assert (cpu.location.path, cpu.location.line) == (kernels, use)
    [kernel] = [d for d in real_index.definitions(cpu.kernel.rsplit("::", 1)[-1]) if d.location.path == kernels]
    assert kernel.location.line == use and kernel.symbol.qualified_name.endswith("CPU_CAPABILITY::sin_kernel")


def test_an_index_damaged_behind_its_record_gives_no_short_answer(real_build, real_tree, tmp_path, monkeypatch):
    """A copy of the real index with a page of its calls table overwritten and
    its size and mtime put back, so the cheap check on open passes: the damage
    shows mid-query, and each graph answer is refused in one line rather than
    printed without the calls it could not read."""
    import os
    import shutil
    import sqlite3

    from kernelmap import graph
    from kernelmap.errors import SourceError
    from kernelmap.source import add_tree, index_path
    from tests.conftest import run_kernelmap

    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    tree = add_tree(real_tree.root, "copy")
    path = index_path(tree)
    path.parent.mkdir(parents=True)
    for suffix in ("", ".record"):
        shutil.copy2(str(real_build.path) + suffix, str(path) + suffix)
    st = path.stat()
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    (root_page,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'calls'").fetchone()
    db.close()
    with open(path, "r+b") as f:  # the calls table's root page: every read of calls goes through it
        f.seek((root_page - 1) * page_size)
        f.write(b"\xa5" * page_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    context = graph.open_context("cpu", source=tree.name)
    assert context.index is not None  # the cheap check on open passes
    with pytest.raises(SourceError, match="is damaged"):
        graph.stack("aten::mm", context)
    env = {"KERNELMAP_CACHE_DIR": str(tmp_path / "cache")}
    for args in (("stack", "aten::mm", "--device", "cpu"), ("callers", "at::native::cpublas::gemm"), ("explain", "aten::mm"),
                 ("path", "torch.mm", "sgemm_", "--device", "cpu")):
        done = run_kernelmap(*args, "--source", tree.name, env=env)
        assert done.returncode == 2 and done.stdout == "", (args, done.stdout[-300:])
        assert done.stderr.startswith("kernelmap: error: the index of 'copy' is damaged") and done.stderr.count("\n") == 1, done.stderr
