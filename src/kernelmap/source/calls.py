"""What a call site is: a callee classified (operator, stub, launch, direct),
GPU launches, stubs and operators passed as arguments (Note [stubs passed
on], Note [operators passed on]), registrations, temporaries and the names
syntax nodes give."""

from __future__ import annotations

import re

from kernelmap import vendors
from kernelmap.source.facts import OperatorNames


# ---------------------------------------------------------------------------
# Call classification
# ---------------------------------------------------------------------------

_LAUNCH = re.compile(r"^(gpu_kernel\w*|cpu_kernel\w*|cpu_serial_kernel\w*|binary_kernel_reduce\w*|launch_\w+|\w+_kernel_launch\w*|jitted_gpu_kernel\w*)$")
_OPS_CALL = re.compile(r"^at::_ops::(\w+)::(call|redispatch)$")
_AT_FUNC = re.compile(r"^at::(?:redispatch::)?(\w+)$")
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_NOT_NAME = re.compile(r"//[^\n]*|/\*.*?\*/|\\\n", re.S)
_LAST_NAME = re.compile(r"[\w:]*$")
_TEMPLATE_KEYWORD = re.compile(r"(?:(?<=::)|(?<=\.)|(?<=->)|^)\s*template\s+")
_SPACE = re.compile(r"\s+")
# A launch written in a function-local `#define` (Indexing.cu's SMALL_INDEX and
# LARGE_INDEX) continues its lines with `\`: a continuation is blank space here.
_TRIPLE_CHEVRON = re.compile(rb"([A-Za-z_][\w:]*)[\s\\]*(?:<[^;{}<>]*(?:<[^;{}<>]*>[^;{}<>]*)*>)?[\s\\]*<<<")


_LAUNCH_OPEN = re.compile(rb"<<<")


def _launches(body: bytes) -> list[re.Match]:
    """_TRIPLE_CHEVRON's matches in `body`, searched only before each `<<<`:
    a launch's name and template arguments hold no `;`, `{` or `}`, so each
    lies after the last of those before its `<<<` (tried at every identifier
    of a body, the pattern cost more than the rest of the launch search)."""
    found = []
    after = 0  # the end of the last match: matches do not overlap
    for chevron in _LAUNCH_OPEN.finditer(body):
        if chevron.start() < after:
            continue
        start = max(after, body.rfind(b";", 0, chevron.start()) + 1, body.rfind(b"{", 0, chevron.start()) + 1,
                    body.rfind(b"}", 0, chevron.start()) + 1)
        m = _TRIPLE_CHEVRON.search(body, start, chevron.end())
        if m is not None:
            found.append(m)
            after = m.end()
    return found


def _strip_templates(text: str) -> str:
    if "/" in text or "\\" in text:  # comments and line continuations inside a name spelled over lines
        text = _NOT_NAME.sub(" ", text)
    if "template" in text:  # `ALayout::template load<K>`: the keyword is no part of the name
        text = _TEMPLATE_KEYWORD.sub("", text)
    text = "".join(text.split())  # no white space (as _SPACE.sub, cheaper for the short texts here)
    for _ in range(4):
        if "<" not in text:
            break
        text = _TEMPLATE_ARGS.sub("", text)
    return text.lstrip(":")


def classify_call(callee: str, is_member: bool, ops: OperatorNames) -> tuple[str, str | None, str | None]:
    """(kind, vendor library, operator) of a call to `callee` (template
    arguments removed; member calls spelled `.name`)."""
    short = callee.rsplit("::", 1)[-1].lstrip(".>-")
    if is_member:
        if short in ops.methods:
            return "dispatcher", None, short
        return "direct", None, None
    library = vendors.of_call(callee)
    if library is not None:
        return "vendor", library.id, None
    m = _OPS_CALL.match(callee)
    if m:
        return "dispatcher", None, m.group(1)
    m = _AT_FUNC.match(callee)
    if m:
        op = ops.is_function(m.group(1))
        if op:
            return "dispatcher", None, op
    if _LAUNCH.match(short):
        return "launch", None, None
    return "direct", None, None
_IDENT = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_~]\w*)*")
_LIB_WRAPPERS = frozenset(("TORCH_FN", "TORCH_SELECTIVE_NAME", "TORCH_SELECTIVE_SCHEMA", "makeFromBoxedFunction",
                           "makeFromUnboxedFunction", "torch::CppFunction::makeFromBoxedFunction",
                           "torch::CppFunction::makeFromUnboxedFunction",
                           "CppFunction::makeFromBoxedFunction", "c10::guts::if_constexpr"))


