"""Turn one C++/CUDA file of a PyTorch tree into facts: definitions with
qualified names and preprocessor conditions, classified call sites, stub
declarations and registrations, library registrations, dtype dispatch sites.

tree-sitter finds the nodes with the queries in `queries/*.scm`; Python only
reads the captures. Scopes and conditions are found by one sweep over the
captured regions in byte order (Note [regions]), never by walking the tree.

Facts are plain tuples (cheap to send between processes); `store` turns
them into rows. The rules below that decide what the graph grows from are
listed, with an example and a test each, in docs/graph-rules.md.

The jobs are split: `facts` (what a file gives), `preprocess` (its own
macros), `masking` (its text made parseable), `calls` (what a call site is),
`regions` (where each definition and call sits); this module parses and
queries, and gives a file's facts.

Note [calls kept]
Calls that can never be an edge of interest are not recorded: casts
(`static_cast<...>(x)` reads as a call), `std::` functions, ALL-CAPS macros
(TORCH_CHECK, C10_CUDA_KERNEL_LAUNCH_CHECK) unless they name a vendor API,
and member calls of containers and TensorBase accessors (`.size()`,
`.push_back()`, `.data_ptr()`). They were a third of all call sites.

Note [stub calls]
`x_stub(kCPU, ...)` is a DispatchStub call only when `x_stub` is declared by
DECLARE_DISPATCH / DEFINE_DISPATCH somewhere in the tree, which one file
cannot know: the extractor records such calls as direct and `store` promotes
them once the tree's stubs are known, except where the file itself defines a
function of that name (the CPU padding kernel's local `add_stub` helper
shadows the real `add_stub`).

"""

from __future__ import annotations

import _signal
import bisect
import functools
import hashlib
import itertools
import re
import signal
import threading
import time
from pathlib import Path

import tree_sitter
import tree_sitter_cpp

from kernelmap import vendors
from kernelmap.source import objc as objc_source
from kernelmap.source.calls import (
    _braced_temporary,
    _called_name,
    _called_temporary,
    classify_call,
    _constructed_type,
    _conversion_operator,
    _kernel_name,
    _LAST_NAME,
    _launches,
    _lost_registrations,
    _operator_arguments,
    _register_key,
    _registers,
    _SPACE,
    _strip_templates,
    _stub_arguments,
    _STUB_SUFFIX,
)
from kernelmap.source.facts import (
    Call,
    Definition,
    FileFacts,
    InlineNamespace,
    OperatorNames,
    Registration,
    _SKIPPED_FUNCTIONS,
    _SKIPPED_METHODS,
    StubDecl,
)
from kernelmap.source.masking import _brace_depths, _BRACES, _CHECK_MACROS, _masked
from kernelmap.source.preprocess import (
    _expanded_lines,
    _holds_word,
    _LINE_CONTINUATION,
    _MACRO_PARAM,
    _macro_uses,
    _MAX_LOCAL_MACRO_BYTES,
    _MAX_LOCAL_MACROS_READ,
)
from kernelmap.source.regions import _label, _lambda_conditions, _namespace_name, _negate, _recover_namespaces, _sweep


QUERY_DIR = Path(__file__).with_name("queries")
QUERY_FILES = ("scopes", "preproc", "definitions", "calls", "errors", "macros")
SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh", ".mm")
MAX_FILE_BYTES = 4 * 1024 * 1024  # larger files are generated tables, not code worth parsing
# Per-file time budget. The slowest real file of 2.6.0 takes well under a
# second; hostile nesting (100k namespaces, 1 MB of `template<`) takes tens of
# seconds and would hold a build's lock meanwhile.
MAX_FILE_SECONDS = 10.0
# Files up to this size are parsed from bytes with no deadline inside the
# parse (Note [bytes-backed tree]): tree-sitter's error recovery keeps a
# bounded number of stack versions, so a parse is linear in the input, and the
# most hostile inputs found (`a<a<a<...`) cost about 8 us a byte: 2 s here.
# Spaces are not counted: the lexer skips them at next to no cost, and masking
# (Note [data tables]) leaves megabytes of them.
UNTIMED_PARSE_BYTES = 256 * 1024


# tree-sitter's query engine is not interruptible and grows much faster than
# linearly on degenerate trees (100k nested namespaces: 80 s; 110k unclosed
# `template<` in one flat ERROR node: 60 s). Real code of 2.6.0 nests braces
# at most ~30 deep and puts at most ~550 nodes side by side under one node.
MAX_BRACE_DEPTH = 512
MAX_SIBLINGS = 50_000


