"""The cross-layer call graph: one `CallTree` that joins Python source, the
generated binding, the operator and its dispatch, generated wrappers, native
kernels, stubs, device loops and vendor calls, for one device.

    stack("torch.nn.Conv2d", device="cuda")          # top-down
    callers("cudnnConvolutionForward")               # bottom-up

Each layer comes from its own producer: Python from the installed wheel's
source (`pysource`), bindings and wrappers from the regenerated files
(`codegen`), operators from the catalog, C++ from a source tree's index
(`source`). Layers whose producer is missing are reported, not guessed: the
tree says which layers need a source tree and how to get one.

Note [graph versions]
A source tree is authoritative for its own operators and C++ (its own yaml,
read by its own torchgen); the Python and generated layers come from the
installed torch. When their versions differ, the tree's notes say so once,
and every node's location carries its origin's label.

Note [branches]
A call under a simple switch on a backend (`case ConvBackend::Cudnn:`) is
followed only when the backend belongs to the selected device; the others are
shown collapsed (`attrs["collapsed"]`), unless `all_branches` is set.
Definitions that exist several times under different preprocessor conditions
(cuDNN v7 and v8, placeholders without cuDNN) are all shown, each under its
condition: a build picks one, the tree holds all.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelmap import env, pysource
from kernelmap.dispatch import DEVICE_KEYS as _DISPATCH_DEVICE_KEYS
from kernelmap.errors import BadInput, KernelmapError, UnknownName
from kernelmap.model import CallNode, CallTree, EdgeKind, Location, Op


DEFAULT_DEPTH = 24
MAX_NODES = 4000

# Backend names in conditions (`case ConvBackend::Cudnn`, `if (use_mkldnn(...))`)
# that mark code for another device than the selected one (Note [branches]).
_OTHER_DEVICE_WORDS = {
    "cpu": ("cudnn", "miopen", "cuda", "mps", "hip", "rocm", "xpu", "cutlass", "cublas"),
    "cuda": ("mkldnn", "onednn", "mps", "xnnpack", "nnpack", "miopen", "rocm", "hip", "xpu", "mkl"),
    "mps": ("cudnn", "miopen", "cuda", "mkldnn", "onednn", "xnnpack", "nnpack", "hip", "xpu"),
    "meta": ("cudnn", "miopen", "cuda", "mkldnn", "onednn", "xnnpack", "nnpack", "mps", "hip", "xpu"),
}

# Tensor layouts other than dense strided have backends of their own.
_OTHER_BACKEND_WORDS = ("is_quantized", "is_sparse", "is_nested", "is_mkldnn", "is_vulkan", "is_metal")

# The devices a graph follows: the dispatcher's, for which branch rules exist.
DEVICE_KEYS = {device: key for device, key in _DISPATCH_DEVICE_KEYS.items() if device in _OTHER_DEVICE_WORDS}

# Vendor libraries whose code is closed: the graph ends there.
CLOSED_LIBRARIES = frozenset({"cudnn", "cudnn-frontend", "cublas", "cublaslt", "cusparse", "cufft", "cusolver", "mkl", "curand", "nccl"})

# Operators that every kernel calls to shape, allocate or inspect tensors. They
# are shown where they are called but not expanded (give one as TARGET to see it).
_UTILITY_OPS = re.compile(
    r"(empty|new_empty|is_|_is_|size|stride|sym_|numel|dim|resize|contiguous|clone|copy|to|_to_copy|fill|zero_|"
    r"zeros|ones|full|select|unsqueeze|squeeze|view|reshape|expand|permute|transpose|t|narrow|slice|as_strided|"
    r"detach|resolve_conj|resolve_neg|alias|item|_local_scalar_dense|set_|conj|_conj|real|imag|index|split|chunk|"
    r"unbind|cat|stack|flatten|unflatten|movedim|squeeze_|unsqueeze_|result_type|can_cast|promote_types|"
    r"scalar_tensor|lift|_has_compatible_shallow_copy_type|_unsafe_view|_reshape_alias|diagonal)(_|\b|$)"
)

# Where direct calls are followed: kernel code, not tensor plumbing in c10 or core.
_KERNEL_DIRS = ("aten/src/ATen/native/", "aten/src/ATen/cuda/", "aten/src/ATen/cudnn/", "aten/src/ATen/miopen/", "aten/src/ATen/mkl/", "aten/src/ATen/mps/")

_INTERESTING_KINDS = frozenset({"op", "stub", "launch", "vendor", "generated", "loop"})

_NEEDS_TREE = "no source tree: showing the Python, binding, operator and generated layers only (add one with `kernelmap source add PATH` or `kernelmap source fetch`, then `kernelmap index`)"


@dataclass
class _Node:
    """A node while the tree is built (mutable); frozen into a CallNode at the end."""

    name: str
    kind: str
    location: Location | None = None
    via: EdgeKind | None = None
    condition: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    payload: Any = None  # what expanding the node needs: a PyDef, an Op, a Definition...
    identity: tuple | None = None  # cycle and repeat detection; None: a leaf
    children: list[_Node] = field(default_factory=list)
    keep: bool = False  # a step of the call itself (meta, impl), never pruned as plumbing


@dataclass(frozen=True)
class GraphContext:
    """The producers one graph draws on. Any of tree/index/generated may be None."""

    device: str
    requires_grad: bool
    all_branches: bool
    all_calls: bool  # also show tensor utility calls (empty, view, contiguous, ...)
    catalog: Any  # kernelmap.catalog.Catalog: the tree's when a tree is selected
    wheel_catalog: Any  # the installed torch's catalog (Python entry points, bindings)
    index: Any = None  # kernelmap.source.Index
    generated: Any = None  # kernelmap.codegen.GeneratedFiles
    site_packages: Path | None = None
    notes: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# Opening the producers
# ---------------------------------------------------------------------------


def open_context(
    device: str = "cpu",
    requires_grad: bool = False,
    all_branches: bool = False,
    source: str | None = None,
    require_tree: bool = False,
    all_calls: bool = False,
) -> GraphContext:
    """Open every producer a graph can use; missing ones become notes."""
    from kernelmap.catalog import load_catalog

    if device not in DEVICE_KEYS:
        raise BadInput(f"unknown device {device!r}; choose one of {', '.join(DEVICE_KEYS)}")
    install = env.torch_install()
    wheel_catalog = load_catalog()
    notes: list[str] = []
    catalog, index = wheel_catalog, None
    try:
        from kernelmap.source import open_index, select_tree

        tree = select_tree(source)
        index = open_index(tree)
        catalog = load_catalog(tree=tree.root, origin=tree.origin)
        if tree.commit != install.commit:
            notes.append(
                f"version mismatch: operators and C++ come from {tree.origin.label} ({tree.version}), "
                f"Python and generated code from torch {install.version}; each location names its origin"
            )
    except KernelmapError as e:
        if source is not None or require_tree:
            raise
        notes.append(f"{_NEEDS_TREE} [{e}]")
    generated = None
    try:
        import sys

        from kernelmap.codegen import generated_files

        # the first graph of a torch version regenerates its build files (cached; a bar on a terminal)
        generated = generated_files(progress=sys.stderr.isatty())
    except KernelmapError as e:
        notes.append(f"generated code unavailable, showing no bindings or wrappers: {e}")
    return GraphContext(device, requires_grad, all_branches, all_calls, catalog, wheel_catalog, index, generated, install.site_packages, tuple(notes))


# ---------------------------------------------------------------------------
# Top-down
# ---------------------------------------------------------------------------


def stack(target: str, context: GraphContext, depth: int = DEFAULT_DEPTH) -> CallTree:
    """The tree of what a call of `target` runs on `context.device`.

    `target` is a Python name (`torch.nn.Conv2d`, `torch.nn.functional.conv2d`,
    `torch.add`, `torch.Tensor.relu_`), an operator (`aten::conv2d`), or a C++
    symbol (`at::native::_convolution`).
    """
    if depth < 0:
        raise BadInput(f"depth must be 0 or more, not {depth}")
    root = _root_for(target, context)
    tree = _grow(root, lambda node: _expand_down(node, context), depth, prune=not context.all_calls)
    return CallTree(tree, context.notes, {"direction": "stack", "target": target, "device": context.device, "depth": depth})


def _root_for(target: str, ctx: GraphContext) -> _Node:
    text = target.strip()
    if not text or not re.fullmatch(r"[A-Za-z_~][\w:.~<>]*", text):
        raise BadInput(f"not a target: {target!r} (a Python name, an operator like aten::conv2d, or a C++ symbol)")
    if text.startswith("aten::") or (("::" not in text) and "." not in text and _is_op(text, ctx)):
        return _op_node(ctx.catalog.resolve(text)[0], ctx)
    if text.startswith(("torch.", "F.", "nn.", "Tensor.")) and "::" not in text:
        from kernelmap.catalog import expand_python_name

        return _python_root(expand_python_name(text), ctx)
    if ctx.index is None:
        raise UnknownName(target, ())
    definitions = ctx.index.definitions(text)
    if not definitions:
        suggestions = tuple(ctx.index.search(text.rsplit("::", 1)[-1], limit=5)) if len(text.rsplit("::", 1)[-1]) >= 3 else ()
        raise UnknownName(target, suggestions)
    if len(definitions) == 1:
        return _cpp_node(definitions[0], ctx)
    node = _Node(text, "symbol", attrs={"candidates": len(definitions)})
    node.children = [_cpp_node(d, ctx, condition=d.symbol.condition) for d in definitions]
    return node


def _is_op(name: str, ctx: GraphContext) -> bool:
    try:
        ctx.catalog.resolve(name)
        return True
    except KernelmapError:
        return False


def _python_root(name: str, ctx: GraphContext) -> _Node:
    entry_points = ctx.wheel_catalog.entry_points()
    if name in entry_points and not name.startswith("torch.nn.functional."):
        return _builtin_node(name, ctx)
    definition = pysource.find_def(name, ctx.site_packages)
    if definition is None:
        raise UnknownName(name, ctx.wheel_catalog.suggest(name))
    return _python_node(definition, ctx)


def _wheel_location(path: Path, line: int, end_line: int | None, ctx: GraphContext) -> Location:
    install = env.torch_install()
    rel = path.relative_to(ctx.site_packages).as_posix()
    return Location(rel, line, end_line, origin=install.origin)


def _python_node(definition: pysource.PyDef, ctx: GraphContext, condition: str | None = None, line: int | None = None) -> _Node:
    import ast

    kind = "module" if isinstance(definition.node, ast.ClassDef) else "python"
    location = _wheel_location(definition.path, definition.line, definition.end_line, ctx)
    return _Node(definition.qualname, kind, location, EdgeKind.PYTHON, condition, payload=definition, identity=("py", definition.qualname))


def _builtin_node(name: str, ctx: GraphContext, condition: str | None = None) -> _Node:
    return _Node(name, "builtin", None, EdgeKind.PYTHON, condition, attrs={"layer": "python builtin (C extension)"}, payload=name, identity=("builtin", name))


def _op_node(op: Op, ctx: GraphContext, via: EdgeKind | None = None, condition: str | None = None, location: Location | None = None) -> _Node:
    attrs = {"kind": op.kind.value, "schema": op.schema, "yaml": str(op.location)}
    if location is not None:
        attrs["call_site"] = str(location)
    return _Node(str(op.name), "op", op.location, via, condition, attrs, payload=op, identity=("op", str(op.name)))


def _cpp_node(definition, ctx: GraphContext, via: EdgeKind | None = None, condition: str | None = None, call_site: Location | None = None) -> _Node:
    attrs: dict[str, Any] = {"symbol_kind": definition.symbol.kind}
    if definition.symbol.condition:
        attrs["preprocessor"] = definition.symbol.condition
    if call_site is not None:
        attrs["call_site"] = str(call_site)
    return _Node(definition.name, "kernel", definition.location, via, condition, attrs, payload=definition, identity=("cpp", definition.name, str(definition.location)))


def _expand_down(node: _Node, ctx: GraphContext) -> list[_Node]:
    if node.kind in ("module", "python"):
        return _python_children(node.payload, ctx)
    if node.kind == "builtin":
        return _builtin_children(node.payload, ctx)
    if node.kind == "binding":
        return [_op_node(op, ctx, EdgeKind.BINDING, cond) for op, cond in node.payload]
    if node.kind == "op":
        return _op_children(node.payload, ctx)
    if node.kind in ("wrapper", "kernel", "stub", "generated"):
        return _code_children(node, ctx)
    return []


# -- Python ------------------------------------------------------------------


def _python_children(definition: pysource.PyDef, ctx: GraphContext) -> list[_Node]:
    import ast

    root = ctx.site_packages
    if isinstance(definition.node, ast.ClassDef):
        forward = pysource.find_def(f"{definition.qualname}.forward", root)
        return [_python_node(forward, ctx)] if forward else []
    entry_points = ctx.wheel_catalog.entry_points()
    children = []
    owner = definition.qualname.rsplit(".", 1)[0]
    for call in pysource.calls(definition, root):
        if call.target.startswith("self."):
            method = pysource.find_def(f"{owner}.{call.target[5:]}", root)
            if method is not None and _reaches_torch(method, root, entry_points):
                children.append(_python_node(method, ctx, call.condition))
            continue
        builtin = pysource.builtin_name(call.target)
        if builtin and builtin in entry_points:
            children.append(_builtin_node(builtin, ctx, call.condition))
        elif call.target.startswith("torch.nn.functional.") and call.target in entry_points:
            found = pysource.find_def(call.target, root)
            if found is not None:
                children.append(_python_node(found, ctx, call.condition))
    return children


def _reaches_torch(definition: pysource.PyDef, root: Path, entry_points: set[str]) -> bool:
    """Whether a method calls (directly) a builtin, a functional, or another method."""
    for call in pysource.calls(definition, root):
        if call.target.startswith("self.") or call.target in entry_points:
            return True
        builtin = pysource.builtin_name(call.target)
        if builtin and builtin in entry_points:
            return True
    return False


def _builtin_children(name: str, ctx: GraphContext) -> list[_Node]:
    ops = ctx.wheel_catalog.resolve(name)
    pairs = [(_tree_op(op, ctx), None) for op in ops]
    if ctx.generated is None:
        return [_op_node(op, ctx, EdgeKind.BINDING, cond) for op, cond in pairs]
    from kernelmap.codegen import Layer

    bindings = {}
    for op in ops:
        code = _generated(str(op.name), ctx, (Layer.BINDING,))
        for b in code.bindings if code else ():
            if name in b.python_names:
                bindings.setdefault(b.function, (b, []))[1].append((_tree_op(op, ctx), b.signature))
    if not bindings:
        return [_op_node(op, ctx, EdgeKind.BINDING, cond) for op, cond in pairs]
    nodes = []
    for function, (binding, reached) in bindings.items():
        attrs = {"signatures": list(binding.signatures), "calls": list(binding.calls)}
        nodes.append(_Node(function, "binding", binding.definition.location, EdgeKind.BINDING, None, attrs, payload=reached, identity=("binding", function)))
    return nodes


def _tree_op(op: Op, ctx: GraphContext) -> Op:
    """The same operator in the selected tree's catalog, when it has it (Note [graph versions])."""
    if ctx.catalog is ctx.wheel_catalog:
        return op
    try:
        return ctx.catalog.get(str(op.name))
    except KernelmapError:
        return op


