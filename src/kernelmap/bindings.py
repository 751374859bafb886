"""The hand-written bindings of PyTorch's Python names, read as text from the
C++ method tables that define them (`{"to", castPyCFunctionWithKeywords(THPVariable_to), ...}`):
which C++ function a name is, and what that function calls (Note [hand-written
bindings], Note [binding calls])."""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelmap.errors import SourceError

if TYPE_CHECKING:
    from tree_sitter import Node, Query

    from kernelmap.source.extract import Extractor
    from kernelmap.source.facts import Definition, FileFacts


# Note [hand-written bindings]
# torchgen skips some operators (gen_python_functions' SKIP_PYTHON_BINDINGS:
# `to`, `contiguous`, `copy_`, `nonzero`, `item`...): their Python names are
# entries of method tables written by hand, `{"to", castPyCFunctionWithKeywords(
# THPVariable_to), ...}`. A table entry names a C++ function; when the file
# defines it, its body (and the functions of the same file it calls, an
# overload chosen by its argument count: `dispatch_to(self_, dtype, ...)`)
# calls the operators as `self.to(...)` or `at::nonzero_out(...)`; when the
# file does not, it is a generated binding (`__add__` is `THPVariable_add`, the
# binding of `Tensor.add`). Which of those calls are operators the catalog says.
#
# Note [binding calls]
# The file of a table is read by the source index's Extractor: the functions
# it defines (those a macro of the file writes included), their lines, and
# the calls in each. The Extractor keeps only calls that can be edges of the
# index (Note [calls kept]): it drops accessor methods (`self_.item()`,
# `.device()`), names a method called on a call's result after that call
# (`THPVariable_Unpack(self).detach_()` reads as `THPVariable_Unpack::detach_`),
# and counts no arguments. So a query of this module's own, on a parse of the
# same text, adds every method call (to the function whose lines hold it),
# the argument count of each call of a plain name, the parameter count of each
# function, and the tables' entries.

# Python namespace -> the repository paths of its hand-written tables, newest layout first.
_MANUAL_TABLES = {
    "torch.Tensor": (
        "tools/autograd/templates/python_variable_methods.cpp",
        "torch/csrc/autograd/python_variable_methods.cpp",
        "torch/csrc/autograd/python_variable.cpp",  # the mapping slots: __getitem__, __setitem__
    ),
    "torch": ("torch/csrc/autograd/python_torch_functions_manual.cpp",),
}
# Where the installed wheel ships a repository path (its torchgen's packaged templates).
_WHEEL_PREFIXES = (("tools/autograd/", "torchgen/packaged/autograd/"),)


@dataclass(frozen=True)
class CppCall:
    """A call in the body of a hand-written binding: `self.to(...)` (a method)
    or `at::nonzero_out(...)` (a function)."""

    name: str  # "to", "nonzero_out"
    is_method: bool
    line: int


@dataclass(frozen=True)
class ManualBinding:
    """A Python name served by an entry of a hand-written method table."""

    python_name: str  # "torch.Tensor.to"
    function: str  # "THPVariable_to"
    repo_path: str  # "tools/autograd/templates/python_variable_methods.cpp"
    path: Path  # the file on disk
    line: int  # of the function's definition, or of its name in the table when the file does not define it
    defined: bool  # False: the file does not define it: a generated binding (`__add__` -> THPVariable_add) or another file's
    calls: tuple[CppCall, ...]  # in the body and the functions of the file it calls, in order


def manual_binding(dotted: str, root: Path) -> ManualBinding | None:
    """The hand-written binding of `torch.X` / `torch.Tensor.X` under `root`
    (a tree, or site-packages), read from its method table (Note [hand-written bindings])."""
    namespace, _, name = dotted.rpartition(".")
    for repo_path in _MANUAL_TABLES.get(namespace, ()):
        path = _manual_file(repo_path, root)
        if path is None:
            continue
        table_file = _table_file(path, repo_path)
        entry = table_file.entries.get(name)
        if entry is None:
            continue
        function, entry_line = entry
        if function not in table_file.functions:
            return ManualBinding(dotted, function, repo_path, path, entry_line, False, ())
        definition = table_file.functions[function][0]
        return ManualBinding(dotted, function, repo_path, path, definition.line, True, _reached_calls(definition, table_file.functions))
    return None