def _device_of(path: str) -> str:
    """The device a stub registration serves, implied by its folder."""
    parts = path.split("/")
    for part, device in (("mps", "MPS"), ("cuda", "CUDA"), ("cudnn", "CUDA"), ("miopen", "HIP"), ("hip", "HIP"),
                         ("xpu", "XPU"), ("vulkan", "Vulkan"), ("metal", "Metal"), ("mtia", "MTIA")):
        if part in parts:
            return device
    return "CPU"


def _register_key(macro: str, path: str, args: list[str]) -> tuple[str, str | None]:
    """(device, CPU capability) of a REGISTER_*DISPATCH macro in `path`."""
    word = macro.removeprefix("ALSO_").removeprefix("REGISTER_").removesuffix("DISPATCH").rstrip("_")
    if word == "":
        device = _device_of(path)
        return device, ("each CPU capability" if device == "CPU" and "/cpu/" in path else None)
    if word in ("AVX2", "AVX512", "VSX", "ZVECTOR", "SVE256"):
        return "CPU", word
    if word == "ARCH":
        return "CPU", args[1] if len(args) > 2 else None
    if word == "ALL_CPU":
        return "CPU", "all"
    if word in ("NO_CPU", "NO_AVX512"):
        return "CPU", "none" if word == "NO_CPU" else "not AVX512"
    return {"PRIVATEUSE1": "PrivateUse1"}.get(word, word), None


# Note [registrations among calls]
# Note [stubs passed on]
# `impl_func_cum_ops(self, dim, result, cumsum_stub)` hands a stub to a helper
# that calls it by its parameter's name (`stub(self.device().type(), ...)`):
# no line calls cumsum_stub, yet running the caller runs it. A name ending in
# `_stub` passed as an argument of a call is recorded as an "argument" at its
# line; `store` makes it a stub call when the tree declares that stub and the
# file defines no function of its name (Note [stub calls]), and it is no edge
# otherwise. Every stub passed on in 2.6.0 (116 places) is named `*_stub`: the
# suffix finds them cheaply, the declaration makes them stubs.
_STUB_SUFFIX = b"_stub"
_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")
_ARGUMENT_END = re.compile(rb"[ \t\r\n]*[,)]")


def _stub_arguments(data: bytes, root) -> list[tuple[int, int, tuple]]:
    """Sweep points of the `*_stub` names passed as arguments of calls other
    than macros' (Note [stubs passed on])."""
    points = []
    i = data.find(_STUB_SUFFIX)
    while i >= 0:
        end = i + len(_STUB_SUFFIX)
        start = i
        while start > 0 and data[start - 1] in _NAME_BYTES:
            start -= 1
        before = start
        while before > 0 and data[before - 1] in b" \t\r\n&":
            before -= 1
        if before > 0 and data[before - 1] in b"(," and start < i and _ARGUMENT_END.match(data, end):
            point = _stub_argument(data, root, start, end)
            if point is not None:
                points.append(point)
        i = data.find(_STUB_SUFFIX, end)
    return points


def _stub_argument(data: bytes, root, start: int, end: int) -> tuple[int, int, tuple] | None:
    node = _passed_name(data, root, start, end)
    if node is None:
        return None
    name = data[start:end].decode("utf-8", "replace").removeprefix("::")
    return (start, 1, ("call", node, (name, name.rsplit("::", 1)[-1], "argument", None, None)))


def _passed_name(data: bytes, root, start: int, end: int):
    """The node of the name at `start:end` when it is an argument of a call
    other than a macro's (`&name` and `static_cast<T>(name)` too); else None."""
    node = root.descendant_for_byte_range(start, end)
    if node is None or (node.start_byte, node.end_byte) != (start, end) or node.type not in ("identifier", "qualified_identifier"):
        return None
    holder = node.parent
    if holder is not None and holder.type == "pointer_expression":  # `&cumsum_stub`
        holder = holder.parent
    call = holder.parent if holder is not None and holder.type == "argument_list" else None
    function = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
    if function is not None and data[function.start_byte : function.end_byte].startswith(_CASTS):  # `static_cast<OutFunc>(name)`
        holder = call.parent
        call = holder.parent if holder is not None and holder.type == "argument_list" else None
        function = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
    if function is None or _MACRO_NAME.fullmatch(data[function.start_byte : function.end_byte].rsplit(b"::", 1)[-1]):
        return None  # not an argument; or a macro's (REGISTER_DISPATCH, DECLARE_DISPATCH...), which registrations read
    return node