def _generated(op_name: str, ctx: GraphContext, layers):
    from kernelmap.codegen import locate

    try:
        return locate(op_name, layers=layers, files=ctx.generated)
    except KernelmapError:
        return None


# -- operators and their dispatch -------------------------------------------


def _is_utility(op: Op) -> bool:
    return op.is_view or bool(_UTILITY_OPS.match(op.name.name))


def _op_children(op: Op, ctx: GraphContext) -> list[_Node]:
    from kernelmap.codegen import Layer

    key = DEVICE_KEYS[ctx.device]
    kernel = ctx.catalog.effective_kernel(op, key)
    code = _generated(str(op.name), ctx, (Layer.REGISTER, Layer.AUTOGRAD, Layer.UFUNC)) if ctx.generated else None
    children: list[_Node] = []
    parent_list = children
    if ctx.requires_grad and op.autograd is not None and op.kind.value != "composite implicit":
        wrapper = _registration(code, "Autograd")
        name = wrapper.symbol if wrapper else f"VariableType::{op.name.name}"
        node = _Node(
            name,
            "wrapper",
            wrapper.definition.location if wrapper and wrapper.definition else None,
            EdgeKind.AUTOGRAD,
            None,
            {"key": "Autograd", "backward_node": op.autograd.backward_node, "derivatives": str(op.autograd.location)},
            identity=("autograd", str(op.name)),
        )
        node.identity = None  # expanded here, below
        children.append(node)
        parent_list = node.children
    if kernel is None:
        parent_list.append(_Node(f"no {key} kernel", "unresolved", attrs={"reason": f"{op.name} declares no kernel for {key} or a composite key"}))
        return children
    wrapper = _registration(code, kernel.key if kernel.key.startswith("Composite") else key)
    target_parent = parent_list
    if wrapper is not None:
        node = _Node(
            wrapper.symbol,
            "wrapper",
            wrapper.definition.location if wrapper.definition else wrapper.impl.location,
            EdgeKind.DISPATCHER,
            f"dispatch key {key}" + (f" (via {kernel.key})" if kernel.key != key else ""),
            {"key": kernel.key, "registered_at": str(wrapper.block)},
        )
        parent_list.append(node)
        target_parent = node.children
    else:
        note = f"dispatch key {key}" + (f" (via {kernel.key})" if kernel.key != key else "")
        target_parent.append(_Node(f"{kernel.key} -> {kernel.symbol}", "note", None, EdgeKind.DISPATCHER, note))
    target_parent.extend(_kernel_nodes(op, kernel, code, ctx))
    return children


