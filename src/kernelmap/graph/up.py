"""Bottom-up: from a C++ function or a vendor API up through direct calls,
launches, callbacks, stubs and the dispatcher to operators, their generated
registration wrappers, the Python bindings, and the Python code that calls
them, up to the `nn.Module` whose forward does.

Note [callers of Python]
A builtin (`torch.conv2d`) is called from Python source; the callers are
looked for, by reading source and never importing it, in the modules a model
calls operators from: `torch.nn.functional`, `torch.nn.modules.*` and
`torch.functional` of the installed wheel. A file is parsed only when its text
names the callee. A module's `forward` is called by the module itself
(`Conv2d(...)(x)`), so its parent is the class. A call of a name Python hides
(`torch.norm(...)`, Note [bindings Python hides]) calls the Python function
(torch/functional.py's norm), not the binding; that function calls the binding
as `_VF.norm`.
"""

from __future__ import annotations

import ast
import bisect
import functools
import hashlib
import os
import re
import sys
from pathlib import Path

from kernelmap import env, pysource
from kernelmap.errors import BadInput, KernelmapError, UnknownName
from kernelmap.graph.code import file_lines
from kernelmap.graph.context import NEEDS_TREE, GraphContext, kept_results
from kernelmap.graph.grow import Node, cpp_node, grow, vendor_node
from kernelmap.graph.nodes import dedupe, op_node
from kernelmap.graph.resolve import _WORD_CHAR, _words_at
from kernelmap.graph.rules import DEFAULT_DEPTH, KERNEL_DIRS, is_symbol_text
from kernelmap.model import CallTree, EdgeKind, Location, NodeKind, Op
from kernelmap.safefiles import NotRegularFile, read_text


def callers(symbol: str, context: GraphContext, depth: int = DEFAULT_DEPTH) -> CallTree:
    """The reverse tree from a C++ symbol or vendor API up through direct calls,
    stubs and the dispatcher to operators and their Python entry points."""
    if depth < 0:
        raise BadInput(f"depth must be 0 or more, not {depth}")
    text = symbol.strip()
    if not text or not is_symbol_text(text):
        raise BadInput(f"not a C++ symbol: {symbol!r}")
    if context.index is None:
        raise KernelmapError(f"`callers` reads C++ source: {NEEDS_TREE}")
    entry = _ops_entry_root(text, context)
    if entry is not None:  # Note [callers of an operator's entry]
        grown = grow(entry, lambda node: _expand_up(node, context), depth)
        context.check_index_intact()
        return CallTree(grown, context.notes, {"kind": "callers", "target": symbol, "depth": depth, "torch": env.torch_install().version})
    definitions = context.index.definitions(text)
    sites = context.index.callers_of(text)
    if len(definitions) == 1:  # the definition itself, at its line
        root = cpp_node(definitions[0], context)
        root.identity = ("callers-root", text)
    elif definitions:
        root = Node(text, "symbol", None, attrs={"definitions": len(definitions)}, identity=("callers-root", text))
        root.payload = ("definitions", definitions)
    elif sites:
        if sites[0].library:
            root = vendor_node(text, sites[0].library, None, None, None)
            root.identity = ("callers-root", text)
        else:
            root = Node(text, "symbol", None, identity=("callers-root", text))
        root.payload = ("sites", sites)
    else:
        short = text.rsplit("::", 1)[-1]
        raise UnknownName(symbol, tuple(context.index.search(short, limit=5)) if len(short) >= 3 else ())
    grown = grow(root, lambda node: _expand_up(node, context), depth)
    context.check_index_intact()
    return CallTree(grown, context.notes, {"kind": "callers", "target": symbol, "depth": depth, "torch": env.torch_install().version})