def _manual_file(repo_path: str, root: Path) -> Path | None:
    candidates = [root / repo_path]
    candidates += [root / (wheel + repo_path[len(repo) :]) for repo, wheel in _WHEEL_PREFIXES if repo_path.startswith(repo)]
    return next((p for p in candidates if p.is_file()), None)


@dataclass(frozen=True)
class _CppFunction:
    """A function the file of a method table defines outside any other definition."""

    name: str  # "dispatch_to"
    line: int
    parameters: int | None  # None where no parameter list was read (a brace-initialised declaration, a macro's expansion)
    calls: frozenset[CppCall]  # its method and `at::` calls
    callees: frozenset[tuple[str, int | None]]  # (name, argument count) of its calls of plain names: ("dispatch_to", 5)


@dataclass(frozen=True)
class _TableFile:
    """What a file of hand-written method tables says (Note [binding calls])."""

    entries: dict[str, tuple[str, int]]  # Python name -> (C++ function, line of its name in the table)
    functions: dict[str, tuple[_CppFunction, ...]]  # name -> its overloads, in the file's order


def _reached_calls(binding: _CppFunction, functions: dict[str, tuple[_CppFunction, ...]]) -> tuple[CppCall, ...]:
    """The calls of `binding` and of the functions of the same file it calls
    (the overloads taking as many parameters as the call passes arguments, or
    all of them when none does), in order of lines."""
    found: set[CppCall] = set()
    seen: set[tuple[str, int]] = set()
    work = [binding]
    while work:
        function = work.pop(0)
        if (function.name, function.line) in seen:
            continue
        seen.add((function.name, function.line))
        found.update(function.calls)
        for name, count in function.callees:
            if name not in functions or (function is binding and name == binding.name):
                continue
            overloads = functions[name]
            work.extend([f for f in overloads if count is not None and f.parameters == count] or overloads)
    return tuple(sorted(found, key=lambda c: (c.line, c.name, c.is_method)))


# Note [binding calls]: what the Extractor does not say.
_BINDING_QUERY = """
(call_expression function: (field_expression field: (_) @method) arguments: (argument_list))
(call_expression function: [(identifier) @callee (template_function name: (identifier) @callee)] arguments: (argument_list) @arguments)
(function_definition declarator: (_) @declarator) @definition
(declaration type: (type_identifier) @table.type declarator: (init_declarator value: (initializer_list) @table))
"""
# `static PyMappingMethods THPVariable_as_mapping = {len, getitem, setitem};`: CPython's slot order.
_MAPPING_SLOTS = ("__len__", "__getitem__", "__setitem__")


@functools.cache
def _extractor() -> Extractor:
    # Imported here: the index's Extractor and tree-sitter are needed only by
    # hand-written bindings, and every command imports this module.
    from kernelmap.source.extract import extractor
    from kernelmap.source.facts import OperatorNames

    # Only names are read: which calls are operators the catalog says.
    return extractor(OperatorNames(frozenset(), frozenset()))


@functools.cache
def _binding_query() -> Query:
    import tree_sitter

    return tree_sitter.Query(_extractor().language, _BINDING_QUERY)


def _cpp_facts(path: Path, repo_path: str, data: bytes) -> FileFacts:
    """The Extractor's facts of one file; SourceError when it could not read it."""
    facts = _extractor().extract(repo_path, data)
    if facts.skipped:
        raise SourceError(f"{path} could not be read: {facts.skipped}")
    return facts