def degenerate(data: bytes, root=None) -> str | None:
    """Why a file is too degenerate to query (None when it is not): braces
    nested deeper than MAX_BRACE_DEPTH, or (given its parse) more than
    MAX_SIBLINGS nodes under the root or one of its children."""
    braces = data.translate(None, _BRACES)
    if len(braces) > MAX_BRACE_DEPTH and _brace_depths(braces, MAX_BRACE_DEPTH)[1] > MAX_BRACE_DEPTH:
        return f"braces nested more than {MAX_BRACE_DEPTH} deep"
    if root is not None:
        widest = max([root.child_count, *(c.child_count for c in root.children)])
        if widest > MAX_SIBLINGS:
            return f"{widest} nodes side by side (more than {MAX_SIBLINGS})"
    return None


def _once(placed: dict, facts: list, fact) -> None:
    if fact not in placed:
        placed[fact] = True
        facts.append(fact)


class FileTimeout(Exception):
    """Raised inside the extraction of a file that ran past its time budget."""


# ---------------------------------------------------------------------------
# The extractor
# ---------------------------------------------------------------------------

_STRUCTURED = {
    "TORCH_IMPL_FUNC": ("structured_impl", "native", "impl"),
    "TORCH_META_FUNC": ("structured_meta", "meta", "meta"),
    "TORCH_META_FUNC2": ("structured_meta", "meta", "meta"),
    "TORCH_PRECOMPUTE_META_FUNC": ("structured_meta", "meta", "meta"),
    "TORCH_PRECOMPUTE_META_FUNC2": ("structured_meta", "meta", "meta"),
}
_UNWRAP = frozenset(("pointer_declarator", "reference_declarator", "attributed_declarator", "parenthesized_declarator"))
_INCLUDE_GUARD = re.compile(r"(_H|_H_|_HPP|_INCLUDED|_INCLUDED_)$")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Extractor:
    """A parser and compiled queries; one per process."""

    def __init__(self, ops: OperatorNames, budget: float = MAX_FILE_SECONDS):
        self.ops = ops
        self.budget = budget  # seconds per file
        self.language = tree_sitter.Language(tree_sitter_cpp.language())
        self.parser = tree_sitter.Parser(self.language)
        # One query made of every .scm file, so the tree is walked once; where
        # each pattern starts in the text says which file (and so which
        # handler) it came from.
        texts = [(QUERY_DIR / f"{name}.scm").read_text() for name in QUERY_FILES]
        self.query = tree_sitter.Query(self.language, "\n".join(texts))
        ends = list(itertools.accumulate(len(t.encode()) + 1 for t in texts))
        self.pattern_file = [QUERY_FILES[bisect.bisect_right(ends, self.query.start_byte_for_pattern(i))]
                             for i in range(self.query.pattern_count)]
        self._callees: dict[tuple[int, bytes], tuple[tuple | None, str | None]] = {}
        self._members: dict[bytes, tuple | None] = {}

    def extract(self, path: str, data: bytes) -> FileFacts:
        """Facts of one file; `path` is repository-relative (it decides stub devices)."""
        sha1 = hashlib.sha1(data).hexdigest()
        if len(data) > MAX_FILE_BYTES:
            return FileFacts(path, len(data), sha1, 0, f"larger than {MAX_FILE_BYTES // 2**20} MB", (), (), (), ())
        if b"\0" in data:
            return FileFacts(path, len(data), sha1, 0, "binary (NUL bytes)", (), (), (), ())
        why = degenerate(data)
        if why:
            return FileFacts(path, len(data), sha1, 0, why, (), (), (), ())
        try:
            with _time_budget(self.budget):
                return self._extract(path, data, sha1)
        except FileTimeout:
            self.parser.reset()  # a cancelled parse would otherwise be resumed by the next file
            return FileFacts(path, len(data), sha1, 0, f"took more than {self.budget:g} s to parse", (), (), (), ())
        except RecursionError:
            return FileFacts(path, len(data), sha1, 0, "nested too deeply to parse", (), (), (), ())
        except Exception as e:  # a bug: say which file
            raise RuntimeError(f"while extracting {path}: {e!r}") from e

    def _extract(self, path: str, data: bytes, sha1: str, expand: bool = True) -> FileFacts:
        """`expand`: whether to expand the file's own macros that define
        functions (Note [definitions written by macros]); not inside an expansion."""
        # tree-sitter checks the deadline itself while it parses: the SIGALRM
        # budget only interrupts Python code. (Not while it matches: a
        # progress callback there crashes tree-sitter 0.26.1.)
        deadline = time.monotonic() + self.budget if self.budget > 0 else float("inf")
        past = lambda *state: time.monotonic() > deadline  # noqa: E731
        original, (data, macros) = data, _masked(data, objc_source.is_objc(path, data))
        # Note [bytes-backed tree]: only a parse from a callback can be given a
        # deadline, but a tree parsed from a callback reads every node's text
        # (and every `#match?` of the queries) through that callback again,
        # 100x slower than from bytes. Small files are parsed from bytes
        # (UNTIMED_PARSE_BYTES); larger ones from a callback under the deadline,
        # then again from the bytes with the finished tree as old tree (no
        # edits): every subtree is reused, the same tree at a quarter of a parse.
        if len(data) <= UNTIMED_PARSE_BYTES or len(data) - data.count(b" ") <= UNTIMED_PARSE_BYTES:
            tree = self.parser.parse(data)
        else:
            tree = self.parser.parse(lambda offset, point: data[offset : offset + 65536], progress_callback=past)
            if tree is None or past():
                raise FileTimeout()
            tree = self.parser.parse(data, old_tree=tree)
        if past():
            raise FileTimeout()
        root = tree.root_node
        why = degenerate(b"", root)
        if why:
            return FileFacts(path, len(data), sha1, 0, why, (), (), (), ())
        by_file: dict[str, list[dict]] = {name: [] for name in QUERY_FILES}
        into = [by_file[name].append for name in self.pattern_file]  # by pattern: a match each, half a million a tree
        for pattern, cap in tree_sitter.QueryCursor(self.query).matches(root):
            into[pattern](cap)
        error_nodes = [n for c in by_file["errors"] for n in c.get("error", ())]

        regions: list[tuple[int, int, str, object]] = []  # Note [regions]
        self._scope_regions(by_file["scopes"], regions)
        self._preproc_regions(by_file["preproc"], regions)
        _recover_namespaces(error_nodes, regions)
        libraries: list[tuple[int, int, tuple[str, str | None, str]]] = []

        defs_raw = []
        for cap in by_file["definitions"]:
            node = cap["definition"][0]
            if node.type == "declaration" and _body(node) is None:
                continue
            info = self._declarator(cap["declarator"][0])
            if info is None:
                continue
            if info[0] == "library":
                libraries.append((node.start_byte, node.end_byte, info[1]))
                continue
            defs_raw.append((node, info))
        defs_raw.sort(key=lambda d: d[0].start_byte)
        for i, (node, _) in enumerate(defs_raw):
            body = _body(node)
            regions.append((body.start_byte, body.end_byte, "def", i))
        for start, end, payload in libraries:
            regions.append((start, end, "lib", payload))

        # (start byte, kind, payload): kind 0 = definition, 1 = call or registration
        points: list[tuple[int, int, object]] = [(n.start_byte, 0, (i, n, info)) for i, (n, info) in enumerate(defs_raw)]
        sites = []  # registrations: Note [registrations among calls]
        callees = self._callees
        for cap in by_file["calls"]:
            callee = cap["callee"][0]
            start = callee.start_byte
            text = data[start : callee.end_byte]  # its `.text`, at half the cost: the tree is parsed from `data`
            key = (callee.kind_id, text)  # (`_callee`, `_registers`), remembered by the callee's spelling
            known = callees.get(key)
            if known is None:
                kind = callee.type
                known = callees[key] = (self._callee(callee, kind, text), _registers(callee, kind, text))
            if known[0] is not None:  # Note [calls kept]: the rest never reach the sweep
                # The call's place is where it starts (a call expression starts
                # where its callee does: calls.scm); its line, the called name's.
                declared = cap.get("call")
                named = _called_name(callee) if b"\n" in text else callee
                if declared is None:
                    points.append((start, 1, ("call", named, known[0])))
                else:
                    points.append((declared[0].start_byte, 1, ("call", named, known[0])))
            if known[1] is not None:
                sites.append((known[1], callee.parent, callee))
            if known[0] is None and text.startswith(_CHECK_MACROS):  # a macro, never a call kept: Note [calls in checks]
                arguments = callee.parent.child_by_field_name("arguments")
                if arguments is not None:
                    regions.append((arguments.start_byte, arguments.end_byte, "cond", ("check", callee)))
        points += [(call.start_byte, 1, ("reg", (registers, call, callee), None)) for registers, call, callee in sites]
        if error_nodes and b"DISPATCH" in original:
            points.extend(_lost_registrations(sites, original))
        if _STUB_SUFFIX in data:
            points += _stub_arguments(data, root)
        if b"at::" in data:
            points += _operator_arguments(data, root, self.ops)
        if expand and macros:
            points += [(use[0], 2, use) for use in _macro_uses(data, macros)]
        # The `#define` bodies `_local_macro_calls` reads (Note [calls in function-local macros]).
        # (an object-like one only when it launches: DWCONV3D_FORWARD_DISPATCH_OTHERS)
        macro_bodies = [body for cap in by_file["macros"] for body in cap["macro.body"]
                        if body.end_byte - body.start_byte <= _MAX_LOCAL_MACRO_BYTES
                        and (body.parent is None or body.parent.type == "preproc_function_def" or b"<<<" in body.text)][:_MAX_LOCAL_MACROS_READ] if expand else []
        # Launches written `kernel<<<grid, block>>>(...)`: the grammar has no such
        # syntax (it reads shifts and comparisons), so they are found in the body
        # text, and placed among the calls: the regions around them give their
        # case/if and `#if` conditions (a launch in a nested definition once, as its).
        if b"<<<" in original:
            found = {}
            # a launch in a `#define`'s body read on its own is its macro's; spans in order, none inside another
            in_macros = [(b.start_byte, b.end_byte) for b in macro_bodies if b"<<<" in original[b.start_byte : b.end_byte]]
            macro_starts = [start for start, _ in in_macros]
            for node, _ in defs_raw:
                body = _body(node)
                chunk = original[body.start_byte : body.end_byte]
                if b"<<<" in chunk:
                    for m in _launches(chunk):
                        at = body.start_byte + m.start()
                        k = bisect.bisect_right(macro_starts, at) - 1
                        if k >= 0 and at < in_macros[k][1]:
                            continue
                        line = body.start_point[0] + 1 + chunk.count(b"\n", 0, m.start())
                        found[at] = ("launch", (_strip_templates(m.group(1).decode("utf-8", "replace")), line), None)
            points += [(at, 1, payload) for at, payload in found.items()]
        points += [(body.start_byte, 3, body) for body in macro_bodies]  # Note [calls in function-local macros]
        expansions = []

        definitions: list[Definition] = [None] * len(defs_raw)  # type: ignore[list-item]
        calls: list[Call] = []
        registrations: list[Registration] = []
        stubs: list[StubDecl] = []
        labels: dict[tuple[str, int], str] = {}
        in_lambdas: list[tuple[int, int, str]] = []  # (call, definition, lambda name): Note [named lambdas]
        local_macros: list[tuple[object, int, str | None]] = []  # (body, definition, preprocessor condition)
        file_macros: list[tuple[object, str | None]] = []  # (body, condition) of `#define`s outside any function
        kernels = b"__global__" in original
        seen = None
        launches: set[tuple[int, str]] = set()  # (line, name) of each launch
        for at, kind, payload, here in _sweep(regions, points):
            if here is not seen:  # what the regions around the point say, read once per set of regions
                seen = here
                live, _, pp, def_index, cond, lib, lam, around = here
                if cond is not None:
                    cond = _label(labels, cond)
                outer = "\n".join(_label(labels, c) for c in around) if around else None
            if kind == 0:
                i, node, info = payload
                definitions[i] = self._definition(node, info, live, pp, original, data, kernels)
                continue
            if kind == 2:  # a use of a macro that defines functions: at file scope only
                if def_index == -1 and not any(tag == "class" for (_, _, tag, _) in live):
                    expansions.append((payload, [p for (_, _, tag, p) in live if tag == "scope"], pp))
                continue
            if kind == 3:  # the body of a `#define`: its launches and calls are those of the functions that use it
                if def_index == -1:
                    file_macros.append((payload, pp))
                elif _macro_used(original, payload, defs_raw, def_index, payload.end_byte):
                    local_macros.append((payload, def_index, pp))
                continue
            what, item, known = payload  # item: the called name's node, a registration's (kind, call, callee), or a lost one's (macro, args, line)
            if what == "call":
                if lam is not None:
                    in_lambdas.append((len(calls), def_index, lam))
                callee, short, call_kind, library, op = known
                calls.append(Call(def_index, callee, short, call_kind, library, op, item.start_point[0] + 1, cond, pp, outer))
            elif what == "launch":
                name, line = item
                short = name.rsplit("::", 1)[-1]
                if lam is not None:
                    in_lambdas.append((len(calls), def_index, lam))
                calls.append(Call(def_index, name, short, "launch", None, None, line, cond, pp, outer))
                launches.add((line, short))
            elif what == "lost":
                macro, args, line = item
                device, capability = _register_key(macro, path, args)
                kernel = None if macro.endswith("NO_CPU_DISPATCH") or len(args) < 2 else _kernel_name(args[-1])
                registrations.append(Registration(-1, "register_dispatch", args[0].rsplit("::", 1)[-1], kernel, device, capability, line, pp))
            else:
                self._registration(path, item, def_index, lib, pp, registrations, stubs)
        if in_lambdas:
            _lambda_conditions(calls, in_lambdas)
        for body, pp in file_macros:  # a launch a macro defined outside a function writes: the using function's
            if b"<<<" in original[body.start_byte : body.end_byte]:
                local_macros.extend((body, i, pp) for i in range(len(defs_raw)) if _macro_used(original, body, defs_raw, i, 0))
        for body, def_index, pp in local_macros:
            for call in self._local_macro_calls(path, original, body, def_index, pp):
                calls.append(call)
                if call.kind == "launch":
                    launches.add((call.line, call.short))
        if launches:  # the blanked launch read as a call of the kernel: it is the launch
            calls = [c for c in calls if c.kind == "launch" or (c.line, c.short) not in launches]
        placed: dict = {}  # a macro used for several types defines the same function at the same line: once
        for use, scopes, pp in expansions:
            self._expansion(path, original, macros, use, scopes, pp, (definitions, calls, registrations, stubs), placed)
        return FileFacts(path, len(data), sha1, len(error_nodes), None, tuple(definitions), tuple(calls), tuple(registrations), tuple(stubs))

    def _local_macro_calls(self, path: str, original: bytes, body, def_index: int, pp: str | None) -> list[Call]:
        """The calls written in the body of a function-local `#define` (Note
        [calls in function-local macros]), as calls of the function it is in;
        read from the file as written (the snippet is masked on its own)."""
        text = _LINE_CONTINUATION.sub(lambda m: b" " + m.group(1)[1:], original[body.start_byte : body.end_byte])
        if not text.strip():
            return []
        first = body.start_point[0] + 1  # the body's first line, the snippet's second
        snippet = b"void __macro__() {\n" + b" " * body.start_point[1] + text + b";\n}"
        facts = self._extract(path, snippet, "", expand=False)
        # a call of one of the macro's parameters (`#define M(fn) fn(x)`) calls what each use passes: no name here
        params = body.parent.child_by_field_name("parameters") if body.parent is not None else None
        own = {p.text for p in params.named_children} if params is not None else set()
        return [c._replace(definition=def_index, line=c.line - 2 + first, preproc=" && ".join(p for p in (pp, c.preproc) if p) or None)
                for c in facts.calls if c.definition == 0 and "#" not in c.callee and 2 <= c.line < snippet.count(b"\n") + 1
                and c.callee.split("::", 1)[0].encode() not in own]

    def _expansion(self, path, original, macros, use, scopes, pp, facts_so_far, placed) -> None:
        """Add the facts of one macro use (Note [definitions written by
        macros]) to `facts_so_far` (definitions, calls, registrations, stubs),
        each once (`placed`: what earlier uses added)."""
        definitions, calls, registrations, stubs = facts_so_far
        at, name, args, close = use
        use_line = original.count(b"\n", 0, at) + 1
        use_end = use_line + original.count(b"\n", at, close)
        arg_lines = [(a.replace(b"\n", b" "), use_line + original.count(b"\n", at, offset), True) for a, offset in args]
        table = _expanded_lines(macros, name, arg_lines, use_line)
        if table is None:
            return
        opening = b"".join(b"namespace {" if s == "(anonymous namespace)" else b"inline namespace " + s.encode() + b" {" if isinstance(s, InlineNamespace)
                           else b"namespace " + s.encode() + b" {" for s in scopes)
        snippet = opening + b"\n".join(text for text, _, _, _ in table) + b"}" * len(scopes)
        facts = self._extract(path, snippet, "", expand=False)

        def place(word: str, k: int) -> int | None:
            """The line that holds `word`, written at line `k` of the expansion:
            of the body, or of the argument that gives it; a name pasted from
            an argument (`op##_kernel`), at that argument's line."""
            if not 0 < k <= len(table):
                return None
            _, origin, written, context = table[k - 1]
            w = word.encode()
            if _holds_word(written, w):
                return origin
            found = next((line for a, line, _ in context if _holds_word(a, w)), None)
            if found is None and b"##" in written:
                found = next((line for a, line, at_use in context if at_use and len(a) > 1 and a in w and _MACRO_PARAM.fullmatch(a)), None)
            return found

        def both(a: str | None, b: str | None) -> str | None:
            return " && ".join(c for c in (a, b) if c) or None

        index: dict[int, int] = {}
        for i, d in enumerate(facts.definitions):
            line = place(d.op.split(".")[0] if d.op else d.short, d.line)
            if line is None:
                continue
            end = table[d.end_line - 1][1] if d.end_line <= len(table) else use_end
            d = d._replace(line=line, end_line=end if end >= line else max(use_end, line), condition=both(pp, d.condition))
            if d not in placed:
                placed[d] = len(definitions)
                definitions.append(d)
            index[i] = placed[d]
        for c in facts.calls:
            line = place(c.short, c.line)
            if c.definition in index and line is not None:
                _once(placed, calls, c._replace(definition=index[c.definition], line=line, preproc=both(pp, c.preproc)))
        for r in facts.registrations:
            line = place(r.name, r.line)
            if line is not None and r.kind == "register_dispatch" and r.definition == -1:
                _once(placed, registrations, r._replace(line=line, preproc=both(pp, r.preproc)))
        for st in facts.stubs:
            line = place(st.name, st.line)
            if line is not None:
                _once(placed, stubs, st._replace(line=line, preproc=both(pp, st.preproc)))

    # -- regions ----------------------------------------------------------

    def _scope_regions(self, matches, regions) -> None:
        for cap in matches:
            if "namespace" in cap:
                body = cap["namespace.body"][0]
                regions.append((body.start_byte, body.end_byte, "scope", _namespace_name(cap["namespace"][0])))
            elif "class.body" in cap:
                body = cap["class.body"][0]
                name = _strip_templates(cap["class.name"][0].text.decode("utf-8", "replace"))
                regions.append((body.start_byte, body.end_byte, "class", name))
            elif "case" in cap:
                case = cap["case"][0]
                regions.append((case.start_byte, case.end_byte, "cond", ("case", case)))
            elif "lambda.body" in cap:
                body = cap["lambda.body"][0]
                regions.append((body.start_byte, body.end_byte, "lambda", cap["lambda.name"][0].text.decode("utf-8", "replace")))
            elif "if.then" in cap:
                # Labels are written only for the regions a call is found in.
                then = cap["if.then"][0]
                condition = cap["if.condition"][0]
                regions.append((then.start_byte, then.end_byte, "cond", ("if", condition)))
                other = cap["if"][0].child_by_field_name("alternative")
                if other is not None and other.type == "else_clause":
                    regions.append((other.start_byte, other.end_byte, "cond", ("else", condition)))

    def _preproc_regions(self, matches, regions) -> None:
        for cap in matches:
            if "ifdef" in cap:
                node = cap["ifdef"][0]
                name = cap["name"][0].text.decode("utf-8", "replace")
                negated = node.child(0).type == "#ifndef"
                if negated and _INCLUDE_GUARD.search(name):
                    continue
                cond = f"!defined({name})" if negated else f"defined({name})"
                body_start = cap["name"][0].end_byte
            else:
                node = cap["if"][0]
                cond = _SPACE.sub(" ", cap["condition"][0].text.decode("utf-8", "replace")).strip()
                body_start = cap["condition"][0].end_byte
            alt = node.child_by_field_name("alternative")
            body_end = alt.start_byte if alt is not None else node.end_byte
            regions.append((body_start, body_end, "pp", cond))
            if alt is not None:
                regions.append((alt.start_byte, alt.end_byte, "pp", _negate(cond)))

    # -- definitions ------------------------------------------------------

    def _declarator(self, node) -> tuple | None:
        """("name", text) | ("structured", macro, args) | ("library", (macro, ns, key))."""
        while node is not None and node.type in _UNWRAP:
            node = node.child_by_field_name("declarator") or (node.named_children[-1] if node.named_children else None)
        if node is not None and node.type in ("operator_cast", "qualified_identifier"):
            cast = _conversion_operator(node)
            return ("name", cast) if cast else None
        if node is None or node.type != "function_declarator":
            return None
        inner = node.child_by_field_name("declarator")
        if inner is None:
            return None
        if inner.type == "function_declarator":
            macro = inner.child_by_field_name("declarator")
            params = inner.child_by_field_name("parameters")
            if macro is not None and macro.type == "identifier" and params is not None:
                name = macro.text.decode()
                if name in _STRUCTURED:
                    args = [_SPACE.sub("", p.text.decode("utf-8", "replace")) for p in params.named_children]
                    return ("structured", name, args)
            return None
        text = inner.text.decode("utf-8", "replace")
        if inner.type == "identifier" and text.startswith("TORCH_LIBRARY"):
            params = node.child_by_field_name("parameters")
            args = [_SPACE.sub("", p.text.decode("utf-8", "replace")) for p in params.named_children] if params else []
            ns = args[0] if args else None
            key = args[1] if text.startswith("TORCH_LIBRARY_IMPL") and len(args) > 1 else None
            return ("library", (text, ns, key))
        return ("name", _strip_templates(text))

    def _definition(self, node, info, stack, pp, data: bytes, masked: bytes, kernels: bool) -> Definition:
        """`kernels`: whether the file holds `__global__` anywhere."""
        declarator = node.child_by_field_name("declarator")
        scopes = [payload for (_, _, tag, payload) in stack if tag in ("scope", "class")]
        in_class = bool(stack) and any(tag == "class" for (_, _, tag, _) in stack)
        op = None
        if info[0] == "structured":
            kind, namespace, method = _STRUCTURED[info[1]]
            args = info[2]
            op = ".".join(args[:2]) if info[1].endswith("2") else (args[0] if args else "?")
            struct = "structured_" + "_".join(args[:2] if info[1].endswith("2") else args[:1])
            # The macro expands to `structured_<op>::impl` in at::native (meta: at::meta).
            name = "::".join([*scopes, struct, method]) if scopes else f"at::{namespace}::{struct}::{method}"
        else:
            name = "::".join([*scopes, info[1]]) if scopes else info[1]
            kind = "method" if in_class or ("::" in info[1] and not info[1].startswith(("at::", "c10::", "torch::"))) else "function"
            if kernels:
                start = node.start_byte
                while start > 0 and masked[start - 1] in b" \t\r\n":  # back over blanked attributes
                    start -= 1
                if b"__global__" in data[start : declarator.start_byte]:
                    kind = "global_kernel"
        name = name.replace("::::", "::")
        hidden = {"(anonymous namespace)", *(s for s in scopes if isinstance(s, InlineNamespace))}  # Note [inline namespaces]
        lookup = "::".join([p for p in name.split("::") if p not in hidden]) if "(anon" in name or len(hidden) > 1 else name
        short = name.rsplit("::", 1)[-1]
        cast = name.find("operator ")  # a conversion operator's type may hold `::` (`operator const std::string&`)
        if cast >= 0 and name[cast - 2 : cast] in ("", "::"):
            short = name[cast:]
        # The line is the name's: a return type spread over lines before it
        # (`inline std::enable_if_t<...>\nmkldnn_gemm(`) must not move the location
        # off the name, nor a `&` or `*` it ends with (`Tensor&\n_scaled_mm_out_cuda(`:
        # the reference declarator starts at the `&`).
        named = declarator
        while named is not None and named.type in _UNWRAP:
            named = named.child_by_field_name("declarator") or (named.named_children[-1] if named.named_children else None)
        if named is not None and named.type == "function_declarator":
            named = named.child_by_field_name("declarator") or named
        line = (named or declarator or node).start_point[0] + 1
        return Definition(name, lookup, short, kind, line, node.end_point[0] + 1, pp, op)

    # -- calls and registrations -----------------------------------------

    def _member(self, field: bytes) -> tuple | None:
        """(callee, short, kind, library, op) of a call of the method `field`
        on an object that is no temporary of a class."""
        short = _strip_templates(field.decode("utf-8", "replace"))  # `x.template data_ptr<T>()`: data_ptr
        if short in _SKIPPED_METHODS:
            return None
        kind, library, op = classify_call("." + short, True, self.ops)
        return "." + short, short, kind, library, op

    def _callee(self, callee_node, t: str, text: bytes) -> tuple | None:
        """(callee, short, kind, library, op) of a call's function node (of
        type `t` and text `text`); None when no name is called."""
        if t == "field_expression":
            field = callee_node.child_by_field_name("field")
            if field is None:
                return None
            # Remembered by the method's spelling alone: the receiver's varies far more.
            known = self._members.get(field.text, False)
            if known is False:
                known = self._members[field.text] = self._member(field.text)
            if known is None:
                return None
            receiver = _constructed_type(callee_node.child_by_field_name("argument"))
            if receiver is not None:
                # `DimMask().flip()`: a method of a temporary of a class, never a Tensor's operator
                return f"{receiver}::{known[1]}", known[1], "direct", None, None
            return known if known[1] else None
        elif t in ("identifier", "qualified_identifier", "template_function", "scoped_identifier", "template_type"):
            callee = _strip_templates(text.decode("utf-8", "replace"))
            if "<" in callee:  # `mi < size<1>(acc)` misread as a template's arguments: the call is the name after them
                callee = _LAST_NAME.search(callee).group()
            short = callee.rsplit("::", 1)[-1]
        elif t == "call_expression" and (made := _called_temporary(callee_node)) is not None:
            callee, short = f"{made}::operator()", "operator()"  # `cuda_scatter_gather_base_kernel<true, false>()(self, ...)`
        elif t == "compound_literal_expression" and (made := _braced_temporary(callee_node)) is not None:
            callee, short = f"{made}::operator()", "operator()"  # `sum_functor<scalar_t>{}(iter)`
        else:
            return None  # calls of lambdas, of call results, of parenthesised expressions
        if not short or callee in _SKIPPED_FUNCTIONS or (callee.startswith("std::") and vendors.of_call(callee) is None):
            return None
        kind, lib, op = classify_call(callee, False, self.ops)
        if kind == "direct" and not any(c.islower() for c in short):
            return None  # a macro (Note [calls kept])
        return callee, short, kind, lib, op

    def _registration(self, path, found, def_index, lib, pp, registrations, stubs) -> None:
        """Facts of a call that may register: `found` is (what `_registers`
        said of its callee, the call, the callee). A registration's line is
        that of the name it registers (the operator's string, the stub), which
        may follow the macro's: `REGISTER_DISPATCH(` / `    some_stub, ...`; a
        dtype switch's, its macro's (`AT_DISPATCH_...(` / `    "sum_cpu", ...`)."""
        registers, site, callee = found
        arguments = site.child_by_field_name("arguments").named_children
        if registers == "library":
            method = callee.child_by_field_name("field").text.decode()
            if not arguments:  # `m.impl()` names no operator
                return
            first = arguments[0].text.decode("utf-8", "replace")
            m = _STRING.search(first)
            if m is None:
                return
            op = m.group(1)
            line = arguments[0].start_point[0] + 1 + first.count("\n", 0, m.start())  # `m.def(torch::schema(` / `"ns::op(...)"`
            macro, ns, key = lib if lib else (None, None, None)
            if method == "def":
                op = op.split("(", 1)[0].strip()
            if "::" in op:
                ns, op = op.split("::", 1)
            target = None
            if len(arguments) > 1 and arguments[1].type != "initializer_list":  # m.def(schema, {tags}) names no kernel
                target = _kernel_name(arguments[1].text.decode("utf-8", "replace"))
            kind = "library_def" if method == "def" else "library_impl"
            registrations.append(Registration(def_index, kind, op, target, key, ns, line, pp))
            return
        macro = callee.text.decode()
        args = [_SPACE.sub("", a.text.decode("utf-8", "replace")) for a in arguments]
        line = site.start_point[0] + 1
        if macro == "DECLARE_DISPATCH":
            if args:
                stubs.append(StubDecl("declare", args[-1], ",".join(args[:-1]) or None, arguments[-1].start_point[0] + 1, pp))
        elif macro == "DEFINE_DISPATCH":
            if args:
                stubs.append(StubDecl("define", args[0], None, arguments[0].start_point[0] + 1, pp))
        elif macro.startswith("AT_DISPATCH_"):
            name = None
            groups = [macro]
            for a in arguments:
                text = a.text.decode("utf-8", "replace")
                if a.type == "string_literal" and name is None:
                    m = _STRING.search(text)
                    name = m.group(1) if m else text
                elif a.type in ("identifier", "qualified_identifier") and re.fullmatch(r"(at::)?(ScalarType::|k)[A-Z]\w*", text):
                    groups.append(text.rsplit("::", 1)[-1])
                elif a.type == "call_expression" and text.startswith("AT_EXPAND("):
                    groups.append(_SPACE.sub("", text[len("AT_EXPAND(") : -1]))
            registrations.append(Registration(def_index, "at_dispatch", name or "", ", ".join(groups[1:]) or None, macro, None, line, pp))
        elif args:
            device, capability = _register_key(macro, path, args)
            kernel = None if macro.endswith("NO_CPU_DISPATCH") or len(args) < 2 else _kernel_name(args[-1])
            # `REGISTER_DISPATCH(cpublas::gemm_stub, ...)`: the stub is declared (and called) by its own name
            stub = args[0].rsplit("::", 1)[-1]
            registrations.append(Registration(def_index, "register_dispatch", stub, kernel, device, capability, arguments[0].start_point[0] + 1, pp))


