"""The C++ code the graph reads beside the index: a tree file's lines (comments
and strings blanked where a rule must not read them), a definition's
parameters, a call's arguments and the values it passes, the lambdas written
at a device loop's call, whether the build for the device compiles an `#if`,
and where the device loops are defined. Read by every direction of the graph
(graph.sites and the layers beside it, graph.loops, graph.arms) and depending on none of them."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from kernelmap.graph.context import GraphContext, shared_results
from kernelmap.model import Location
from kernelmap.safefiles import NotRegularFile, read_text


_OPEN_TAIL = re.compile(r"\s*(?:<[^(){;]*>)?\s*\(")
_WORD_CHAR = re.compile(r"\w")


def _call_open(text: str, name: str) -> int | None:
    r"""Where the arguments begin after the first `name(` or `name<...>(` of
    `text` (`\bNAME\s*(?:<[^(){;]*>)?\s*\(`), read at each place the name is
    written with fixed patterns: compiling one pattern per name is dear."""
    if not name:
        m = re.search(r"\b\s*(?:<[^(){;]*>)?\s*\(", text)
        return m.end() if m else None
    word_first = bool(_WORD_CHAR.match(name))
    q = text.find(name)
    while q != -1:
        word_before = q > 0 and bool(_WORD_CHAR.match(text, q - 1))
        if word_before != word_first:  # \b
            m = _OPEN_TAIL.match(text, q + len(name))
            if m:
                return m.end()
        q = text.find(name, q + 1)
    return None


_PARAMETERS_OF: dict[tuple[int, int, int | None, str], tuple[tuple[str, ...], tuple[str, ...] | None]] = {}


def parameters(definition, ctx: GraphContext) -> list[str] | None:
    """The parameter declarations of a definition, read from its lines in the
    tree (None when the declarator cannot be read): read once per definition,
    though a graph's readers ask of the same definitions many times."""
    lines = tree_lines(ctx, definition.location.path)
    short = definition.name.rsplit("::", 1)[-1]
    key = (id(lines), definition.location.line, definition.location.end_line, short)
    kept = _PARAMETERS_OF.get(key)
    if kept is None or kept[0] is not lines:
        start = definition.location.line - 1
        text = "\n".join(lines[start : min(len(lines), (definition.location.end_line or start + 1), start + 40)])
        opened = _call_open(text, short)
        if len(_PARAMETERS_OF) > 4096:
            _PARAMETERS_OF.clear()
        kept = _PARAMETERS_OF[key] = (lines, None if opened is None else tuple(_parameters_from(text, opened)))
    return None if kept[1] is None else list(kept[1])


def _parameters_from(text: str, opened: int) -> list[str]:
    """The parameter declarations of the declarator whose `(` ends before `opened` in `text`."""
    depth, i, params, current = 1, opened, [], []
    while i < len(text) and depth:
        ch = text[i]
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if depth == 1 and ch == ",":
            params.append("".join(current).strip())
            current = []
        elif depth:
            current.append(ch)
        i += 1
    last = "".join(current).strip()
    if last and last != "void":
        params.append(last)
    return [re.sub(r"//[^\n]*|/\*.*?\*/", "", p, flags=re.S).strip() for p in params]


def _parameter_name(parameter: str) -> str | None:
    """The name a parameter is declared with (`FillStub& fill_stub` -> fill_stub)."""
    m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", re.sub(r"=.*", "", parameter, flags=re.S).strip())
    return m.group(1) if m else None


def compiled(condition: str | None, ctx: GraphContext) -> bool | None:
    """Whether the release build for the device compiles code under the `#if`
    `condition` (None: undecided, or no build model) (Note [build configuration])."""
    if not condition:
        return True
    return ctx.build.evaluate(condition) if ctx.build is not None else None


@functools.lru_cache(maxsize=4096)
def _joined(root: Path, rel: str) -> Path:
    return root / rel


def tree_lines(ctx: GraphContext, rel: str) -> tuple[str, ...]:
    """The lines of a file of the selected tree."""
    return file_lines(_joined(ctx.index.tree.root, rel))


@functools.lru_cache(maxsize=512)
def file_lines(path: Path) -> tuple[str, ...]:
    """A file's lines; none when it cannot be read, or is no regular file (a FIFO is not waited on)."""
    try:
        return tuple(read_text(path, errors="replace").splitlines())
    except (OSError, NotRegularFile):
        return ()


def location_lines(location: Location, ctx: GraphContext) -> tuple[str, ...]:
    """The lines of the file `location` names: a generated file's from the
    codegen cache, any other from the root of its origin (the selected tree)."""
    if location.path.startswith("build/") and ctx.generated is not None:
        return file_lines(ctx.generated.root / location.path)
    path = location.disk_path
    if path is None and ctx.index is not None:
        path = ctx.index.tree.root / location.path
    return file_lines(path) if path is not None else ()