# Note [callers of an operator's entry]
# `at::_ops::<op>::call` and `::redispatch` are defined in the generated
# Operators_*.cpp, not in the tree: asked for their callers, the answer starts
# at the operator's entry (the name's struct is the operator's name with `.`
# spelled `_`, as torchgen writes it) and goes up as from any of its kernels:
# `::redispatch` through the autograd wrapper to `::call`, `::call` to the C++
# code that calls the operator (cholesky's `raw_cholesky_output.triu_()` for
# at::_ops::triu_::call), the operators that delegate to it and its Python
# bindings. A name no operator of the tree answers is looked up as before.
_OPS_ENTRY = re.compile(r"(?:at::)?_ops::(\w+)::(call|redispatch)")


def _ops_entry_root(text: str, ctx: GraphContext) -> Node | None:
    m = _OPS_ENTRY.fullmatch(text)
    if m is None:
        return None
    table = ctx.kept.get("ops_structs")
    if table is None:
        table = ctx.kept["ops_structs"] = {op.name.unqualified.replace(".", "_"): op for op in ctx.catalog}
    op = table.get(m.group(1))
    if op is None:
        return None
    if m.group(2) == "redispatch" and _autograd_registration(op, ctx) is not None:
        node = _above_op(op, ctx)
    else:
        node = _ops_call_node(op, ctx)
    node.via = node.condition = None  # the root: reached by no edge
    node.identity = ("callers-root", text)
    return node


def _expand_up(node: Node, ctx: GraphContext) -> list[Node]:
    index = ctx.index
    if node.kind in ("symbol", "vendor") and isinstance(node.payload, tuple):
        what, items = node.payload
        if what == "sites":
            return _caller_nodes(items, ctx)
        # one child per definition, at its line and with its preprocessor condition, their callers
        # below: `callers` answers for no one device, so no build's alternative is left out
        return [cpp_node(d, ctx, None, f"#if {d.symbol.condition}" if d.symbol.condition else None) for d in items]
    if node.kind == "kernel" and node.payload is not None:
        return _parents_of_definition(node.payload, ctx)
    if node.kind == "stub":
        return _caller_nodes(index.callers_of(node.payload), ctx)
    if node.kind == "wrapper" and isinstance(node.payload, Op):
        return [op_node(node.payload, ctx, EdgeKind.DISPATCHER, f"registered for {node.attrs.get('key')}")]
    if node.kind in ("wrapper", "ops_entry") and isinstance(node.payload, tuple) and len(node.payload) == 2 and isinstance(node.payload[1], Op):
        what, op = node.payload
        if what == "redispatch":  # Note [the autograd layer] in graph.operators: the autograd wrapper redispatched
            return [_autograd_wrapper(op, ctx)]
        if what == "call":  # the operator's entry is called by its callers
            return _parents_of_op(op, ctx)
        return [_ops_call_node(op, ctx)]  # the autograd wrapper, entered from at::_ops::<op>::call
    if node.kind == "op":
        return [_above_op(node.payload, ctx)]
    if node.kind == "binding":
        return [Node(name, NodeKind.BUILTIN, None, EdgeKind.BINDING, None, payload=name, identity=("builtin", name)) for name in node.payload]
    if node.kind == "builtin":
        return _python_callers(node.payload, ctx)
    if node.kind == "python" and isinstance(node.payload, pysource.PyDef):
        return _python_callers(node.payload.qualname, ctx)
    return []


def _caller_nodes(sites, ctx: GraphContext) -> list[Node]:
    nodes = []
    seen = set()
    for site in sites:
        # kernel code only: JIT, inductor shims and tests call operators too, but no model reaches them
        if site.caller is None or not site.location.path.startswith(KERNEL_DIRS) or "/tests/" in site.location.path:
            continue
        definition = ctx.index.definition_at(site.location.path, site.location.line)
        # one node per calling definition; overloads (the cpublas::gemm of each dtype) are definitions of their own
        if definition is None or (definition.name, definition.location) in seen:
            continue
        seen.add((definition.name, definition.location))
        condition = " ".join(c for c in (site.condition, f"#if {site.preproc}" if site.preproc else None) if c) or None
        nodes.append(cpp_node(definition, ctx, site.kind, condition, site.location))
    return nodes