def _registration(code, key: str):
    if code is None:
        return None
    for r in code.registrations:
        if r.key == key:
            return r
    return None


def _kernel_nodes(op: Op, kernel, code, ctx: GraphContext) -> list[_Node]:
    """The native code a yaml kernel names: a definition in the tree, or for
    structured kernels their meta and impl functions, or generated ufunc kernels."""
    nodes: list[_Node] = []
    short = kernel.symbol.rsplit("::", 1)[-1]
    if kernel.structured:
        functional = _structured_functional(op, ctx)
        if ctx.index is not None and functional:
            for d in ctx.index.structured_kernels(functional, kind="structured_meta"):
                nodes.append(_cpp_node(d, ctx, EdgeKind.DIRECT, "meta: shapes and dtypes"))
                nodes[-1].keep = True
        ufunc = [u for u in (code.ufunc if code else ()) if u.key == DEVICE_KEYS[ctx.device]]
        impls = [u for u in ufunc if u.name.endswith("::impl")]
        if impls:
            nodes.extend(_ufunc_node(u, ufunc, EdgeKind.DIRECT, "impl (generated from ufunc_inner_loop)") for u in impls)
            return nodes
        if ctx.index is not None:
            impls = ctx.index.structured_kernels(short, kind="structured_impl")
            for d in impls:
                nodes.append(_cpp_node(d, ctx, EdgeKind.DIRECT, "impl"))
                nodes[-1].keep = True
            if impls:
                return nodes
    if ctx.index is None:
        nodes.append(_Node(kernel.symbol, "kernel", None, EdgeKind.DISPATCHER, attrs={"unresolved": "needs a source tree"}))
        return nodes
    definitions = ctx.index.definitions(kernel.symbol)
    if not definitions:
        nodes.append(_Node(kernel.symbol, "kernel", None, EdgeKind.DISPATCHER, attrs={"unresolved": f"no definition in {ctx.index.tree.name}"}))
    for d in definitions:
        nodes.append(_cpp_node(d, ctx, EdgeKind.DISPATCHER, d.symbol.condition and f"#if {d.symbol.condition}"))
    return nodes


