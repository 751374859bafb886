"""The MCP server: each kernelmap question as a tool, the files an answer
points at as resources, over stdio or streamable HTTP on loopback.

Every tool answers with the answer's JSON document (kernelmap.answers) as
structured content and a few lines of text. Each document gains three
sections here (fields a document may gain within its version, Note [answer
documents]): `pinned` (the tree and the torch that answered, and whether
the answer mixes versions), `bounded` (Note [bounded answers]: what the
reply shows of the full answer, and the fold ids that continue it), and on
every LOCATION a `resource` URI that reads its lines.

    server = create_server(source="debian-2.6.0")
    server.run()                                  # stdio
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from kernelmap import __version__
from kernelmap.errors import BadInput, KernelmapError
from kernelmap.mcp import bound as bounding
from kernelmap.mcp.warm import Warm

INSTRUCTIONS = """kernelmap answers, for PyTorch: what code actually runs when a call is made, where it is (file:line in \
a pinned version), and how it is reached. Start with `where` (the operator behind a Python name or an operator name), \
then `stack` (the whole call top-down for a device), `path` (how one name reaches another), `callers` (bottom-up), \
`explain` (one call step by step). `find` locates C++ names, `gen` shows generated code, `kernel` names a GPU kernel's \
source, `trace` reads a profiler trace, `observe` runs a call under gdb and shows what really ran, `diff` compares two \
source trees, `trees` lists and selects trees. Replies are \
bounded (limit_tokens): nodes with facts.more and lists named in `bounded.folded` continue with `expand`. Every \
location has a `resource` URI (kernelmap://tree/NAME/PATH#L10-L20) that reads its lines."""

Device = Literal["cpu", "cuda", "mps", "meta"]
MAX_TEXT = 4096  # characters of a name, a symbol or a path: no PyTorch name comes near
MAX_OBSERVE_SECONDS = 600  # an observed run of one tool call
Limit = Annotated[int, Field(ge=bounding.MIN_LIMIT, le=bounding.MAX_LIMIT,
                             description="Largest reply in tokens; what does not fit is folded (continue with `expand`).")]
Source = Annotated[str | None, Field(description="Source tree to read (a registered name or a directory); default: the selected tree.")]
Dtype = Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="dtype of the call's tensors, a torch dtype name (float32, bfloat16, int64...).")]
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def create_server(source: str | None = None, warm: Warm | None = None) -> MCPServer:
    """The kernelmap MCP server over one warm state (`source`: the tree answers read by default)."""
    warm = warm or Warm(source)
    server = _Server("kernelmap", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    server.warm = warm
    for tool in TOOLS:
        server.add_tool(tool(warm), name=tool.__name__.removesuffix("_tool"), description=_description(tool),
                        annotations=READ_ONLY, structured_output=False)
    from kernelmap.mcp.resources import register_resources

    register_resources(server, warm)
    return server


class _Server(MCPServer):
    """MCPServer that reads a location's line range from a URI fragment
    (`...#L10-L20`): templates match a URI's path, so the fragment is moved
    into the `lines` query before matching."""

    warm: Warm

    async def read_resource(self, uri, context=None):
        text = str(uri)
        if "#" in text and text.startswith("kernelmap://"):
            head, fragment = text.split("#", 1)
            text = f"{head}{'&' if '?' in head else '?'}lines={fragment}"
        return await super().read_resource(text, context)


def _description(tool: Callable) -> str:
    return " ".join((tool.__doc__ or "").split())


# -- answering -------------------------------------------------------------------------------


async def _answer(warm: Warm, question: tuple, produce: Callable[[], tuple[dict[str, Any], Any]], limit_tokens: int,
                  remember: bool = True, aside: bool = False) -> CallToolResult:
    """Run `produce` (-> the answer's document and, for a call tree, the
    CallTree) on the producer thread, keep it for expand, and reply with it
    bounded to `limit_tokens`. Questions answered before are answered from
    what was kept (`remember`). With `aside`, `produce` reads no warm state
    and may take long: it runs on the thread for long runs (Warm.aside), and
    only what it made is kept and bounded on the producer thread."""

    def work(made: tuple[dict[str, Any], Any] | None = None) -> tuple[dict[str, Any], str] | None:
        warm.fresh()
        found = warm.remembered(question) if remember else None
        if found is not None and limit_tokens in found[1]:
            return found[1][limit_tokens]  # the same question, bounded the same way: the same reply
        if found is not None:
            aid, replies = found
        else:
            if made is None and aside:
                return None  # to be made aside first
            doc, tree = made if made is not None else produce()
            _annotate(doc, warm)
            aid, replies = warm.answers.add(doc, tree), {}
        reply = bounding.bound(aid, warm.answers.get(aid), limit_tokens)
        replies[limit_tokens] = reply, summarize(reply)
        if remember:
            warm.remember(question, aid, replies)
        return replies[limit_tokens]

    try:
        hit = warm.quick(question, limit_tokens) if remember else None
        if hit is None:
            hit = await warm.run(work)
        if hit is None:
            made = await warm.aside(produce)
            hit = await warm.run(lambda: work(made))
        reply, text = hit
    except KernelmapError as e:
        raise ToolError(_one_line(str(e))) from None
    except OSError as e:
        raise ToolError(_one_line(f"{e.strerror or e}{': ' + str(e.filename) if e.filename else ''}")) from None
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=reply)