# `REGISTER_DISPATCH(cpublas::gemm_stub, &cpublas::cpublas_gemm_impl)` and the per-capability
# forms (REGISTER_AVX512_DISPATCH, REGISTER_CUDA_DISPATCH, ALSO_REGISTER_AVX512_DISPATCH...)
_REGISTRATION = re.compile(r"\b((?:ALSO_)?REGISTER_\w*DISPATCH)\s*\(\s*((?:\w+::)*\w+)\s*,\s*&?\s*(?:\w+::)*(\w+)\s*\)")


@functools.lru_cache(maxsize=256)
def _registrations_in(path: Path) -> dict[str, tuple[tuple[int, str, str], ...]]:
    """kernel name -> (line, stub, macro) of each REGISTER_*DISPATCH line of one file."""
    found: dict[str, list[tuple[int, str, str]]] = {}
    for number, text in enumerate(file_lines(path), 1):
        if "DISPATCH" in text:
            for m in _REGISTRATION.finditer(text):
                found.setdefault(m.group(3), []).append((number, m.group(2).rsplit("::", 1)[-1], m.group(1)))
    return {k: tuple(v) for k, v in found.items()}


def _registered_stubs(definition, ctx: GraphContext) -> list[Node]:
    """The stubs `definition` is registered to: from the index, and from its
    own file's REGISTER_*DISPATCH lines (a qualified stub or kernel name, as
    cpu/BlasKernel.cpp writes it, may escape the index)."""
    short = definition.lookup.rsplit("::", 1)[-1]
    nodes: dict[str, Node] = {}
    # `&CPU_CAPABILITY::asin_kernel`: a registration a macro writes (STATIC_IMPLEMENT_COMPLEX_KERNEL_WITH_AVX512(asin))
    # names the kernel in its capability's namespace
    for reg in [*ctx.index.stubs_of_kernel(short), *ctx.index.stubs_of_kernel(f"CPU_CAPABILITY::{short}")]:
        # a registration names the kernel its own file sees: another file's elu_kernel is another kernel
        if reg.location.path != definition.location.path and any(
            d.name.rsplit("::", 1)[-1] == short for d in ctx.index.definitions_in(reg.location.path)
        ):
            continue
        condition = f"REGISTER_DISPATCH for {reg.device}"
        nodes.setdefault(reg.stub, Node(reg.stub, "stub", reg.location, EdgeKind.STUB, condition, payload=reg.stub, identity=("stub", reg.stub)))
    location = definition.location
    for number, stub, macro in _registrations_in(ctx.index.tree.root / location.path).get(short, ()):
        site = Location(location.path, number, origin=location.origin)
        nodes.setdefault(stub, Node(stub, "stub", site, EdgeKind.STUB, macro, payload=stub, identity=("stub", stub)))
    return list(nodes.values())


def _argument_lines(path: Path, name: str) -> tuple[int, ...]:
    """The lines of one file where `name` is passed as an argument (see
    sites._callbacks). Only the lines that hold the name are matched: a
    bottom-up tree asks this of hundreds of files, one name each; a warm
    process keeps the answers, by the file's size and modification time."""
    return _argument_lines_at(path, _stamp(path), name)


@functools.lru_cache(maxsize=4096)
def _argument_lines_at(path: Path, stamp: tuple[int, int] | None, name: str) -> tuple[int, ...]:
    from kernelmap.graph.sites import _ANY_ARGUMENT_NAME

    found: dict[int, None] = {}
    lines, (text, starts) = _lines(path, stamp), _joined(path, stamp)
    q = text.find(name) if lines and "\n" not in name else -1
    while q != -1:  # only the lines that hold the name, found in the file's text at once
        i = bisect.bisect_right(starts, q) - 1
        for m in _ANY_ARGUMENT_NAME.finditer(lines[i]):
            if m.group("name") == name:
                found[i + 1] = None
        q = text.find(name, starts[i + 1]) if i + 1 < len(starts) else -1
    return tuple(found)


