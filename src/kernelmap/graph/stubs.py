"""A DispatchStub's kernels, per device and CPU capability, and the machinery
between the call and the kernel; the kernels torchgen generates (ufunc loops,
view copies: Note [generated view copies]).
"""

from __future__ import annotations

import dataclasses
import re

from kernelmap.graph.code import file_lines, tree_lines
from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import cpp_node, Node
from kernelmap.graph.nodes import entered, _generated, _inner_loop, op_node, _utility_kernel
from kernelmap.graph.overloads import not_compiled
from kernelmap.graph.rules import DEVICE_KEYS, is_utility_op
from kernelmap.model import EdgeKind, Location, NodeKind


def _stub_children(stub: str, ctx: GraphContext, call_site: Location | None = None) -> list[Node]:
    key = DEVICE_KEYS[ctx.device]
    nodes = []
    registrations = ctx.index.stub_registrations(stub) if ctx.index else []
    for reg in registrations:
        if reg.device != key or not reg.kernel:
            continue
        if call_site is not None and not _same_stub(stub, call_site, reg, ctx):
            continue
        definitions = ctx.index.definitions(reg.kernel)
        local = [d for d in definitions if d.location.path == reg.location.path] or definitions
        condition = f"REGISTER_DISPATCH for {reg.device}" + (f" ({reg.capability})" if reg.capability else "")
        if not local:
            nodes.append(Node(reg.kernel, "kernel", reg.location, EdgeKind.STUB, condition, {"unresolved": "kernel definition not found"}))
        for d in local[:3]:
            node = cpp_node(d, ctx, EdgeKind.STUB, condition)
            node.helper_levels = 1  # a stub kernel's own helpers run with it, as an operator kernel's do (Note [steps that run])
            nodes.append(not_compiled(node, reg.condition or d.symbol.condition, ctx))
    if not nodes and ctx.generated is not None:
        nodes.extend(_generated_stub_kernels(stub, ctx))
    if key == "CPU" and nodes:
        nodes[:0] = _stub_machinery(ctx, _avx512_slot(registrations, nodes, ctx))
    if not nodes:
        reason = f"no {key} registration of {stub} in the tree"
        nodes.append(Node(f"{stub} [{key}]", "unresolved", None, EdgeKind.STUB, None, {"reason": reason}))
    return nodes


def _stub_qualifier(path: str, line: int, stub: str, ctx: GraphContext) -> str | None:
    """The namespace written before `stub` on a line (`cpublas::copy_stub` -> "cpublas"); None when unqualified."""
    lines = tree_lines(ctx, path)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    m = re.search(rf"((?:\w+::)+){re.escape(stub)}\b", text)
    return m.group(1).rstrip(":").removeprefix("at::native").strip(":") or None if m else None


def _same_stub(stub: str, call_site: Location, reg, ctx: GraphContext) -> bool:
    """Whether a registration is of the stub a call names: stubs of one name
    live in several namespaces (Copy.cpp's `copy_stub` is at::native's;
    BlasKernel.cpp registers `cpublas::copy_stub`). A registration written
    with a namespace matches a call in that namespace or written with it."""
    written = _stub_qualifier(reg.location.path, reg.location.line, stub, ctx)
    if written is None:
        return True
    if _stub_qualifier(call_site.path, call_site.line, stub, ctx) == written:
        return True
    caller = ctx.index.definition_at(call_site.path, call_site.line)
    return caller is not None and f"::{written}::" in f"::{caller.lookup}"


def _avx512_slot(registrations, nodes: list[Node], ctx: GraphContext) -> bool | None:
    """Whether a CPU stub's kernel fills the AVX512 slot: `REGISTER_DISPATCH` in
    a native/cpu file compiled for AVX512 registers nullptr there (DispatchStub.h),
    `ALSO_REGISTER_AVX512_DISPATCH` registers the kernel. None when unread."""
    texts = [tree_lines(ctx, r.location.path)[r.location.line - 1] for r in registrations
             if r.device == "CPU" and ctx.index is not None and r.location.line <= len(tree_lines(ctx, r.location.path))]
    texts += [u.definition.text for n in nodes if n.kind is NodeKind.GENERATED and n.payload for u in n.payload[1]]
    if any("ALSO_REGISTER_AVX512_DISPATCH" in t for t in texts):
        return True
    if any(re.search(r"\bREGISTER_DISPATCH\s*\(", t) for t in texts):
        return False
    return None