async def _expand(warm: Warm, fold_id: str, limit_tokens: int) -> CallToolResult:
    def work() -> tuple[dict[str, Any], str]:
        reply = bounding.expand(warm.answers, fold_id, limit_tokens)
        return reply, summarize(reply)

    try:
        reply, text = await warm.run(work)
    except KernelmapError as e:
        raise ToolError(_one_line(str(e))) from None
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=reply)


def _one_line(text: str) -> str:
    from kernelmap.printable import printable_line

    return printable_line(" ".join(text.split()))[:2000]


def _tree_answer(tree) -> tuple[dict[str, Any], Any]:
    return tree.to_json(), tree


def _document(answer) -> tuple[dict[str, Any], None]:
    return answer.to_json(), None


def _check_dtype(dtype: str) -> str:
    from kernelmap.commands.options import check_dtype

    return check_dtype(dtype)


# -- the tools ----------------------------------------------------------------------------------
# Each is a factory: given the warm state, the tool function the server registers.
# The docstring is the tool's description: what it answers and when to use it.


def where_tool(warm: Warm):
    """The operator behind a name, and where it is: `torch.nn.functional.conv2d`, `torch.add`, `F.relu`,
    `torch.nn.Conv2d`, `aten::add.Tensor` -> the aten operator(s), schema, native_functions.yaml line, kind
    (composite, structured with its delegate, ufunc...), kernel per dispatch key, derivatives and Python entry
    points. Given a device (and an indexed tree), also the entry kernel's definition, the stub kernel and the
    leaves (device loop, vendor call) on that device. live=true adds what the installed torch's dispatcher holds
    and the dispatch keys a call passes (imports torch once: seconds). Use it first for any PyTorch name."""

    async def where(
        name: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="A Python name or an operator: torch.nn.functional.conv2d, aten::add.Tensor, add.out")],
        device: Annotated[Device | None, Field(description="Show the kernel's source on this device (entry kernel, stub kernel, leaves).")] = None,
        dtype: Dtype = "float32",
        requires_grad: bool = False,
        live: Annotated[bool, Field(description="Ask the installed torch's live dispatcher too (imports torch once).")] = False,
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap import api

            _check_dtype(dtype)
            context = warm.context(device, source=source, dtype=dtype) if device is not None else None
            return _document(api.where(name, device=device or "cpu", dtype=dtype, requires_grad=requires_grad, static=not live,
                                       source=source if source is not None else warm.source, with_source=device is not None,
                                       context=context))

        return await _answer(warm, ("where", name, device, dtype, requires_grad, live, source, warm.source), produce, limit_tokens)

    return where