@functools.lru_cache(maxsize=256)
def _lines(path: Path, stamp: tuple[int, int] | None) -> tuple[str, ...]:
    return file_lines(path)


@functools.lru_cache(maxsize=256)
def _joined(path: Path, stamp: tuple[int, int] | None) -> tuple[str, tuple[int, ...]]:
    """A file's lines joined by newlines, and where each begins in that text."""
    lines = _lines(path, stamp)
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    return "\n".join(lines), tuple(starts)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _referrers(definition, ctx: GraphContext) -> list[Node]:
    """Definitions of the same file that pass `definition` as an argument (a
    kernel handed to a helper as a function pointer, see sites._callbacks), read
    from a per-file table: a bottom-up tree asks for many."""
    location = definition.location
    short = definition.name.rsplit("::", 1)[-1]
    nodes = []
    for number in _argument_lines(ctx.index.tree.root / location.path, short):
        if location.line <= number <= (location.end_line or location.line):
            continue
        referrer = ctx.index.definition_at(location.path, number)
        if referrer is not None and referrer.name != definition.name:
            site = Location(location.path, number, origin=location.origin)
            nodes.append(cpp_node(referrer, ctx, EdgeKind.DIRECT, "passes it as a function argument", site))
    return nodes


def _parents_of_definition(definition, ctx: GraphContext) -> list[Node]:
    index = ctx.index
    nodes: list[Node] = []
    short = definition.lookup.rsplit("::", 1)[-1]
    # 1. the operators whose yaml names this kernel, or whose structured kernel it is,
    #    each through the generated wrapper registered for its dispatch key
    symbol = definition.lookup if definition.lookup.startswith("at::") else f"at::native::{short}"
    ops = list(_ops_with_kernel(ctx.catalog, symbol))
    if definition.op and definition.symbol.kind == "structured_impl":
        ops += [op for op in _ops_with_kernel(ctx.catalog, f"at::native::{definition.op}") if op not in ops]
    for op in ops:
        keys = [k.key for k in op.dispatch if k.symbol in (symbol, f"at::native::{definition.op}")]
        nodes.extend(_wrapper_nodes(op, keys, ctx))
        if definition.symbol.kind == "structured_impl":  # Note [callers of a meta function]: the group's wrappers call the impl too
            structured = [k for k in keys if any(d.key == k and d.structured for d in op.dispatch)]
            nodes.extend(w for other in _delegates(op, ctx) for w in _wrapper_nodes(other, structured, ctx) if w.kind == NodeKind.WRAPPER)
    if definition.symbol.kind == "structured_meta":
        nodes.extend(_meta_callers(definition, ctx))
    # 2. stubs it is registered to
    nodes.extend(_registered_stubs(definition, ctx))
    # 3. direct callers and launchers (a host function named launch_*, a device
    #    loop such as cpu_kernel_vec, a __global__ kernel's <<<...>>>), and
    #    functions that pass it on as a callback
    #    (a call the index took for a vendor's by its name, `mkl_gemm_batched`, when it resolves to the tree's own definition)
    sites = [s for s in index.callers_of(definition.lookup)
             if s.kind in (EdgeKind.DIRECT, EdgeKind.LAUNCH, EdgeKind.VENDOR) and _resolves_to(s, definition, ctx)]
    nodes.extend(_caller_nodes(sites, ctx))
    nodes.extend(_referrers(definition, ctx))
    return dedupe(nodes)