@functools.lru_cache(maxsize=8)
def _table_file(path: Path, repo_path: str) -> _TableFile:
    """The tables and top-level functions of one file, read once (Note [binding calls])."""
    from kernelmap.source.masking import mask_attributes

    data = path.read_bytes()  # the Extractor's masking blanks HANDLE_TH_ERRORS (Note [masked attributes])
    facts = _cpp_facts(path, repo_path, data)
    tree = _extractor().parser.parse(mask_attributes(data))  # the text the Extractor parsed
    methods, arguments, parameters, tables = _queried(tree.root_node)
    definitions = facts.definitions
    outer = _outermost(definitions)
    tops = sorted({outer[i] for i in range(len(definitions))}, key=lambda i: definitions[i].line)
    calls: dict[int, set[CppCall]] = {i: set() for i in tops}
    callees: dict[int, set[tuple[str, int | None]]] = {i: set() for i in tops}
    for c in facts.calls:
        if c.definition < 0:
            continue
        i = outer[c.definition]
        if c.callee == "." + c.short:
            calls[i].add(CppCall(c.short, True, c.line))
        elif c.callee == "at::" + c.short:
            calls[i].add(CppCall(c.short, False, c.line))
        elif c.callee == c.short:  # a function of the file, maybe: its argument counts are the query's (None: a macro's expansion)
            callees[i].update((c.short, n) for n in arguments.get((c.line, c.short), (None,)))
    starts = [definitions[i].line for i in tops]
    for call in methods:  # what the Extractor drops or renames: by the definition whose lines hold it
        k = bisect.bisect_right(starts, call.line) - 1
        if k >= 0 and call.line <= definitions[tops[k]].end_line:
            calls[tops[k]].add(call)

    functions: dict[str, list[_CppFunction]] = {}
    for i in tops:
        d = definitions[i]
        if d.kind == "function":
            found = _CppFunction(d.short, d.line, parameters.get((d.short, d.end_line)), frozenset(calls[i]), frozenset(callees[i]))
            functions.setdefault(d.short, []).append(found)
    return _TableFile(_table_entries(tables), {name: tuple(overloads) for name, overloads in functions.items()})


def _queried(root: Node) -> tuple[list[CppCall], dict[tuple[int, str], set[int]], dict[tuple[str, int], int], list[tuple[bool, Node]]]:
    """What _BINDING_QUERY finds: every method call; (line, name) of each call
    of a plain name -> its argument counts; (name, end line) of each function
    -> its parameter count; the tables (is a `PyMappingMethods`, its initializer list)."""
    import tree_sitter

    methods: list[CppCall] = []
    arguments: dict[tuple[int, str], set[int]] = {}
    parameters: dict[tuple[str, int], int] = {}
    tables: list[tuple[bool, Node]] = []
    for _, cap in tree_sitter.QueryCursor(_binding_query()).matches(root):
        if "method" in cap:
            name = _method_name(cap["method"][0])
            if name is not None:
                methods.append(CppCall(name, True, cap["method"][0].start_point[0] + 1))
        elif "callee" in cap:
            callee = cap["callee"][0]
            arguments.setdefault((callee.start_point[0] + 1, callee.text.decode()), set()).add(_item_count(cap["arguments"][0]))
        elif "definition" in cap:
            declared = _function_declarator(cap["declarator"][0])
            if declared is not None:
                parameters[(declared[0], cap["definition"][0].end_point[0] + 1)] = _item_count(declared[1])
        elif cap["table.type"][0].text in (b"PyMethodDef", b"PyMappingMethods"):
            tables.append((cap["table.type"][0].text == b"PyMappingMethods", cap["table"][0]))
    return methods, arguments, parameters, tables


def _outermost(definitions: tuple[Definition, ...]) -> list[int]:
    """For each definition, the index of the outermost one whose lines hold it (its own when none does)."""
    outer = list(range(len(definitions)))
    current = None
    for i in sorted(outer, key=lambda i: (definitions[i].line, -definitions[i].end_line)):
        if current is not None and definitions[i].end_line <= definitions[current].end_line:
            outer[i] = current
        else:
            current = i
    return outer


def _method_name(field: Node) -> str | None:
    """The method a member call calls: `x.to`, `x.template data_ptr<T>`; None for an operator or destructor."""
    while field.type in ("dependent_name", "template_method") and field.named_children:
        field = field.named_children[0]
    return field.text.decode() if field.type == "field_identifier" else None


def _function_declarator(declarator: Node) -> tuple[str, Node] | None:
    """(name, parameter list) of a function definition's declarator, under
    its `*` and `&`, where the name is a plain one (not `A::f`, not `operator()`)."""
    while declarator.type in ("pointer_declarator", "reference_declarator") and declarator.named_children:
        declarator = declarator.named_children[-1]
    if declarator.type != "function_declarator":
        return None
    name = declarator.child_by_field_name("declarator")
    params = declarator.child_by_field_name("parameters")
    if name is None or name.type != "identifier" or params is None:
        return None
    return name.text.decode(), params


def _item_count(items: Node) -> int:
    """How many parameters or arguments a list holds (`(void)` holds none)."""
    found = [c for c in items.children if c.type not in ("(", ")", ",", "comment")]
    return 0 if len(found) == 1 and found[0].text == b"void" else len(found)