def stack_tool(warm: Warm):
    """What a call runs, top-down, for one device: from a Python name (torch.nn.Conv2d), an operator (aten::conv2d)
    or a C++ symbol (at::native::_convolution) through the generated binding, the dispatcher and the registered
    wrapper to the native kernel, its stubs, device loops, launches and vendor calls (cuDNN, cuBLAS, oneDNN, MKL),
    every node at its file:line with the condition on its edge. The main path (to where the call's work ends) comes
    first; branches for other devices are collapsed. Use it to see the whole call; `path` for one route."""

    async def stack(
        target: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="A Python name, an operator or a C++ symbol.")],
        device: Device = "cpu",
        dtype: Dtype = "float32",
        requires_grad: Annotated[bool, Field(description="Show the autograd layer (VariableType wrapper, backward node).")] = False,
        depth: Annotated[int, Field(ge=0, le=64, description="How many levels to expand.")] = 24,
        all_branches: Annotated[bool, Field(description="Follow branches for other devices too.")] = False,
        all_calls: Annotated[bool, Field(description="Also show tensor utility calls (empty, view...) and helpers that reach nothing.")] = False,
        compact: Annotated[bool, Field(description="One node per layer of the call.")] = False,
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap import graph
            from kernelmap.api import with_main_path

            _check_dtype(dtype)
            context = warm.context(device, source=source, requires_grad=requires_grad, all_branches=all_branches,
                                   all_calls=all_calls, dtype=dtype)
            tree = with_main_path(graph.stack(target, context, depth))  # Note [the main path] in kernelmap.processors
            if compact:
                from kernelmap.processors import compact_layers

                tree = compact_layers(tree)
            return _tree_answer(tree)

        question = ("stack", target, device, dtype, requires_grad, depth, all_branches, all_calls, compact, source, warm.source)
        return await _answer(warm, question, produce, limit_tokens)

    return stack


def path_tool(warm: Warm):
    """The routes a call takes from one name to another on one device, shortest first, each step at its file:line
    with how it is reached (Python call, binding, dispatcher, direct call, stub, launch, vendor call) and the
    conditions the route needs: torch.nn.Conv2d -> cudnnConvolutionForward on cuda, torch.mm -> sgemm_ on cpu.
    Use it to connect a Python entry point to a kernel or library call (or any two names)."""

    async def path(
        start: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="FROM: a Python name, an operator or a C++ symbol.")],
        target: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="TO: a C++ symbol, a vendor call, an operator or a Python name.")],
        device: Device = "cpu",
        dtype: Dtype = "float32",
        depth: Annotated[int, Field(ge=1, le=96, description="How deep to search from FROM.")] = 48,
        limit: Annotated[int, Field(ge=1, le=50, description="How many routes.")] = 5,
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap.graph.path import path as find_routes

            _check_dtype(dtype)
            return _document(find_routes(start, target, warm.context(device, source=source, dtype=dtype), depth, limit))

        return await _answer(warm, ("path", start, target, device, dtype, depth, limit, source, warm.source), produce, limit_tokens)

    return path


def callers_tool(warm: Warm):
    """Who calls a C++ function or a vendor API, bottom-up: direct calls, launches and device loops, stub
    registrations, dispatcher calls up to the operators, their generated wrappers and Python bindings, and the
    Python functions and nn.Modules that call them. Use it for "what reaches cudnnConvolutionForward" or to see
    what an edit of a kernel affects."""

    async def callers(
        symbol: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="A C++ function (at::native::add_kernel, raw_cudnn_convolution_forward_out) or a vendor API.")],
        depth: Annotated[int, Field(ge=0, le=64, description="How many levels to climb.")] = 24,
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap import graph
            from kernelmap.processors import callers_main_path, mark_main_path

            tree = graph.callers(symbol, warm.context(source=source, require_tree=True), depth)
            return _tree_answer(mark_main_path(tree, callers_main_path(tree)))

        return await _answer(warm, ("callers", symbol, depth, source, warm.source), produce, limit_tokens)

    return callers


def explain_tool(warm: Warm):
    """One operator call step by step, each step with its code and location: Python argument parsing, dispatcher
    entry, autograd wrapper, backend wrapper, then (with an indexed tree) the native kernel's checks, output
    allocation, backend selection, stub, dtype switch (AT_DISPATCH case for the dtype), iteration, the device loop
    or GPU launch, the inner loop and the vendor call. Use it to understand how one call works."""

    async def explain(
        op: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="An operator or Python name: aten::add.Tensor, aten::conv2d, torch.mul.")],
        device: Device = "cpu",
        dtype: Dtype = "float32",
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap.graph.explain import explain as explain_op

            _check_dtype(dtype)
            return _document(explain_op(op, warm.context(device, source=source, dtype=dtype)))

        return await _answer(warm, ("explain", op, device, dtype, source, warm.source), produce, limit_tokens)

    return explain