# Note [callers of a meta function]
# A structured operator's meta function (`TORCH_META_FUNC(atanh)`, the class
# at::meta::structured_atanh) is called by the generated wrappers of its
# group, which checks shapes and sets up the output before the kernel runs:
# the functional operator it is named for (`structured_<name>_<overload>`,
# as torchgen spells it), the out= operator that functional delegates to, and
# the in-place operator delegating to the same, each for the dispatch keys
# the out= operator has a kernel for. Those wrappers are generated, never in
# the tree's index, so the meta function's callers are read from the catalog.
def _meta_callers(definition, ctx: GraphContext) -> list[Node]:
    struct = definition.lookup.rsplit("::", 2)[-2] if definition.lookup.count("::") >= 2 else ""
    if not struct.startswith("structured_"):
        return []
    table = ctx.kept.get("ops_structs")
    if table is None:
        table = ctx.kept["ops_structs"] = {op.name.unqualified.replace(".", "_"): op for op in ctx.catalog}
    functional = table.get(struct.removeprefix("structured_"))
    if functional is None or not functional.structured_delegate:
        return []
    try:
        out = ctx.catalog.get(functional.structured_delegate)
    except KernelmapError:
        return []
    keys = [k.key for k in out.dispatch if k.structured and k.key != "Meta"]
    group = [functional, out, *(op for op in _delegates(out, ctx) if op is not functional)]
    nodes = [n for op in group for n in _wrapper_nodes(op, keys, ctx)]
    wrappers = [n for n in nodes if n.kind == NodeKind.WRAPPER]
    return wrappers or nodes  # a key the generated files register no wrapper for (MPS on a CPU build) only when none is


def _delegates(op: Op, ctx: GraphContext) -> list[Op]:
    """The functional and in-place operators whose structured_delegate is `op` (asin, asin_ of asin.out)."""
    base = op.name.name.rstrip("_")
    return [other for name in (base, f"{base}_") for other in ctx.overloads(name)
            if other.name.name == name and other.structured_delegate == op.name.unqualified]


def _resolves_to(site, definition, ctx: GraphContext) -> bool:
    """Whether a call site found by name reaches `definition`, resolved the way
    the top-down graph resolves it (namespace-aware): a call of `gemm` in
    CUDABlas.cpp is at::cuda::blas::gemm's caller, not cpublas::gemm's."""
    from kernelmap.graph.resolve import _resolve_direct

    kept = kept_results(ctx, "resolves_to")
    key = (site, definition.name, definition.location)
    if key not in kept:
        caller = ctx.index.definition_at(site.location.path, site.location.line)
        kept[key] = caller is not None and any(
            d.name == definition.name and d.location == definition.location for d in _resolve_direct(site, caller, ctx))
    return kept[key]


def _ops_with_kernel(catalog, symbol: str) -> tuple[Op, ...]:
    # a kernel is named in native_functions.yaml: a kernel torchgen makes up is not an operator's caller here
    return catalog.ops_with_kernel(symbol, named=True)


def _code(op: Op, ctx: GraphContext):
    """The generated registration wrappers and bindings of `op`, located once per operator."""
    from kernelmap.codegen import Layer
    from kernelmap.graph.nodes import _generated

    cache = kept_results(ctx, "_code")  # per context: a set of files opened again after a rebuild is read again
    key = str(op.name)
    if key not in cache:  # every layer a bottom-up tree reads of an operator, located once
        cache[key] = _generated(key, ctx, (Layer.REGISTER, Layer.BINDING, Layer.AUTOGRAD, Layer.OPS))
    return cache[key]


def _wrapper_nodes(op: Op, keys: list[str], ctx: GraphContext) -> list[Node]:
    """The generated `Register<Key>` wrappers that call the kernel for `keys`,
    each leading up to its operator; the operator itself where no generated
    files are at hand."""
    if ctx.generated is None:
        return [op_node(op, ctx, EdgeKind.DISPATCHER, f"kernel of {key}") for key in keys]
    code = _code(op, ctx)
    nodes = []
    for key in dict.fromkeys(keys):
        found = [r for r in (code.registrations if code else ()) if r.key == key and r.definition is not None]
        if not found:
            nodes.append(op_node(op, ctx, EdgeKind.DISPATCHER, f"kernel of {key}"))
            continue
        for r in found:
            attrs = {"key": key, "registered_at": r.block}
            nodes.append(Node(r.symbol, NodeKind.WRAPPER, r.definition.location, EdgeKind.DISPATCHER, f"kernel of {key}", attrs, payload=op,
                              identity=("wrapper", r.symbol)))
    return nodes