def _macro_used(original: bytes, macro_body, defs_raw, index: int, after: int) -> bool:
    """Whether function `index` of `defs_raw` uses the macro whose `#define`
    body is `macro_body`, after byte `after`, in its own text (Note [calls in
    function-local macros]): a function whose text a parse error stretched
    over later `#define`s and functions does not own those (DepthwiseConv3d.cu's
    forward function, over the backward kernels' launch macros and the
    functions that use them), and a function that uses a macro defined before
    it, at file scope, runs its launches."""
    name_node = macro_body.parent.child_by_field_name("name") if macro_body.parent is not None else None
    body = _body(defs_raw[index][0])
    if name_node is None or body is None:
        return True
    start, end = max(body.start_byte, after), body.end_byte
    if start >= end:
        return False
    # the other functions inside this one's text: their uses are theirs
    inside = [(b.start_byte, b.end_byte) for j, (node, _) in enumerate(defs_raw)
              if j != index and (b := _body(node)) is not None and start <= b.start_byte and b.end_byte <= end]
    name, text = name_node.text, original[start:end]
    at = text.find(name)
    while at >= 0:
        before, following = text[at - 1 : at], text[at + len(name) : at + len(name) + 1]
        if not (before.isalnum() or before == b"_") and not (following.isalnum() or following == b"_") \
                and not any(a <= start + at < b for a, b in inside):
            return True
        at = text.find(name, at + 1)
    return False