def find_tool(warm: Warm):
    """Where a C++ name is defined in the selected tree, and where it is called or registered (file:line):
    qualified (at::native::_convolution), a qualified suffix (native::_convolution), bare (cudnn_convolution), a
    stub (mul_stub) or a structured kernel macro (TORCH_IMPL_FUNC(mul_out)). Use it like a precise grep."""

    async def find(
        name: Annotated[str, Field(min_length=1, max_length=1024, description="A C++ name, a stub or a TORCH_IMPL_FUNC(...).")],
        limit: Annotated[int, Field(ge=0, le=10_000, description="At most this many references.")] = 50,
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap.source import find as find_name

            context = warm.context(source=source, require_tree=True)
            return _document(find_name(context.index, name, limit=limit))

        return await _answer(warm, ("find", name, limit, source, warm.source), produce, limit_tokens)

    return find


def gen_tool(warm: Warm):
    """The generated code behind an operator, which exists only in a build directory: its Python binding
    (THPVariable_*, signatures), at::_ops entry points, autograd/tracing wrappers, Register<Key> wrappers and ufunc
    kernels, each at the file:line a build has them, with the text. Use it to see the glue between Python and the
    native kernel."""

    async def gen(
        op: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="An operator: aten::conv2d, conv2d, add.out.")],
        layer: Literal["all", "binding", "ops", "autograd", "register", "ufunc"] = "all",
        source: Annotated[str | None, Field(description="Generate from this tree with its own torchgen (default: the installed torch).")] = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap.codegen import Layer, locate

            tree = None
            if source is not None:
                from kernelmap.source import select_tree

                tree = select_tree(source).root
            layers = tuple(Layer) if layer == "all" else (Layer(layer),)
            return _document(locate(op, layers=layers, tree=tree))

        return await _answer(warm, ("gen", op, layer, source), produce, limit_tokens)

    return gen


def kernel_tool(warm: Warm):
    """What a GPU kernel is, from its name as a profiler or Nsight prints it (mangled, demangled or cut short): an
    ATen kernel's launcher template and the functor or lambda it was instantiated with, at file:line in the tree;
    a library kernel's library (cuDNN, cuBLAS, NCCL, CUB...), whether its code is open, and the ATen call sites
    that launch it. Use it on kernel names from a trace."""

    async def kernel(
        name: Annotated[str, Field(min_length=1, max_length=20_000, description="The kernel name, mangled or demangled.")],
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            return _document(_resolve_kernel(warm, name, source))

        return await _answer(warm, ("kernel", name, source, warm.source), produce, limit_tokens)

    return kernel


def _resolve_kernel(warm: Warm, name: str, source: str | None):
    from kernelmap.errors import SourceError

    resolver, reason = warm.resolver(source)
    if reason and source is not None:
        raise SourceError(reason)
    answer = resolver.resolve(name)
    if not any(c.isalnum() or c == "_" for c in answer.symbol):
        raise BadInput(f"not a kernel name: {name[:80]!r} (no name in it)")
    return answer


def diff_tool(warm: Warm):
    """How one operator's path changed between two indexed source trees: its yaml entry (kind, delegate, dispatch
    keys, ufunc loops, tags), its kernels (added, removed, renamed, moved, changed), its stubs and registrations,
    and the generated wrappers (each tree's own torchgen). Use it to see what changed between PyTorch versions."""

    async def diff(
        target: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="An operator (aten::prelu) or a Python name (torch.relu).")],
        from_tree: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="The older tree: a registered name or a directory.")],
        to_tree: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="The newer tree: a registered name or a directory.")],
        device: Device = "cpu",
        nodes: Annotated[bool, Field(description="Also compare every call-tree node read from each tree.")] = False,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            from kernelmap.diff import diff_op

            return _document(diff_op(target, from_tree, to_tree, device=device, nodes=nodes))

        return await _answer(warm, ("diff", target, from_tree, to_tree, device, nodes), produce, limit_tokens)

    return diff