def _above_op(op: Op, ctx: GraphContext) -> Node:
    """What reaches an operator's kernels, bottom-up: its autograd wrapper's
    `at::_ops::<op>::redispatch` when it has one (called from Python or a
    composite, Note [the autograd layer] in graph.operators; a kernel's own calls
    skip it), else `at::_ops::<op>::call`, where its callers enter the dispatcher."""
    if _autograd_registration(op, ctx) is not None:
        symbol = f"at::_ops::{op.name.unqualified.replace('.', '_')}::redispatch"
        entry = _ops_entry(op, symbol, ctx)
        return Node(symbol, NodeKind.OPS_ENTRY, entry.definition.location if entry else None, EdgeKind.DIRECT, "below the Autograd key",
                    payload=("redispatch", op), identity=("redispatch", str(op.name)))
    return _ops_call_node(op, ctx)


def _autograd_registration(op: Op, ctx: GraphContext):
    """The generated VariableType wrapper of `op` (or the hand-written one of VariableTypeManual.cpp); None when it has none."""
    from kernelmap.graph.operators import _manual_autograd

    if op.kind.value == "composite implicit":
        return None
    code = _code(op, ctx) if ctx.generated is not None else None
    found = next((r for r in (code.registrations if code else ()) if r.key == "Autograd"), None)
    return found if found is not None else _manual_autograd(op, ctx)


def _autograd_wrapper(op: Op, ctx: GraphContext) -> Node:
    from kernelmap.codegen import Registration

    found = _autograd_registration(op, ctx)
    if isinstance(found, Registration):  # generated
        symbol, location = found.symbol, found.definition.location if found.definition is not None else found.impl.location
    else:  # written by hand
        symbol, location = found.name, found.location
    condition = "grad mode is on (the default): called from Python or a composite, it runs though no input requires grad"
    return Node(symbol, NodeKind.WRAPPER, location, EdgeKind.AUTOGRAD, condition, {"key": "Autograd"}, payload=("autograd", op),
                identity=("autograd", str(op.name)))


def _ops_entry(op: Op, symbol: str, ctx: GraphContext):
    """The `at::_ops::<op>::call` or `::redispatch` of the generated files named `symbol`; None without them."""
    code = _code(op, ctx) if ctx.generated is not None else None
    return next((f for f in (code.ops if code else ()) if f.symbol == symbol), None)


def _ops_call_node(op: Op, ctx: GraphContext) -> Node:
    """`at::_ops::<op>::call`, where every C++ call of `op` (and its binding's) enters the dispatcher."""
    symbol = f"at::_ops::{op.name.unqualified.replace('.', '_')}::call"
    entry = _ops_entry(op, symbol, ctx)
    if entry is None:
        return Node(symbol, NodeKind.OPS_ENTRY, None, EdgeKind.DIRECT, None, payload=("call", op), identity=("call", str(op.name)))
    return Node(symbol, NodeKind.OPS_ENTRY, entry.definition.location, EdgeKind.DIRECT, "enters the dispatcher", payload=("call", op),
                identity=("call", str(op.name)))


def _parents_of_op(op: Op, ctx: GraphContext) -> list[Node]:
    nodes: list[Node] = []
    # operators that delegate to it (add.Tensor -> add.out), the in-place ones too, which the
    # catalog lists under their own name (triu_ -> triu.out: cholesky's `raw_cholesky_output.triu_()`)
    for other in _delegates(op, ctx):
        nodes.append(op_node(other, ctx, EdgeKind.DISPATCHER, "structured delegate"))
    # dispatcher calls in C++
    nodes.extend(_caller_nodes(_dispatcher_sites(op, ctx), ctx))
    # the generated Python bindings that call it, then their Python names (Note [graph versions]: the wheel's)
    wheel_op = op
    try:
        wheel_op = ctx.entry_catalog.get(str(op.name))
    except KernelmapError:
        pass
    nodes.extend(_binding_nodes(wheel_op, ctx))
    return dedupe(nodes)