@functools.lru_cache(maxsize=64)
def _by_short_name(index, path: str) -> dict[str, list]:
    """The definitions of one file, by unqualified name, in the file's order."""
    by_short: dict[str, list] = {}
    for d in index.definitions_in(path):
        by_short.setdefault(d.name.rsplit("::", 1)[-1], []).append(d)
    return by_short


_CODE_ONLY = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.S)


_CODE_OF: dict[tuple[int, int, int], tuple[tuple[str, ...], str]] = {}


def code_only(lines: tuple[str, ...], first: int, last: int) -> str:
    """Lines `first` to `last` (1-based) of a file, joined, with comments and
    strings blanked and every line kept: read once per stretch, though a
    definition's body is read so by several of a graph's readers."""
    key = (id(lines), first, last)
    kept = _CODE_OF.get(key)
    if kept is not None and kept[0] is lines:
        return kept[1]
    text = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(lines[first - 1 : last]))
    if len(_CODE_OF) > 4096:
        _CODE_OF.clear()
    _CODE_OF[key] = (lines, text)
    return text


def _blank_keeping_lines(m: re.Match) -> str:
    text = m.group()
    return " " * len(text) if "\n" not in text else re.sub(r"[^\n]", " ", text)


def _bracket_items(text: str, start: int, opening: str, closing: str) -> list[str] | None:
    """The items, split at top-level commas, of the list that begins at
    `start` (after its opening bracket) and ends at its closing one; None
    when `text` ends first."""
    depth, items, current = 1, [], []
    for ch in text[start:]:
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
            if depth == 0:
                items.append("".join(current))
                return items
        elif ch == "," and depth == 1:
            items.append("".join(current))
            current = []
            continue
        current.append(ch)
    return None


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TEMPORARY_CALL = re.compile(r"\s*\)\s*\(")  # the `)(` of `Functor<...>()(args)`


def call_arguments(site, ctx: GraphContext) -> list[str] | None:
    """The arguments a call site passes, as written (comments removed), read
    from its lines in the tree; a call of a temporary's `operator()`
    (`cuda_scatter_gather_base_kernel<true, false>()(self, ...)`,
    `UniqueCub<scalar_t>{}(self, ...)`) too. None when the call cannot be
    read there."""
    if ctx.index is None:
        return None
    cache = shared_results(ctx, "_call_arguments")  # asked of one call by several readers of it
    key = (site.location.path, site.location.line, site.name, site.callee)
    if key not in cache:
        cache[key] = _call_arguments(site, ctx)
    found = cache[key]
    return None if found is None else list(found)


def _call_arguments(site, ctx: GraphContext) -> tuple[str, ...] | None:
    lines = tree_lines(ctx, site.location.path)
    start = site.location.line - 1
    text = "\n".join(lines[start : start + 12])
    if site.name == "operator()" and site.callee.endswith("::operator()"):
        made = site.callee.removesuffix("::operator()").rsplit("::", 1)[-1]
        opened = _call_open(text, made)
        then = _TEMPORARY_CALL.match(text, opened) if opened is not None else None
        opened = then.end() if then else None
        if opened is None:  # `UniqueCub<scalar_t>{}(self, ...)`: rare, so its pattern is compiled here
            braced = re.search(rf"\b{re.escape(made)}\s*(?:<[^(){{;]*>)?\s*\{{[^{{}}]*\}}\s*\(", text)
            opened = braced.end() if braced else None
    else:
        opened = _call_open(text, site.name)
    items = _bracket_items(text, opened, "([{", ")]}") if opened is not None else None
    if items is None:
        return None
    arguments = tuple(_COMMENT.sub("", a).strip() for a in items)
    return () if arguments == ("",) else arguments