def trace_tool(warm: Warm):
    """What ran in a model, from a profiler trace file (Chrome/Kineto .json or .json.gz, from torch.profiler on any
    machine, GPU traces included), imported once and kept: per-operator, per-module and per-file summaries (calls,
    CPU and device time, the dispatch key and kernel that served each operator, its source, the vendor library).
    With `op`, that operator's row and the call tree of its first call; with `kernel`, what a GPU kernel of the
    trace is and which operators launched it. Use it on a trace the user recorded."""

    async def trace(
        file: Annotated[str, Field(min_length=1, description="A Chrome/Kineto trace file (.json or .json.gz) on this machine.")],
        op: Annotated[str | None, Field(description="Detail of this operator (aten::conv2d) as it ran.")] = None,
        kernel: Annotated[str | None, Field(description="Detail of this GPU kernel of the trace (its name as recorded).")] = None,
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        def produce():
            return _trace_detail(warm, file, op, kernel, source)

        return await _answer(warm, ("trace", file, op, kernel, source, warm.source, _file_stamp(file)), produce, limit_tokens)

    return trace


def _file_stamp(file: str) -> tuple | None:
    import os

    try:
        st = os.stat(file)
    except (OSError, ValueError):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _trace_detail(warm: Warm, file: str, op: str | None, kernel: str | None, source: str | None):
    from pathlib import Path

    from kernelmap import trace as tracing
    from kernelmap.commands.options import check_input_file
    from kernelmap.model import CallTree
    from kernelmap.trace.summary import Summary, TraceReport

    if op is not None and kernel is not None:
        raise BadInput("ask for one of op and kernel")
    check_input_file(file, "trace file")
    source = source if source is not None else warm.source
    key = f"{Path(file).resolve()}|{_file_stamp(file)}|{source}"
    loaded = warm.traces.get(key)
    if loaded is None:
        loaded = warm.traces[key] = tracing.load(file, source_tree=source)
        while len(warm.traces) > 8:
            warm.traces.pop(next(iter(warm.traces)))
    summary = loaded.summary()
    if kernel is not None:
        answer = _resolve_kernel(warm, kernel, source)
        doc = answer.to_json()
        doc["launched_by"] = [{"op": row.name, "launches": row.kernels[kernel], "source": row.source}
                              for row in summary.ops if kernel in row.kernels]
        if not doc["launched_by"]:
            names = sorted({k for row in summary.ops for k in row.kernels})
            close = [n for n in names if kernel[:20] in n][:5]
            raise BadInput(f"no GPU kernel named {kernel[:120]!r} in this trace" + (f"; closest: {', '.join(close)}" if close else ""))
        return doc, None
    if op is None:
        return TraceReport(None, summary).to_json(), None
    rows = [r for r in summary.ops if op in (r.name, r.op)]
    if not rows:
        close = [r.name for r in summary.ops if op.split("::")[-1] in r.name][:5]
        raise BadInput(f"no operator {op[:120]!r} ran in this trace" + (f"; closest: {', '.join(close)}" if close else ""))
    first = next((n for _, n in loaded.tree.walk() if n.kind.value == "op" and op in (n.name, n.attrs.get("op"))), None)
    tree = CallTree(first, loaded.tree.notes, {**loaded.tree.meta, "kind": "trace", "op": op}) if first is not None else None
    doc = TraceReport(tree, Summary(rows, [], [], summary.notes)).to_json()
    return doc, None


def observe_tool(warm: Warm):
    """What really ran when the installed torch ran a call, frame by frame: the operator or Python name is run on
    its first OpInfo/ModuleInfo sample input under gdb on this machine's CPU build, and every native frame that did
    work is named from the binary's symbol table and joined to its definition in the source tree (file:line), with
    the CPU capability and dtype case it ran. `breaks` stops where those functions run (sgemm_,
    at::native::add_kernel) and shows the stacks there. Takes seconds (gdb; at most `timeout`), one run at a time;
    the other tools keep answering meanwhile. Use it to confirm which path a call takes, where `stack` shows what
    can run."""

    async def observe(
        target: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="An operator or Python name: aten::add.Tensor, torch.add, torch.nn.Conv2d.")],
        breaks: Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]], Field(max_length=8, description="Stop where these functions run and show the stacks there (sgemm_, at::native::add_kernel).")] = [],  # noqa: B006 - pydantic copies defaults
        dtype: Dtype = "float32",
        all_frames: Annotated[bool, Field(description="Keep the dispatcher's plumbing frames (wrap_kernel_functor, KernelFunction::call...).")] = False,
        sample_hz: Annotated[float, Field(ge=0, le=1000, description="Also sample every thread this many times a second (the hot path).")] = 0.0,
        timeout: Annotated[float, Field(gt=0, le=MAX_OBSERVE_SECONDS, description="Seconds the observed run may take; it is stopped past them.")] = 120.0,
        source: Source = None,
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        _check_observed_name(target)

        def produce():
            from kernelmap.observe import observe as run

            _check_dtype(dtype)
            return _tree_answer(run(target, breaks=tuple(breaks), source=source if source is not None else warm.source, timeout=timeout,
                                    dtype=dtype, sample_hz=sample_hz, all_frames=all_frames))

        question = ("observe", target, tuple(breaks), dtype, all_frames, sample_hz, source, warm.source)
        return await _answer(warm, question, produce, limit_tokens, aside=True)

    return observe