def _binding_nodes(op: Op, ctx: GraphContext) -> list[Node]:
    bindings = ()
    if ctx.generated is not None:
        code = _code(op, ctx)
        bindings = code.bindings if code else ()
    if not bindings:
        return [Node(name, NodeKind.BUILTIN, None, EdgeKind.BINDING, None, payload=name, identity=("builtin", name)) for name in op.python_entry_points]
    nodes = []
    for b in bindings:
        attrs = {"signatures": tuple(b.signatures)}
        nodes.append(Node(b.function, NodeKind.BINDING, b.definition.location, EdgeKind.BINDING, b.signature, attrs,
                          payload=tuple(b.python_names), identity=("binding", b.function, str(op.name))))
    return nodes


def _dispatcher_sites(op: Op, ctx: GraphContext) -> list:
    """Calls in C++ that reach `op` through the dispatcher: `at::conv2d`,
    `at::convolution_symint`, `at::add_out`, `tensor.add_`. The index records the
    operator's base name; out= calls are told apart by their `_out`/`_outf` spelling."""
    base = op.name.name
    spellings = [base, f"{base}_symint"] + ([f"{base}_out", f"{base}_outf", f"{base}_symint_out", f"{base}_symint_outf"] if op.is_out else [])
    sites = []
    for spelling in spellings:
        for site in ctx.index.callers_of(spelling):
            if site.kind is not EdgeKind.DISPATCHER or site.op not in (base, op.name.unqualified):
                continue
            if site.name.endswith(("_out", "_outf")) != op.is_out:
                continue
            sites.append(site)
    return sites


# -- Python (Note [callers of Python]) ------------------------------------------

_PYTHON_SCOPE = ("torch/nn/functional.py", "torch/nn/modules", "torch/functional.py")


@functools.lru_cache(maxsize=8)
def _python_files(root: Path) -> tuple[tuple[Path, str], ...]:
    """(file, module) of the modules a model calls operators from."""
    found = []
    for entry in _PYTHON_SCOPE:
        path = root / entry
        files = [path] if path.is_file() else sorted(path.glob("*.py")) if path.is_dir() else []
        for f in files:
            module = f.relative_to(root).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
            found.append((f, module))
    return tuple(found)