def _structured_functional(op: Op, ctx: GraphContext) -> str | None:
    """The functional operator whose name a structured group's TORCH_META_FUNC carries."""
    out = ctx.catalog.delegate(op) or op
    for candidate in ctx.catalog.overloads(out.name.name.rstrip("_")):
        if candidate.structured_delegate == out.name.unqualified and not candidate.is_inplace:
            return candidate.name.unqualified
    return op.name.unqualified


# -- C++ ---------------------------------------------------------------------


def _code_children(node: _Node, ctx: GraphContext) -> list[_Node]:
    if node.kind == "generated":
        return _generated_children(node.payload, ctx)
    if node.kind == "stub":
        return _stub_children(node.payload, ctx)
    if ctx.index is None or node.payload is None:
        return []
    definition = node.payload
    children = []
    for site in ctx.index.calls_from(definition):
        condition = site.condition
        if site.preproc:
            condition = f"{condition}  #if {site.preproc}" if condition else f"#if {site.preproc}"
        collapsed = not ctx.all_branches and (
            _for_other_device(site.condition, ctx.device) or _for_other_device(site.preproc, ctx.device)
        )
        child = _site_node(site, definition, ctx, condition)
        if child is None:
            continue
        if collapsed:
            child.attrs["collapsed"] = f"a branch for another device or backend than {ctx.device}"
            child.identity = None
            child.payload = None
        children.append(child)
    for target, site in _callbacks(definition, ctx):
        children.append(_cpp_node(target, ctx, EdgeKind.DIRECT, "passed as a function argument", site))
    return _dedupe(children)