def _check_observed_name(target: str) -> None:
    """The server runs named calls only: a script or module:function runs code of the client's choosing."""
    text = target.strip()
    if text.endswith(".py") or "/" in text or "\\" in text or (":" in text and "::" not in text):
        raise ToolError(f"observe runs an operator or Python name on example inputs, not {_one_line(text)[:200]!r}: "
                        "a script or module:function runs with `kernelmap observe` on the command line")


def trees_tool(warm: Warm):
    """The PyTorch source trees kernelmap reads (name, root, version, commit, indexed), and which one answers by
    default; `select` makes a registered tree the one this server's answers read (every later answer names it).
    Use it to check or change which version answers."""

    async def trees(
        select: Annotated[str | None, Field(description="Make this registered tree (or directory) the default for later answers.")] = None,
    ) -> CallToolResult:
        def produce():
            from kernelmap.model import SourceEntry, SourceList
            from kernelmap.source import index_path, list_trees, select_tree

            if select is not None:
                select_tree(select)  # must open: an unknown name is a one-line error
                warm.select(select)
            doc = SourceList(tuple(SourceEntry(t.name, str(t.root), t.version, t.commit, t.kind, index_path(t).exists())
                                   for t in list_trees())).to_json()
            try:
                doc["selected"] = select_tree(warm.source).name
            except KernelmapError as e:
                doc["selected"] = None
                doc["why_none"] = str(e)
            return doc, None

        return await _answer(warm, ("trees", select), produce, bounding.DEFAULT_LIMIT, remember=False)

    return trees


def expand_tool(warm: Warm):
    """More of a bounded answer: a folded call-tree node's children (the id in its facts.more) or the next items
    of a folded list (an id in the reply's bounded.folded), bounded again. Use it when a reply says it folded what
    you need."""

    async def expand(
        id: Annotated[str, Field(min_length=1, max_length=100, description="A fold id from a reply: a12.n40.0 or a12.l1.20.")],
        limit_tokens: Limit = bounding.DEFAULT_LIMIT,
    ) -> CallToolResult:
        return await _expand(warm, id, limit_tokens)

    return expand


TOOLS = [where_tool, stack_tool, path_tool, callers_tool, explain_tool, find_tool, gen_tool, kernel_tool, diff_tool,
         trace_tool, observe_tool, trees_tool, expand_tool]


# -- what each document gains ------------------------------------------------------------------