@functools.lru_cache(maxsize=8)
def _listed(root: Path) -> str:
    """A digest of the names of the files `_python_files` reads (a module added is another)."""
    return hashlib.sha1("\n".join(f.relative_to(root).as_posix() for f, _ in _python_files(root)).encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _identifiers(path: Path) -> frozenset[str]:
    """Every word of one file: whether it can name a callee at all, before it is parsed."""
    try:
        return frozenset(re.findall(r"\w+", read_text(path)))
    except (OSError, NotRegularFile, ValueError):
        return frozenset()


@functools.lru_cache(maxsize=512)
def _calls_in(path: Path, module: str, root: Path, word: str) -> dict[str, tuple[tuple[pysource.PyDef, pysource.PyCall], ...]]:
    """What the functions and methods of one file whose text holds `word`
    call: called name (absolute, `self.<method>`, and the public name of a
    builtin) -> (caller, call). Only those are read: a large module
    (torch.nn.functional) has hundreds of functions."""
    found: dict[str, dict[str, tuple[pysource.PyDef, pysource.PyCall]]] = {}
    for definition, text in _definitions_in(path, module):
        if word not in text or not _holds_word(text, word):
            continue
        for name, call in _named_calls(definition, root):
            found.setdefault(name, {}).setdefault(definition.qualname, (definition, call))
    return {k: tuple(v.values()) for k, v in found.items()}


def _holds_word(text: str, word: str) -> bool:
    """Whether `\\bWORD\\b` is found in `text`: looked for as plain text first
    (a regular expression that opens with `\\b` scans each definition slowly)."""
    if not word or not _WORD_CHAR.match(word[0]) or not _WORD_CHAR.match(word[-1]):
        return re.search(rf"\b{re.escape(word)}\b", text) is not None
    return bool(_words_at(text, word))


@functools.lru_cache(maxsize=64)
def _definitions_in(path: Path, module: str) -> tuple[tuple[pysource.PyDef, str], ...]:
    """(definition, its text) of the functions, methods and assignments of one
    file, in order: read once, whatever word a question looks for."""
    lines = file_lines(path)
    found = []
    for node in pysource._parse(path).body:
        if isinstance(node, (ast.FunctionDef, ast.Assign)):
            names = [node.name] if isinstance(node, ast.FunctionDef) else [t.id for t in node.targets if isinstance(t, ast.Name)]
            definitions = [pysource.PyDef(f"{module}.{n}", module, path, node.lineno, node.end_lineno or node.lineno, node) for n in names]
        elif isinstance(node, ast.ClassDef):
            definitions = [pysource.PyDef(f"{module}.{node.name}.{item.name}", module, path, item.lineno, item.end_lineno or item.lineno, item)
                           for item in node.body if isinstance(item, ast.FunctionDef)]
        else:
            continue
        found.extend((d, "\n".join(lines[d.line - 1 : d.end_line])) for d in definitions)
    return tuple(found)


@functools.lru_cache(maxsize=8192)
def _named_calls(definition: pysource.PyDef, root: Path) -> tuple[tuple[str, pysource.PyCall], ...]:
    """(called name, call) of each call one definition makes, by every name it
    is called by (Note [callers of Python]): read once per definition."""
    found = []
    for call in pysource.calls(definition, root):
        names = {call.target, pysource.builtin_name(call.target)} - {None}
        if pysource.shadowed_binding(call.target, root):
            hiding = pysource.find_def(call.target, root)
            names = {hiding.qualname} if hiding is not None else set()
        found.extend((name, call) for name in names)
    return tuple(found)


def _python_callers(target: str, ctx: GraphContext) -> list[Node]:
    """Python functions and methods that call `target` (a builtin, a function,
    or a method through `self.`), and for a module's `forward`, the module.
    Read from the stored table while the files in scope are unchanged
    (Note [Python read once] in kernelmap.graph.python)."""
    from kernelmap.graph.python import remembered, stored_node

    root = ctx.python_dir  # the tree's own .py files when it has them (Note [graph versions])
    if root is None:
        return []
    files = _python_files(root)
    listed = _listed(root)
    found = remembered(root, ("callers", target, listed), lambda: _python_callers_spec(target, root), tuple(f for f, _ in files),
                       fresh=((sys.modules[__name__], "_calls_in"), (sys.modules[__name__], "_named_calls")))
    nodes: list[Node] = []
    for spec, condition, line in found:
        node = stored_node(spec, root, ctx, condition)
        if line is not None:
            node.attrs["call_site"] = Location(spec[3], line, origin=node.location.origin if node.location else None)
        nodes.append(node)
    return nodes


def _python_callers_spec(target: str, root: Path) -> list:
    """`_python_callers` as JSON data: [def_spec, condition, call line] per caller."""
    from kernelmap.graph.python import def_spec

    found = []
    owner, _, method = target.rpartition(".")
    owner_def = pysource.find_def(owner, root) if owner.startswith("torch.nn.modules.") else None
    is_method = owner_def is not None and isinstance(owner_def.node, ast.ClassDef)
    if is_method and method == "forward":
        found.append([def_spec(owner_def, root), "the module's __call__ runs forward", None])
    short = target.rsplit(".", 1)[-1]
    called = f"self.{method}" if is_method else target
    for path, module in _python_files(root):
        if is_method and module != owner_def.module:
            continue  # a method is called through `self.` in its own class
        if short not in _identifiers(path):
            continue
        for definition, call in _calls_in(path, module, root, short).get(called, ()):
            if definition.qualname == target or (is_method and not definition.qualname.startswith(f"{owner}.")):
                continue
            found.append([def_spec(definition, root), call.condition, call.line])
    return found