# A function named as an argument: `split_batch_dim_to_32bit_out(..., raw_cudnn_convolution_forward_out_32bit)`.
_ARGUMENT_NAME = r"(?:^|[(,])\s*&?\s*(?:[\w:]*::)?({name})\s*(?=[,)])"


_ANY_ARGUMENT_NAME = re.compile(_ARGUMENT_NAME.format(name=r"\w+"))


@functools.lru_cache(maxsize=512)
def _file_lines(path: Path) -> tuple[str, ...]:
    try:
        return tuple(path.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return ()


def _callbacks(definition, ctx: GraphContext) -> list[tuple[Any, Location]]:
    """Functions of the same file that `definition` passes as arguments: calls
    made through a function pointer, which no call site shows."""
    location = definition.location
    lines = _file_lines(ctx.index.tree.root / location.path)
    in_file = {d.name.rsplit("::", 1)[-1]: d for d in ctx.index.definitions_in(location.path) if d.name != definition.name}
    if not in_file:
        return []
    body = lines[location.line - 1 : location.end_line or location.line]
    head = "\n".join(body[: next((i for i, text in enumerate(body) if "{" in text), 0) + 1])
    text = "\n".join(body)
    found = []
    for number in range(location.line + 1, (location.end_line or location.line) + 1):  # not the signature
        for m in _ANY_ARGUMENT_NAME.finditer(lines[number - 1] if number <= len(lines) else ""):
            name = m.group(1)
            target = in_file.get(name)
            # a parameter or local variable that shares a function's name (`min`) is no callback
            if target is None or re.search(rf"\b{name}\b", head) or re.search(rf"\b{name}\s*=[^=]|[\w>&*]\s+{name}\s*[;=({{]", text):
                continue
            found.append((target, Location(location.path, number, origin=location.origin)))
    return found


def _referrers(definition, ctx: GraphContext) -> list[_Node]:
    """Definitions of the same file that pass `definition` as an argument (see `_callbacks`)."""
    location = definition.location
    short = definition.name.rsplit("::", 1)[-1]
    pattern = re.compile(_ARGUMENT_NAME.format(name=re.escape(short)))
    nodes = []
    for number, text in enumerate(_file_lines(ctx.index.tree.root / location.path), 1):
        if location.line <= number <= (location.end_line or location.line) or not pattern.search(text):
            continue
        referrer = ctx.index.definition_at(location.path, number)
        if referrer is not None and referrer.name != definition.name:
            site = Location(location.path, number, origin=location.origin)
            nodes.append(_cpp_node(referrer, ctx, EdgeKind.DIRECT, "passes it as a function argument", site))
    return nodes


def _for_other_device(condition: str | None, device: str) -> bool:
    if not condition:
        return False
    text = condition.lower()
    if re.search(r"!\s*\w*(enabled|available)", text):  # `#if !AT_CUDNN_ENABLED()`: the library-absent variant
        return False
    words = _OTHER_DEVICE_WORDS[device] + _OTHER_BACKEND_WORDS
    return any(w in text for w in words)


def _site_node(site, caller, ctx: GraphContext, condition: str | None) -> _Node | None:
    kind = site.kind
    if kind is EdgeKind.DISPATCHER:
        if not site.op:
            return None
        try:
            op = ctx.catalog.resolve(site.op)[0]
        except KernelmapError:
            return _Node(site.callee, "op", site.location, kind, condition, {"unresolved": f"{site.op} is not in the catalog"})
        node = _op_node(op, ctx, kind, condition, site.location)
        if _is_utility(op) and not ctx.all_calls:
            return None
        return node
    if kind is EdgeKind.STUB:
        return _Node(site.name, "stub", site.location, kind, condition, {"call_site": str(site.location)}, payload=site.name, identity=("stub", site.name))
    if kind is EdgeKind.LAUNCH:
        attrs = {"call_site": str(site.location)}
        kernels = ctx.index.global_kernels(site.name) if ctx.index else []
        location = kernels[0].location if len(kernels) == 1 else site.location
        return _Node(site.callee, "launch", location, kind, condition, attrs)
    if kind is EdgeKind.VENDOR:
        library = site.library or "vendor"
        return _Node(site.callee, "vendor", site.location, kind, condition, {"library": library, "closed_source": library.lower() in CLOSED_LIBRARIES})
    # direct: resolve to definitions in the tree, namespace-aware
    candidates = _resolve_direct(site, caller, ctx)
    if not candidates:
        return None
    if len(candidates) == 1 or _all_distinct_conditions(candidates):
        if len(candidates) == 1:
            return _cpp_node(candidates[0], ctx, kind, condition, site.location)
        group = _Node(site.callee, "alternatives", site.location, kind, condition, {"reason": "defined once per preprocessor condition; a build compiles one"})
        group.children = [_cpp_node(d, ctx, kind, f"#if {d.symbol.condition}" if d.symbol.condition else None) for d in candidates]
        return group
    group = _Node(site.callee, "ambiguous", site.location, kind, condition, {"candidates": len(candidates), "reason": "several definitions match; ranked by namespace and file"})
    group.children = [_cpp_node(d, ctx, kind) for d in candidates[:10]]
    for child in group.children:
        child.identity = None  # shown, not expanded: the call is ambiguous
    return group


def _all_distinct_conditions(candidates) -> bool:
    conditions = [d.symbol.condition for d in candidates]
    return all(conditions) and len(set(conditions)) == len(conditions)


def _resolve_direct(site, caller, ctx: GraphContext) -> list:
    """Definitions a direct call may reach, best first: the caller's own
    namespace and its parents, then the call's file, then the rest."""
    callee = site.callee.lstrip(":")
    if callee.startswith(".") or callee.startswith("std::") or len(site.name) < 3:
        return []
    found = [d for d in ctx.index.definitions(callee) if d.location.path.startswith(_KERNEL_DIRS)]
    if not found:
        return []
    caller_ns = caller.lookup.rsplit("::", 1)[0] if "::" in caller.lookup else ""
    exact = [d for d in found if d.lookup == callee]
    if exact:
        found = exact
    else:
        scoped = []
        ns = caller_ns
        while True:
            qualified = f"{ns}::{callee}" if ns else callee
            scoped = [d for d in found if d.lookup == qualified]
            if scoped or not ns:
                break
            ns = ns.rsplit("::", 1)[0] if "::" in ns else ""
        if scoped:
            found = scoped
    same_file = [d for d in found if d.location.path == caller.location.path]
    if same_file and len(same_file) < len(found):
        # a static helper in the caller's file shadows others of the same name
        if all(d.lookup == same_file[0].lookup for d in same_file):
            return same_file
    return found


def _stub_children(stub: str, ctx: GraphContext) -> list[_Node]:
    key = DEVICE_KEYS[ctx.device]
    nodes = []
    registrations = ctx.index.stub_registrations(stub) if ctx.index else []
    for reg in registrations:
        if reg.device != key or not reg.kernel:
            continue
        definitions = ctx.index.definitions(reg.kernel)
        local = [d for d in definitions if d.location.path == reg.location.path] or definitions
        condition = f"REGISTER_DISPATCH for {reg.device}" + (f" ({reg.capability})" if reg.capability else "")
        if not local:
            nodes.append(_Node(reg.kernel, "kernel", reg.location, EdgeKind.STUB, condition, {"unresolved": "kernel definition not found"}))
        for d in local[:3]:
            nodes.append(_cpp_node(d, ctx, EdgeKind.STUB, condition))
    if not nodes and ctx.generated is not None:
        nodes.extend(_generated_stub_kernels(stub, ctx))
    if not nodes:
        reason = f"no {key} registration of {stub} in the tree"
        nodes.append(_Node(f"{stub} [{key}]", "unresolved", None, EdgeKind.STUB, None, {"reason": reason}))
    return nodes


def _ufunc_node(kernel, siblings, via: EdgeKind, condition: str | None) -> _Node:
    location = kernel.definition.location
    return _Node(kernel.name, "generated", location, via, condition, payload=(kernel, tuple(siblings)), identity=("ufunc", kernel.name, str(location)))


def _generated_stub_kernels(stub: str, ctx: GraphContext) -> list[_Node]:
    """Stubs whose CPU kernel the ufunc codegen registers (add_stub): find it in UfuncCPUKernel_<op>.cpp."""
    from kernelmap.codegen import Layer

    base = stub.removesuffix("_stub")
    nodes = []
    for op in ctx.wheel_catalog.overloads(base):
        if not op.ufunc_inner_loop:
            continue
        code = _generated(str(op.name), ctx, (Layer.UFUNC,))
        ufunc = [u for u in (code.ufunc if code else ()) if u.key == DEVICE_KEYS[ctx.device]]
        registered = {m.group(1) for u in ufunc for m in [re.search(rf"REGISTER_DISPATCH\(\s*{stub}\s*,\s*&?(\w+)", u.definition.text)] if m}
        condition = f"REGISTER_DISPATCH({stub}) for {DEVICE_KEYS[ctx.device]} in generated code"
        nodes.extend(_ufunc_node(u, ufunc, EdgeKind.STUB, condition) for u in ufunc if u.name in registered)
    return nodes


def _generated_children(payload, ctx: GraphContext) -> list[_Node]:
    """A generated ufunc kernel calls a stub (UfuncCPU_add.cpp's impl), another
    generated kernel (UfuncCUDA_add.cu's impl calls add_kernel), a device loop
    (cpu_kernel_vec, gpu_kernel), and the inner loop of ATen/native/ufunc/<name>.h."""
    ufunc, siblings = payload
    text = ufunc.definition.text
    nodes = []
    for stub in dict.fromkeys(re.findall(r"\b(\w+_stub)\s*\(", text)):
        nodes.append(_Node(stub, "stub", ufunc.definition.location, EdgeKind.STUB, None, payload=stub, identity=("stub", stub)))
    for other in siblings:
        name = other.name.rsplit("::", 1)[-1]
        if other is not ufunc and re.fullmatch(r"\w+", name) and re.search(rf"\b{name}\b", text):
            nodes.append(_ufunc_node(other, siblings, EdgeKind.DIRECT, None))
    for launch in dict.fromkeys(re.findall(r"\b((?:gpu_kernel|cpu_kernel|opmath_gpu_kernel)\w*)\s*\(", text)):
        nodes.append(_Node(launch, "launch", ufunc.definition.location, EdgeKind.LAUNCH))
    for loop in dict.fromkeys(re.findall(r"\bufunc::(\w+)\s*\(", text)):
        nodes.append(_inner_loop(loop, ctx))
    return nodes


def _inner_loop(name: str, ctx: GraphContext) -> _Node:
    """`ufunc::add` of aten/src/ATen/native/ufunc/add.h: from the index, or found
    in the header itself (its macros, C10_HOST_DEVICE and friends, can hide it from the parser)."""
    header = f"aten/src/ATen/native/ufunc/{name}.h"
    attrs = {"header": header}
    if ctx.index is None:
        return _Node(f"at::native::ufunc::{name}", "loop", None, EdgeKind.DIRECT, "inner loop", {**attrs, "unresolved": "needs a source tree"})
    definitions = ctx.index.definitions(f"at::native::ufunc::{name}")
    if definitions:
        return _Node(definitions[0].name, "loop", definitions[0].location, EdgeKind.DIRECT, "inner loop", attrs)
    lines = _file_lines(ctx.index.tree.root / header)
    line = next((i for i, text in enumerate(lines, 1) if re.search(rf"\b{re.escape(name)}\s*\(", text)), 1 if lines else None)
    location = Location(header, line, origin=ctx.index.tree.origin) if line else None
    return _Node(f"at::native::ufunc::{name}", "loop", location, EdgeKind.DIRECT, "inner loop", attrs if location else {**attrs, "unresolved": f"{header} is not in the tree"})


# ---------------------------------------------------------------------------
# Bottom-up
# ---------------------------------------------------------------------------


def callers(symbol: str, context: GraphContext, depth: int = DEFAULT_DEPTH) -> CallTree:
    """The reverse tree from a C++ symbol or vendor API up through direct calls,
    stubs and the dispatcher to operators and their Python entry points."""
    if depth < 0:
        raise BadInput(f"depth must be 0 or more, not {depth}")
    text = symbol.strip()
    if not text or not re.fullmatch(r"[A-Za-z_~][\w:~]*", text):
        raise BadInput(f"not a C++ symbol: {symbol!r}")
    if context.index is None:
        raise KernelmapError(f"`callers` reads C++ source: {_NEEDS_TREE}")
    definitions = context.index.definitions(text)
    sites = context.index.callers_of(text)
    if definitions:
        root = _Node(text, "symbol", None, attrs={"definitions": len(definitions)}, identity=("callers-root", text))
        root.payload = ("definitions", definitions)
    elif sites:
        root = _Node(text, "vendor" if sites[0].library else "symbol", None, attrs={"library": sites[0].library} if sites[0].library else {}, identity=("callers-root", text))
        root.payload = ("sites", sites)
    else:
        short = text.rsplit("::", 1)[-1]
        raise UnknownName(symbol, tuple(context.index.search(short, limit=5)) if len(short) >= 3 else ())
    tree = _grow(root, lambda node: _expand_up(node, context), depth)
    return CallTree(tree, context.notes, {"direction": "callers", "target": symbol, "depth": depth})


def _expand_up(node: _Node, ctx: GraphContext) -> list[_Node]:
    index = ctx.index
    if node.kind in ("symbol", "vendor") and isinstance(node.payload, tuple):
        what, items = node.payload
        if what == "sites":
            return _caller_nodes(items, ctx)
        nodes = []
        for d in items:
            nodes.extend(_parents_of_definition(d, ctx))
        return nodes
    if node.kind == "kernel" and node.payload is not None:
        return _parents_of_definition(node.payload, ctx)
    if node.kind == "stub":
        return _caller_nodes(index.callers_of(node.payload), ctx)
    if node.kind == "op":
        return _parents_of_op(node.payload, ctx)
    return []


def _caller_nodes(sites, ctx: GraphContext) -> list[_Node]:
    nodes = []
    seen = set()
    for site in sites:
        # kernel code only: JIT, inductor shims and tests call operators too, but no model reaches them
        if site.caller is None or not site.location.path.startswith(_KERNEL_DIRS) or "/tests/" in site.location.path:
            continue
        definition = ctx.index.definition_at(site.location.path, site.location.line)
        if definition is None or definition.name in seen:
            continue
        seen.add(definition.name)
        condition = " ".join(c for c in (site.condition, f"#if {site.preproc}" if site.preproc else None) if c) or None
        nodes.append(_cpp_node(definition, ctx, site.kind, condition, site.location))
    return nodes


def _parents_of_definition(definition, ctx: GraphContext) -> list[_Node]:
    index = ctx.index
    nodes: list[_Node] = []
    short = definition.lookup.rsplit("::", 1)[-1]
    # 1. the operators whose yaml names this kernel, or whose structured kernel it is
    symbol = definition.lookup if definition.lookup.startswith("at::") else f"at::native::{short}"
    ops = list(ctx.catalog.ops_with_kernel(symbol))
    if definition.op and definition.symbol.kind == "structured_impl":
        ops += [op for op in ctx.catalog.ops_with_kernel(f"at::native::{definition.op}") if op not in ops]
    nodes.extend(_op_node(op, ctx, EdgeKind.DISPATCHER, f"kernel of {k.key}") for op in ops for k in op.dispatch if k.symbol in (symbol, f"at::native::{definition.op}"))
    # 2. stubs it is registered to
    for reg in index.stubs_of_kernel(short):
        nodes.append(_Node(reg.stub, "stub", reg.location, EdgeKind.STUB, f"REGISTER_DISPATCH for {reg.device}", payload=reg.stub, identity=("stub", reg.stub)))
    # 3. direct callers, and functions that pass it on as a callback
    nodes.extend(_caller_nodes([s for s in index.callers_of(definition.lookup) if s.kind is EdgeKind.DIRECT], ctx))
    nodes.extend(_referrers(definition, ctx))
    return _dedupe(nodes)


def _parents_of_op(op: Op, ctx: GraphContext) -> list[_Node]:
    nodes: list[_Node] = []
    # operators that delegate to it (add.Tensor -> add.out)
    for other in ctx.catalog.overloads(op.name.name.rstrip("_")):
        if other.structured_delegate == op.name.unqualified:
            nodes.append(_op_node(other, ctx, EdgeKind.DISPATCHER, "structured delegate"))
    # dispatcher calls in C++
    nodes.extend(_caller_nodes(_dispatcher_sites(op, ctx), ctx))
    # Python entry points: leaves
    wheel_op = op
    try:
        wheel_op = ctx.wheel_catalog.get(str(op.name))
    except KernelmapError:
        pass
    for name in wheel_op.python_entry_points:
        nodes.append(_Node(name, "python", None, EdgeKind.BINDING, None, {"layer": "Python entry point"}))
    return _dedupe(nodes)


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


def _dedupe(nodes: list[_Node]) -> list[_Node]:
    """One node per (kind, name, condition): a kernel calling at::empty twice shows it once."""
    seen, out = set(), []
    for n in nodes:
        key = (n.kind, n.name, n.condition, str(n.location) if n.kind not in ("op", "stub") else "")
        if key not in seen:
            seen.add(key)
            out.append(n)
    return out


# ---------------------------------------------------------------------------
# Growing and freezing
# ---------------------------------------------------------------------------


def _grow(root: _Node, expand, depth: int, prune: bool = False) -> CallNode:
    """Expand from `root` with an explicit queue: recursion on the current path
    is cut and marked, a node expanded once elsewhere is not expanded again,
    the depth is bounded and the whole tree capped at MAX_NODES."""
    from collections import deque

    expanded: set[tuple] = set()
    count = 1
    # breadth first: the shallowest occurrence of a repeated node is the one expanded
    queue: deque[tuple[_Node, int, frozenset]] = deque([(root, 0, frozenset())])
    while queue:
        node, level, path = queue.popleft()
        if node.identity is not None:
            if node.identity in path:
                node.attrs["cycle"] = "recursion cut: already on the path above"
                continue
            if node.identity in expanded:
                node.attrs["repeat"] = "expanded above"
                continue
            if level >= depth:
                if node.kind not in _LEAF_KINDS:
                    node.attrs["truncated"] = f"depth {depth} reached"
                continue
            if count >= MAX_NODES:
                node.attrs["truncated"] = f"tree cut at {MAX_NODES} nodes"
                continue
            expanded.add(node.identity)
            if not node.children:
                try:
                    node.children = expand(node)
                except KernelmapError as e:
                    node.attrs["unresolved"] = str(e)
            count += len(node.children)
            path = path | {node.identity}
        elif level >= depth:  # a grouping node at the limit: keep it, cut below
            if node.children:
                node.attrs["truncated"] = f"depth {depth} reached"
                node.children = []
            continue
        for child in node.children:
            queue.append((child, level + 1, path))
    if prune:
        _prune_plumbing(root)
    return _freeze(root)


def _prune_plumbing(root: _Node) -> None:
    """Drop direct-call subtrees that reach no operator, stub, launch or vendor
    call: helpers that only compute shapes or check arguments. A node marked
    "expanded above" is kept when its expanded twin was worth keeping."""
    order: list[_Node] = []
    stack = [root]
    while stack:  # pre-order; evaluated in reverse, children before parents
        node = stack.pop()
        order.append(node)
        stack.extend(node.children)

    def evaluate(kept_ids: set) -> dict[int, bool]:
        interesting: dict[int, bool] = {}
        for node in reversed(order):
            repeat_kept = bool(node.attrs.get("repeat")) and node.identity in kept_ids
            interesting[id(node)] = (
                node.kind in _INTERESTING_KINDS or repeat_kept or any(interesting[id(c)] for c in node.children)
            )
        return interesting

    first = evaluate(set())
    kept_ids = {n.identity for n in order if n.identity is not None and first[id(n)]}
    interesting = evaluate(kept_ids)
    for node in order:
        if node.kind != "alternatives":  # every build variant stays visible
            node.children = [c for c in node.children if interesting[id(c)] or c.keep or c.via is not EdgeKind.DIRECT]


_LEAF_KINDS = frozenset({"vendor", "launch", "note", "unresolved", "loop"})


def _freeze(root: _Node) -> CallNode:
    """Build frozen CallNodes bottom-up (post-order, explicit stack)."""
    done: dict[int, CallNode] = {}
    stack: list[tuple[_Node, bool]] = [(root, False)]
    while stack:
        node, visited = stack.pop()
        if not visited:
            stack.append((node, True))
            stack.extend((c, False) for c in node.children)
            continue
        done[id(node)] = CallNode(
            node.name,
            node.kind,
            node.location,
            node.via,
            node.condition,
            tuple(done[id(c)] for c in node.children),
            dict(node.attrs),
        )
    return done[id(root)]