_MACRO_NAME = re.compile(rb"[A-Z][A-Z0-9_]*")
_CASTS = (b"static_cast", b"reinterpret_cast")

# Note [operators passed on]
# `unary_op_impl_with_complex_to_float(self, at::abs_out)` and
# `comparison_op(self, other, static_cast<OutFunc>(at::logical_and_out))` pass
# an operator's function to a helper that calls its parameter
# (`out_impl(result, self)`): no line calls `at::abs_out` by name, and
# `stack aten::abs` ended at the helper. An `at::` function of an operator
# passed as an argument of a call (not a macro's; through `&` or a cast too) is
# a dispatcher call of that operator at the line that passes it, as a stub
# passed on is a stub call (Note [stubs passed on]).
# Found by the name first (a pattern that starts with a literal is searched
# fast; one that starts at every `(` and `,` cost 0.5 s over the 2.6.0 tree),
# then what comes before it is read.
_OPERATOR_ARGUMENT = re.compile(rb"at::[a-z_][a-z0-9_]*(?=[ \t\r\n]*[,)])")
_ARGUMENT_START = re.compile(rb"[(,][ \t\r\n&]*(?:(?:static|reinterpret)_cast<[^<>()]*>\()?(::)?$")


def _operator_arguments(data: bytes, root, ops: OperatorNames) -> list[tuple[int, int, tuple]]:
    """Sweep points of the operator functions passed as arguments of calls (Note [operators passed on])."""
    points = []
    for m in _OPERATOR_ARGUMENT.finditer(data):
        before = _ARGUMENT_START.search(data, max(0, m.start() - 96), m.start())
        if before is None:
            continue
        name = m.group(0).decode("ascii")
        kind, library, op = classify_call(name, False, ops)
        if kind != "dispatcher":
            continue
        start = m.start() - (2 if before.group(1) else 0)  # `::at::abs_out` is one name
        node = _passed_name(data, root, start, m.end())
        if node is not None:
            points.append((start, 1, ("call", node, (name, name.rsplit("::", 1)[-1], kind, library, op))))
    return points


# Registrations are calls: of a macro (`REGISTER_DISPATCH(add_stub, &add_kernel)`,
# `DECLARE_DISPATCH`, `AT_DISPATCH_FLOATING_TYPES(...)`) or of a library's
# `m.impl(...)` / `m.def(...)` in a TORCH_LIBRARY block. They are picked from
# the calls the query finds, by the callee's spelling (remembered with its
# call kind), not by patterns of their own: a `#match?` predicate is checked
# by calling back into Python for every candidate call, which cost more than
# reading the few hundred registrations of a tree.
_REGISTRATION_MACRO = re.compile(r"DECLARE_DISPATCH|DEFINE_DISPATCH|(ALSO_)?REGISTER_[A-Z0-9_]*DISPATCH|AT_DISPATCH_[A-Z0-9_]+")
_LIBRARY_METHODS = frozenset((b"impl", b"def"))


def _registers(callee, t: str, text: bytes) -> str | None:
    """"macro" when a call of `callee` (a function node of type `t` and text
    `text`) may be a registration macro's, "library" when it may be
    `m.impl`/`m.def`, else None."""
    if t == "identifier" and text[:1] in b"ADR":  # DECLARE_, DEFINE_, REGISTER_, ALSO_, AT_DISPATCH_
        return "macro" if _REGISTRATION_MACRO.fullmatch(text.decode("utf-8", "replace")) else None
    if t == "field_expression" and text.endswith((b"impl", b"def")):
        argument = callee.child_by_field_name("argument")
        field = callee.child_by_field_name("field")
        if argument is not None and argument.type == "identifier" and field is not None and field.type == "field_identifier" and field.text in _LIBRARY_METHODS:
            return "library"
    return None


# A stub registration written at the start of a line, as every file writes them.
_REGISTER_LINE = re.compile(rb"^[ \t]*((?:ALSO_)?REGISTER_[A-Z0-9_]*DISPATCH)[ \t]*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", re.M)