def _table_entries(tables: list[tuple[bool, Node]]) -> dict[str, tuple[str, int]]:
    """Python name -> (C++ function, line of its name) of every entry of the
    `PyMethodDef x[] = {...}` tables (the function is the last name of the
    entry's second field: `castPyCFunctionWithKeywords(TypeError_to_NotImplemented_<THPVariable_add>)`)
    and of the slots of the `PyMappingMethods` ones; `tables` is (is a mapping, its initializer list)."""
    entries: dict[str, tuple[str, int]] = {}
    for is_mapping, table in sorted(tables, key=lambda t: (t[0], t[1].start_byte)):
        fields = [c for c in table.named_children if c.type != "comment"]
        if is_mapping:
            named = [(slot, _last_name(f)) for slot, f in zip(_MAPPING_SLOTS, fields)]
            for slot, name in named:
                if name is not None and name.text not in (b"nullptr", b"NULL"):
                    entries.setdefault(slot, (name.text.decode(), name.start_point[0] + 1))
            continue
        for entry in fields:
            parts = [c for c in entry.named_children if c.type != "comment"] if entry.type == "initializer_list" else []
            if len(parts) < 2 or parts[0].type != "string_literal":
                continue
            name = _last_name(parts[1])
            if name is not None:
                python_name = "".join(c.text.decode() for c in parts[0].named_children if c.type == "string_content")
                entries.setdefault(python_name, (name.text.decode(), name.start_point[0] + 1))
    return entries


def _last_name(node: Node) -> Node | None:
    """The last leaf of `node` spelled as a name, outside string literals
    (`THPVariable_add` in `castPyCFunctionWithKeywords(TypeError_to_NotImplemented_<THPVariable_add>)`)."""
    names = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type in _LITERALS:
            continue
        if current.child_count:
            stack.extend(current.children)
        elif current.text.decode("utf-8", "replace").isidentifier():
            names.append(current)
    return max(names, key=lambda n: n.start_byte, default=None)


_LITERALS = frozenset(("string_literal", "raw_string_literal", "char_literal", "concatenated_string"))


# Where ATen's hand-written Tensor methods live: a tree's source, or the wheel's headers.
_TENSOR_BASE = ("aten/src/ATen/core/TensorBase.h", "torch/include/ATen/core/TensorBase.h")


@functools.lru_cache(maxsize=8)
def dispatching_tensor_methods(root: Path) -> frozenset[str]:
    """The hand-written C++ Tensor methods (operators marked
    `manual_cpp_binding`) that enter the dispatcher: `contiguous` calls
    `__dispatch_contiguous`; `numel`, `dim` read the TensorImpl and dispatch nothing."""
    for rel in _TENSOR_BASE:
        path = root / rel
        if path.is_file():
            facts = _cpp_facts(path, rel, path.read_bytes())
            return frozenset(c.short.removeprefix("__dispatch_") for c in facts.calls if c.short.startswith("__dispatch_"))
    return frozenset()


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# The wheel's type stubs of the C++ bindings: every function of torch._C._VariableFunctions
# (what `torch.X` binds) and every method of torch._C.TensorBase, generated or written by hand.
_STUBS = {"torch": ("torch/_C/_VariableFunctions.pyi", None), "torch.Tensor": ("torch/_C/__init__.pyi", "TensorBase")}


def stub_declaration(dotted: str, root: Path) -> str | None:
    """`path:line` of the type stub under `root` (site-packages) that declares
    `torch.X` or `torch.Tensor.X` as a C++ binding; None when none does."""
    namespace, _, name = dotted.rpartition(".")
    if namespace not in _STUBS or not name.isidentifier():
        return None
    rel, cls = _STUBS[namespace]
    path = root / rel
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    start, end = 0, len(text)
    if cls is not None:
        head = re.search(rf"^class {cls}\b.*$", text, re.M)
        if head is None:
            return None
        start = head.end()
        following = re.search(r"^\S", text[start:], re.M)
        end = start + following.start() if following else end
    indent = "    " if cls is not None else ""
    found = re.compile(rf"^{indent}def {re.escape(name)}\(", re.M).search(text, start, end)
    return f"{rel}:{_line_at(text, found.start())}" if found else None