def _annotate(doc: dict[str, Any], warm: Warm) -> None:
    """Add `pinned` and each LOCATION's `resource` to a document."""
    from kernelmap.mcp.resources import resource_uri

    origins_tables: list[dict[str, Any]] = []
    stack: list[Any] = [doc]
    locations: list[tuple[dict[str, Any], dict[str, Any]]] = []
    while stack:  # explicit: trees nest deep
        value = stack.pop()
        if isinstance(value, dict):
            if isinstance(value.get("origins"), dict):
                origins_tables.append(value["origins"])
            if "path" in value and "line" in value and "origin" in value:
                locations.append((value, origins_tables[-1] if origins_tables else {}))
            stack.extend(v for k, v in value.items() if k != "origins" and isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend(v for v in value if isinstance(v, (dict, list)))
    files = warm.files
    for location, origins in locations:
        uri = resource_uri(location, origins, files)
        if uri is not None:
            location["resource"] = uri
    doc["pinned"] = pin(origins_tables, warm)


def pin(origins_tables: list[dict[str, Any]], warm: Warm) -> dict[str, Any]:
    """What answered (each origin the answer's locations name, with its
    version), whether that mixes versions, and the selected tree and the
    installed torch."""
    from kernelmap import env
    from kernelmap.source import select_tree

    install = env.torch_install()
    try:
        tree = select_tree(warm.source)
        selected = {"name": tree.name, "version": tree.version, "commit": tree.commit}
    except KernelmapError:
        selected = None
    seen: dict[str, str] = {}
    for table in origins_tables:
        for o in table.values():
            if isinstance(o, dict) and o.get("version"):
                seen.setdefault(str(o.get("label") or o.get("kind")), str(o["version"]))
    versions = sorted(set(seen.values()))
    mixed = len(versions) > 1
    return {
        "answered_by": [f"{label} ({version})" for label, version in sorted(seen.items())],
        "versions": versions,
        "mixed": mixed,
        "note": f"this answer mixes versions {', '.join(versions)}: each location names its origin" if mixed else None,
        "selected_tree": selected,
        "torch": {"version": install.version, "commit": install.commit},
    }


# -- the short text ----------------------------------------------------------------------------


def summarize(reply: dict[str, Any]) -> str:
    """A few lines saying what the reply holds: the answer in brief, its versions, what was folded."""
    name = str(reply.get("kernelmap", "")).split("/", 1)[0]
    lines = [_SUMMARIES.get(name, _generic)(reply)]
    pinned = reply.get("pinned")
    if pinned:
        tree = pinned["selected_tree"]
        lines.append(("answered by: " + "; ".join(pinned["answered_by"]) if pinned["answered_by"] else
                      f"no file locations (selected tree {tree['name'] if tree else 'none'}, torch {pinned['torch']['version']})")
                     + (" (mixed: each location names its origin)" if pinned["mixed"] else ""))
    b = reply.get("bounded") or {}
    if b.get("folded"):
        if isinstance(b["folded"], list):
            lines.append("folded: " + ", ".join(f"{f['at']} {f['shown']} of {f['total']} shown (expand {f['id']})" for f in b["folded"]))
        else:
            lines.append(f"bounded to {b['limit_tokens']} tokens: {b['shown']} of {b['nodes']} nodes shown, {b['folded']} folded "
                         "(expand the ids in facts.more)")
    return "\n".join(line for line in lines if line)


def _loc(location: dict[str, Any] | None) -> str:
    if not location:
        return "(no location)"
    return f"{location['path']}:{location['line']}"


def _generic(reply: dict[str, Any]) -> str:
    return f"{reply.get('kernelmap')}: see the structured content"


def _where_text(d: dict[str, Any]) -> str:
    op = d["operator"]
    kernels = ", ".join(f"{k['key']}: {k['symbol']}" for k in op.get("dispatch") or [])
    out = [f"{d['query']} -> {op['name']} ({op['kind']}) at {_loc(op.get('location'))}" + (f"; kernels {kernels}" if kernels else "")]
    if d.get("structured_delegate"):
        out.append(f"structured delegate {d['structured_delegate']['name']}")
    out.extend(f"{s['role']}: {s['name']} at {_loc(s.get('location'))}" + (f" ({s['detail']})" if s.get("detail") else "")
               for s in d.get("source") or [])
    if d.get("live"):
        out.append("dispatch keys: " + " -> ".join(s["key"] for s in d["live"]["dispatch_path"]["steps"]))
    out.extend(f"note: {n}" for n in d.get("notes") or [])
    return "\n".join(out)


def _calltree_text(d: dict[str, Any]) -> str:
    meta = d.get("meta") or {}
    chain, node = [], d["root"]
    while True:
        chain.append(node)
        if not node["children"]:
            break
        node = node["children"][0]
    names = [n["name"] for n in chain]
    if len(names) > 12:
        names = names[:3] + ["..."] + names[-8:]
    what = f"{d.get('kind', 'tree')} {meta.get('target') or meta.get('symbol') or d['root']['name']}"
    if meta.get("device"):
        what += f" on {meta['device']}"
    if d.get("kind") == "observe":
        what += f" ({meta.get('stacks')} stacks in {meta.get('seconds')} s on torch {meta.get('torch')}, {meta.get('capability')})"
    path = "main path" if chain[-1].get("facts", {}).get("main") else "first path"
    out = [f"{what}: {path} {' -> '.join(names)} (ends at {_loc(chain[-1].get('location'))})"]
    out.extend(f"note: {n}" for n in d.get("notes") or [])
    return "\n".join(out)


def _path_text(d: dict[str, Any]) -> str:
    routes = d.get("routes") or []
    if not routes:
        return f"no route from {d['source']} to {d['target']} on {d['device']}" + "".join(f"\nnote: {n}" for n in d.get("notes") or [])
    first = routes[0]["steps"]
    names = [s["name"] for s in first]
    more = d.get("searched", {}).get("more") or 0
    out = [f"{len(routes)} route(s) from {d['source']} to {d['target']} on {d['device']}" + (f" (+{more} more)" if more else ""),
           f"shortest ({len(first)} steps): {' -> '.join(names)}; ends at {_loc(first[-1].get('location'))}"]
    if routes[0].get("conditions"):
        out.append("needs: " + "; ".join(routes[0]["conditions"]))
    return "\n".join(out)


def _explain_text(d: dict[str, Any]) -> str:
    steps = d.get("steps") or []
    return f"{d['op']} on {d['device']} ({d.get('dtype')}): {len(steps)} steps: " + "; ".join(
        f"{s['title']} ({_loc(s.get('location'))})" for s in steps[:12]) + (" ..." if len(steps) > 12 else "")


def _find_text(d: dict[str, Any]) -> str:
    defs = d.get("definitions") or []
    out = [f"{d['name']}: {len(defs)} definition(s), {len(d.get('references') or [])} reference(s) shown"
           + (f" (+{d['more_references']} more)" if d.get("more_references") else "")]
    out.extend(f"defined at {_loc(x.get('location'))}" for x in defs[:5])
    return "\n".join(out)


def _gen_text(d: dict[str, Any]) -> str:
    parts = [f"{k}: {len(d.get(k) or [])}" for k in ("bindings", "ops", "registrations", "ufunc") if d.get(k)]
    return f"generated code of {d.get('op')}: " + ", ".join(parts)


def _diff_text(d: dict[str, Any]) -> str:
    from collections import Counter

    counts = Counter(c["change"] for c in d.get("changes") or [])
    return f"{d.get('op')} from {d.get('from')} to {d.get('to')}: " + (", ".join(f"{n} {c}" for c, n in counts.most_common()) or "no changes")


def _trace_text(d: dict[str, Any]) -> str:
    summary = d.get("summary") or {}
    ops = summary.get("ops") or []
    out = [f"trace: {len(ops)} operator row(s) shown; by total time: " + ", ".join(f"{r['name']} {r['total_us'] / 1000:.2f} ms" for r in ops[:5])]
    if d.get("tree"):
        out.append(_calltree_text(d["tree"]))
    return "\n".join(out)


def _kernel_text(d: dict[str, Any]) -> str:
    out = [f"{d.get('symbol') or d.get('name')}: " + (f"library {d['library']}" + (" (closed)" if d.get("closed") else "") if d.get("library")
                                                        else f"kernel at {d['kernel']['location'] if d.get('kernel') else 'unknown'}")]
    if d.get("functor"):
        out.append(f"functor {d['functor']['symbol']} at {d['functor']['location']}")
    if d.get("launched_by"):
        out.append("launched by " + ", ".join(f"{x['op']} ({x['launches']}x)" for x in d["launched_by"][:5]))
    return "\n".join(out)


def _sources_text(d: dict[str, Any]) -> str:
    trees = ", ".join(f"{t['name']} ({t['version']}{', indexed' if t['indexed'] else ''})" for t in d.get("trees") or []) or "none"
    return f"trees: {trees}; selected: {d.get('selected') or 'none'}"


def _fold_text(d: dict[str, Any]) -> str:
    shown = len(d.get("items") or [])
    return f"{d['answer']} {d['at']}: items {d['start'] + 1}-{d['start'] + shown} of {d['total']}" + (f"; next: expand {d['next']}" if d.get("next") else "")


_SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "where": _where_text, "calltree": _calltree_text, "path": _path_text, "explain": _explain_text, "find": _find_text,
    "gen": _gen_text, "diff": _diff_text, "trace": _trace_text, "kernel": _kernel_text, "sources": _sources_text, "fold": _fold_text,
}