def _argument_value(text: str, known: dict[str, bool]) -> bool | None:
    """The value of a call's argument as written: a literal `true`/`false`, or
    a name (a parameter, a field) whose value the caller knows, or its negation."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if text in known:
        return known[text]
    if text.startswith("!") and text[1:].strip() in known:
        return not known[text[1:].strip()]
    return None


def _fields_passed(name: str, argument: str, known: dict[str, bool]) -> dict[str, bool]:
    """The fields of an argument the caller knows (`params.transposed`), as the callee's parameter's (`name.transposed`)."""
    prefix = f"{argument.strip()}."
    return {f"{name}.{key[len(prefix):]}": value for key, value in known.items() if key.startswith(prefix)} if name else {}


def _bound_flags(declared: list[str], arguments: list[str], known: dict[str, bool]) -> dict[str, bool]:
    """The `bool` parameters of `declared` that `arguments` pass a known value
    to, and the known fields of the objects they pass (Note [values a call passes])."""
    flags = {}
    for parameter, text in zip(declared, arguments):
        name = _parameter_name(parameter)
        value = _argument_value(text, known)
        if value is not None and name and _is_bool_parameter(parameter, name):
            flags[name] = value
        if known:
            flags.update(_fields_passed(name, text, known))
    return flags


_BOOL_PARAMETER = re.compile(r"(?:const\s+)?bool\s+(\w+)(?:\s*=.*)?", re.S)


def _is_bool_parameter(parameter: str, name: str) -> bool:
    """Whether a parameter declaration is a `bool` named `name` (`const bool need_backward`)."""
    m = _BOOL_PARAMETER.fullmatch(parameter.strip())
    return m is not None and m.group(1) == name


def device_lambdas(site: Location, ctx: GraphContext) -> tuple[tuple[int, int, bool], ...]:
    """The lambdas written in the call of a CPU device loop at `site`: (first
    line, last line, whether it takes Vectorized) of each (Note [device loop
    machinery])."""
    if ctx.index is None or site.path.startswith("build/"):
        return ()
    lines = tree_lines(ctx, site.path)
    end = call_end(lines, site.line, "")
    text = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(lines[site.line - 1 : end]))
    found = []
    for m in re.finditer(r"\[[^\[\]]*\]\s*\(([^()]*)\)[^{;]*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        vectorized = re.search(r"\bVectorized\b|\bVec\b|\b\w*Vec\b|\bvec_t\b", m.group(1)) is not None
        found.append((site.line + text.count("\n", 0, m.start()), site.line + text.count("\n", 0, i), vectorized))
    return tuple(found)


def call_end(lines, line: int, name: str) -> int:
    """The line on which the call of `name` that starts on `line` (1-based)
    closes its parentheses: where the lambda it is given ends; `line` when
    it cannot be read within 400 lines."""
    text = "\n".join(lines[line - 1 : line + 400])
    opened = _call_open(text, name)
    if opened is None:
        return line
    depth, i = 1, opened
    code = _CODE_ONLY.sub(_blank_keeping_lines, text)
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return line + code.count("\n", 0, i)


# Where the device loops are defined, in a tree and in the wheel's torch/include.
LOOP_HEADERS = ("aten/src/ATen/native/cpu/Loops.h", "aten/src/ATen/native/cuda/Loops.cuh", "aten/src/ATen/native/cuda/CUDALoops.cuh")


def loop_definition(name: str, ctx: GraphContext) -> Location | None:
    """The definition of a device loop (`cpu_kernel_vec`, `gpu_kernel`) in the
    selected tree's loop headers, or with no tree in the installed wheel's
    torch/include (the installed version's partial tree)."""
    if ctx.tree_root is not None:
        root, origin = ctx.tree_root, ctx.index.tree.origin if ctx.index is not None else None
    else:
        from kernelmap.codegen.headers import include_origin

        origin = include_origin()
        root = None
    pattern = re.compile(rf"^(?:inline\s+|static\s+|C10_HOST_DEVICE\s+)*void\s+{re.escape(name)}\s*\(")
    for header in LOOP_HEADERS:
        path = root / header if root is not None else (origin.disk_path(header) if origin else None)
        if path is None:
            continue
        for number, text in enumerate(file_lines(path), 1):
            if pattern.match(text):
                return Location(header, number, origin=origin)
    return None


def tree_path(ctx: GraphContext, rel: str) -> Path:
    """The path of a file of the selected tree (made once per file: a graph names the same files thousands of times)."""
    return _joined(ctx.index.tree.root, rel)


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def declaration_head(definition, ctx: GraphContext) -> str:
    """The text of a definition's declaration up to its name: the template
    header and return type written on the lines before it (a few at most)."""
    return _declaration_head(tree_path(ctx, definition.location.path), definition.location.line, definition.name.rsplit("::", 1)[-1])


@functools.lru_cache(maxsize=4096)
def _declaration_head(path: Path, line: int, short: str) -> str:
    lines = file_lines(path)
    # comments blanked: the one above a definition is none of its head (`// - template<typename> class F is ...`
    # above upsample_generic_Nd_kernel_impl's `template <int out_ndims, typename scale_type, class F>`)
    text = _COMMENTS.sub(" ", "\n".join(lines[max(0, line - 8) : line]))
    # the last `\bNAME\s*(?:<...>)?\s*(` of the text, read without compiling a pattern per name
    starts = _name_followed(text, short, _OPEN_TAIL)
    text = text[: starts[-1]] if starts else text
    cut = max(text.rfind(";"), text.rfind("}"), text.rfind("{"))
    return text[cut + 1 :]


def _name_followed(text: str, name: str, tail: re.Pattern[str]) -> list[int]:
    """Where `\bNAME` followed by what `tail` matches is written in `text` (the name's starts)."""
    found = []
    word_first = bool(_WORD_CHAR.match(name)) if name else False
    q = text.find(name) if name else -1
    while q != -1:
        word_before = q > 0 and bool(_WORD_CHAR.match(text, q - 1))
        if word_before != word_first and tail.match(text, q + len(name)):
            found.append(q)
        q = text.find(name, q + 1)
    return found