def _stub_machinery(ctx: GraphContext, avx512: bool | None = None) -> list[Node]:
    """How a CPU stub call picks its kernel: `DispatchStub::operator()` asks
    `DispatchStubImpl::choose_cpu_impl` once for the CPU capability (AVX512,
    AVX2, DEFAULT); the REGISTER_DISPATCH slot of that capability runs, and
    an empty AVX512 slot falls back to AVX2's (`avx512`: whether the kernel
    fills it). Needs an indexed tree (DispatchStub.cpp is not in the wheel)."""
    if ctx.index is None:
        return []
    found = {name: ctx.index.definitions(name) for name in ("at::native::DispatchStub::operator()", "at::native::DispatchStubImpl::choose_cpu_impl")}
    call, choose = found["at::native::DispatchStub::operator()"], found["at::native::DispatchStubImpl::choose_cpu_impl"]
    if not call:
        return []
    node = cpp_node(call[0], ctx, EdgeKind.DIRECT, "the stub's call operator").leaf()
    node.attrs["keep"] = True
    if choose:
        why = "CPU capability chosen on the first call"
        if avx512 is False:
            why += "; REGISTER_DISPATCH leaves the AVX512 slot nullptr, so an AVX512 CPU runs the AVX2 kernel"
        elif avx512:
            why += "; ALSO_REGISTER_AVX512_DISPATCH fills the AVX512 slot: an AVX512 CPU runs the AVX512 kernel"
        child = cpp_node(choose[0], ctx, EdgeKind.DIRECT, why).leaf()
        child.attrs["keep"] = True
        node.children = [child]
    return [node]


def _ufunc_node(kernel, siblings, via: EdgeKind, condition: str | None) -> Node:
    location = kernel.definition.location
    return Node(kernel.name, "generated", location, via, condition, payload=(kernel, tuple(siblings)), identity=("ufunc", kernel.name, str(location)))


def _generated_stub_kernels(stub: str, ctx: GraphContext) -> list[Node]:
    """Stubs whose CPU kernel the ufunc codegen registers (add_stub): find it in UfuncCPUKernel_<op>.cpp."""
    from kernelmap.codegen import Layer

    base = stub.removesuffix("_stub")
    nodes = []
    for op in ctx.overloads(base):
        if not op.ufunc_inner_loop:
            continue
        code = _generated(str(op.name), ctx, (Layer.UFUNC,))
        ufunc = [u for u in (code.ufunc if code else ()) if u.key == DEVICE_KEYS[ctx.device]]
        registered = {m.group(1) for u in ufunc for m in [re.search(rf"REGISTER_DISPATCH\(\s*{stub}\s*,\s*&?(\w+)", u.definition.text)] if m}
        condition = f"REGISTER_DISPATCH({stub}) for {DEVICE_KEYS[ctx.device]} in generated code"
        nodes.extend(_ufunc_node(u, ufunc, EdgeKind.STUB, condition) for u in ufunc if u.name in registered)
    return nodes


# Note [generated view copies]
# The `*_copy` variant of every view (t_copy, transpose_copy, view_copy,
# unbind_copy...) has a kernel the tree does not hold: torchgen writes it into
# CompositeViewCopyKernels.cpp (`auto output = at::_ops::t::call(self); return
# output.clone(...)`). It is read from the generated files: a kernel whose
# children are the operators its body calls, through `at::_ops::<op>::call`
# or a Tensor method; the view it copies is the work of the copy asked for
# (Note [a utility asked for]).
_VIEW_COPY_KERNELS = "build/aten/src/ATen/CompositeViewCopyKernels.cpp"


@dataclasses.dataclass(frozen=True)
class GeneratedKernel:
    """A native kernel torchgen writes (Note [generated view copies]): its text and where it is."""

    text: str
    location: Location