def _lost_registrations(sites, original: bytes) -> list[tuple[int, int, tuple]]:
    """Note [lost registrations]: REGISTER_DISPATCH lines that an error region
    swallowed (FlashAttentionKernel.cpp's `ALSO_REGISTER_AVX512_DISPATCH`
    after `} // anonymous namespace` parses as part of a broken expression),
    read from the text: sweep points (byte, 1, ("lost", (macro, args, line), None))."""
    seen = {call.start_byte for registers, call, _ in sites if registers == "macro"}
    lost = []
    for m in _REGISTER_LINE.finditer(original):
        if m.start(1) in seen or original[max(0, m.start() - 3) : m.start()].rstrip(b"\r\n").endswith(b"\\"):
            continue  # captured already, or a line of a macro's definition
        args = [_SPACE.sub("", a.decode("utf-8", "replace")) for a in m.group(2).split(b",")]
        if args and args[0]:
            stub_at = m.end(2) - len(m.group(2).lstrip())  # its line is the stub's, as for the others
            line = original.count(b"\n", 0, stub_at) + 1
            lost.append((m.start(1), 1, ("lost", (m.group(1).decode(), args, line), None)))
    return lost


def _conversion_operator(node) -> str | None:
    """The name of a conversion operator's declarator (`operator bool`,
    `A::operator const std::string&`: no parameter list, and the type's
    spelling kept as written), else None."""
    top = node
    while node.type == "qualified_identifier":
        node = node.child_by_field_name("name")
        if node is None:
            return None
    if node.type != "operator_cast":
        return None
    fn = node.child_by_field_name("declarator")
    while fn is not None and fn.type != "abstract_function_declarator":
        fn = fn.child_by_field_name("declarator") or (fn.named_children[-1] if fn.named_children else None)
    params = fn.child_by_field_name("parameters") if fn is not None else None
    if params is None:
        return None
    text = top.text
    scope = _strip_templates(text[: node.start_byte - top.start_byte].decode("utf-8", "replace"))
    return scope + _SPACE.sub(" ", text[node.start_byte - top.start_byte : params.start_byte - top.start_byte].decode("utf-8", "replace")).strip()


def _constructed_type(node) -> str | None:
    """The class of a temporary built in place (`DimMask()`, `at::cuda::OptionalCUDAGuard(d)`), else None."""
    if node is None or node.type != "call_expression":
        return None
    function = node.child_by_field_name("function")
    if function is None or function.type not in ("identifier", "qualified_identifier", "template_function"):
        return None
    name = _strip_templates(function.text.decode("utf-8", "replace"))
    short = name.rsplit("::", 1)[-1]
    # a class name: CamelCase, not a macro, not a Tensor-returning factory
    if short[:1].isupper() and any(c.islower() for c in short) and short not in ("Tensor", "TensorBase", "Scalar"):
        return name
    return None


def _called_temporary(call) -> str | None:
    """The class of a function object built in place to be called at once
    (`cpu_scatter_gather_base_kernel<>()(self, dim, ...)`): a class by its
    spelling (`_constructed_type`), or any name given template arguments and
    no arguments. None for other calls of a call's result (`get_fn()(x)`)."""
    made = _constructed_type(call)
    if made is not None:
        return made
    function = call.child_by_field_name("function")
    arguments = call.child_by_field_name("arguments")
    if function is None or function.type != "template_function" or arguments is None or arguments.named_child_count:
        return None
    return _strip_templates(function.text.decode("utf-8", "replace"))


def _braced_temporary(literal) -> str | None:
    """The class of a function object brace-initialised to be called at once
    (`UniqueCub<scalar_t>{}(self, ...)`, `sum_functor<scalar_t>{}(iter)`):
    the literal's type, named (not `decltype(...)` or a primitive type)."""
    kind = literal.child_by_field_name("type")
    if kind is None or kind.type not in ("type_identifier", "template_type", "qualified_identifier"):
        return None
    return _strip_templates(kind.text.decode("utf-8", "replace"))


def _kernel_name(text: str) -> str | None:
    """The function a registration names: `&mul_kernel`, `TORCH_FN(wrapper_CPU_add)`."""
    text = _strip_templates(text)
    names = [n for n in _IDENT.findall(text) if n not in _LIB_WRAPPERS and n not in ("static_cast", "reinterpret_cast")]
    if not names:
        return None
    return names[-1] if not text.startswith("&") else names[0]


def _called_name(callee):
    """The node of the name a callee calls, for a callee over several lines
    (`TensorIteratorConfig()` / `.check_all_same_dtype(false)`): the field of
    a member access, the last part of a qualified name, the template's name."""
    node = callee
    while node.type in _NAMED_CALLEES:
        inner = node.child_by_field_name(_NAMED_CALLEES[node.type])
        if inner is None:
            break
        node = inner
    return node


_NAMED_CALLEES = {"field_expression": "field", "qualified_identifier": "name", "template_function": "name", "template_method": "name",
                  "template_type": "name"}