def _body(definition):
    """A definition's body: its compound statement, or the `{}` of a function
    the grammar reads as brace-initialised (definitions.scm), only where that
    declaration declares nothing else and parsed cleanly (error recovery can
    read a constructor's initializer list so); else None."""
    if definition.type != "declaration":
        return definition.child_by_field_name("body")
    declarators = definition.children_by_field_name("declarator")
    if len(declarators) != 1 or definition.has_error:
        return None
    value = declarators[0].child_by_field_name("value")
    return value if value is not None and value.type == "initializer_list" and value.named_child_count == 0 else None


@functools.lru_cache(maxsize=4)
class _time_budget:
    """Raise FileTimeout in this thread after `seconds` (main thread only: a
    SIGALRM timer; elsewhere no budget). Python code is interrupted between
    bytecodes; a long call into tree-sitter ends first, which is why parsing
    also checks a deadline itself (see `Extractor._extract`)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.previous = None

    def __enter__(self) -> None:
        if self.seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            return
        # _signal's own functions: signal.signal converts handlers to and from
        # enums, which cost more than the timer, twice a file.
        self.previous = _signal.signal(signal.SIGALRM, _expire)
        _signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            _signal.setitimer(signal.ITIMER_REAL, 0)
            _signal.signal(signal.SIGALRM, self.previous)


def _expire(signum, frame):
    raise FileTimeout()


def extractor(ops: OperatorNames) -> Extractor:
    return Extractor(ops)