def _view_copy_kernel(symbol: str, ctx: GraphContext) -> Node | None:
    """The generated kernel a view's `*_copy` operator names, when the tree has no definition of it."""
    if ctx.generated is None or not symbol.startswith("at::native::"):
        return None
    rows = ctx.generated.defs(symbol.rsplit("::", 1)[-1], _VIEW_COPY_KERNELS)
    if not rows:
        return None
    excerpt = ctx.generated.definition(rows[0][0], rows[0][1])
    return Node(symbol, "kernel", excerpt.location, EdgeKind.DISPATCHER, "generated: the view, then a copy of what it shows",
                {"keep": True}, payload=GeneratedKernel(excerpt.text, excerpt.location), identity=("generated kernel", symbol))


def _generated_kernel_children(node: Node, ctx: GraphContext) -> list[Node]:
    """The operators a generated kernel's body calls (Note [generated view copies])."""
    kernel: GeneratedKernel = node.payload
    structs = ctx.__dict__.setdefault("_op_structs", {})
    if not structs:
        structs.update((op.name.unqualified.replace(".", "_"), op) for op in ctx.catalog)
    children = []
    for offset, text in enumerate(kernel.text.splitlines()):
        for m in re.finditer(r"\bat::_ops::(\w+)::call\s*\(|\.(\w+)\s*\(", text):
            op = structs.get(m.group(1)) if m.group(1) else next(iter(ctx.overloads(m.group(2))), None)
            if op is None:
                continue
            site = Location(kernel.location.path, kernel.location.line + offset, origin=kernel.location.origin)
            child = op_node(op, ctx, EdgeKind.DISPATCHER, None, site)
            if is_utility_op(op.name.name, op.is_view) and not _utility_kernel(node, ctx, op):
                child.attrs["utility"] = True
                if not ctx.all_calls:
                    child.leaf()
                children.append(child)
            else:
                children.append(entered(child, m.group(0).rstrip("( ") if m.group(1) is None else "", ctx))
    return children


def _generated_children(payload, ctx: GraphContext) -> list[Node]:
    """A generated ufunc kernel calls a stub (UfuncCPU_add.cpp's impl), another
    generated kernel (UfuncCUDA_add.cu's impl calls add_kernel), a device loop
    (cpu_kernel_vec, gpu_kernel), and the inner loop of ATen/native/ufunc/<name>.h."""
    ufunc, siblings = payload
    text = ufunc.definition.text
    nodes = []
    for stub in dict.fromkeys(re.findall(r"\b(\w+_stub)\s*\(", text)):
        declared = stub_declaration(stub, ctx)
        attrs = {"declared_at": declared} if declared is not None else {}
        start = ufunc.definition.location  # the stub's call, at its line of the generated impl
        offset = next((i for i, t in enumerate(text.splitlines()) if re.search(rf"\b{stub}\s*\(", t)), 0)
        location = Location(start.path, start.line + offset, origin=start.origin)
        nodes.append(Node(stub, "stub", location, EdgeKind.STUB, None, attrs, payload=stub, identity=("stub", stub)))
    for other in siblings:
        name = other.name.rsplit("::", 1)[-1]
        if other is not ufunc and re.fullmatch(r"\w+", name) and re.search(rf"\b{name}\b", text):
            nodes.append(_ufunc_node(other, siblings, EdgeKind.DIRECT, None))
    from kernelmap.graph import loops

    nodes.extend(loops.generated_loops(ufunc, ctx))
    for loop in dict.fromkeys(re.findall(r"\bufunc::(\w+)\s*\(", text)):
        nodes.append(_inner_loop(loop, ctx))
    return nodes


def stub_declaration(stub: str, ctx: GraphContext) -> Location | None:
    """Where `stub` is declared (DECLARE_DISPATCH): in the tree's index, or
    with no tree in the wheel's torch/include/ATen/native headers."""
    if ctx.index is not None:
        found = [d for d in ctx.index.stub_declarations(stub) if d.kind == "declare"]
        return found[0].location if found else None
    if ctx.tree_root is not None:
        return None
    from kernelmap.codegen.headers import include_origin

    origin = include_origin()
    native = origin.disk_path("aten/src/ATen/native")
    pattern = re.compile(rf"^\s*DECLARE_DISPATCH\([^;]*\b{re.escape(stub)}\s*\)")
    for path in sorted(native.glob("*.h")) if native is not None and native.is_dir() else ():
        for number, text in enumerate(file_lines(path), 1):
            if pattern.match(text):
                return Location(f"aten/src/ATen/native/{path.name}", number, origin=origin)
    return None
