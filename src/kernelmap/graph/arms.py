"""Which arms of a definition can run for one call: its case/if tests
evaluated under the values the call passes (graph.values' Note [values a
call passes]), the selected device and the tensors' rank the operator's name
fixes, and the values a backend selector can return under them.

Note [arms that cannot run]
An arm whose test is decided false for the call is a branch, shown collapsed
and never a leaf: conv2d passes `transposed=false` (so `if
(params.transposed)` in _select_conv_backend is not taken) and 4-D tensors
(`input.ndimension() == 5` is false); on the CPU a test of another device is
false (`params.use_cudnn(...)`, `input.is_cuda()`). A test is three-valued:
a term that is none of these (a size, a dtype, a user setting) is unknown,
and an unknown test never rules an arm out; `&&` and `||` are decided when
their known terms decide them. A call of a predicate whose body is one
`return` (ConvParams::is_depthwise, Dropout.cpp's is_fused_kernel_acceptable)
is its returned expression, read with the object's known fields (a method's
`transposed` is its object's `params.transposed`), three levels deep at most
(bmm's use_mkldnn_matmul, use_mkldnn_bf32_matmul(mat1, mat2, result), then
use_mkldnn_bf32_matmul() and the setting it reads).
A `case E::X` of a `switch (v)` whose `v` a call of a selector sets (`auto
backend = _select_conv_backend(...)`) is taken only when the selector can
return `E::X`: each `return E::X;` of its body, under the tests around it,
is possible unless one of those tests is decided against it for the call
(the arguments it is given are bound as for any call). The rank: an
operator named for its spatial dimensions (conv2d, max_pool3d) whose schema
takes lists of that length (`SymInt[2] stride`) is called with tensors of
that many dimensions plus two (a batch and channels): `input.dim() == 5`
under conv2d is false. Which name the rank is read from is `input` (or
`self`): the tensors the kernels test.
"""

from __future__ import annotations

import re

from kernelmap.graph import dtypes
from kernelmap.graph.context import GraphContext, kept_results
from kernelmap.graph.rules import balanced, other_device_reason, terms

# An arm's test, its `else`, and what follows the test: the condition's `#if` or a bound name (`; stub = abs_stub`).
_ARM = re.compile(r"(else of )?if \((.*?)\)(?:$|\s\s#if |; )")
_CASE = re.compile(r"case ((?:\w+::)*\w+)(?:$|\s\s#if )")
_FIELD = re.compile(r"[A-Za-z_]\w*(?:(?:\.|->)[A-Za-z_]\w*)?")
# `input.ndimension() == 5`, `self.dim() != 4`: a test of the input's rank
_RANK = re.compile(r"(input|self|input_r|input_)\s*\.\s*(?:ndimension|dim)\(\)\s*(==|!=|>=|<=|>|<)\s*(\d+)")
# an operator named for its spatial dimensions: conv2d, max_pool3d, avg_pool1d, conv_transpose2d, upsample_bilinear2d
_SPATIAL_NAME = re.compile(r"(?:^|_)\w*?([123])d(?:_|$)")
_OWN_DEVICE = {"cpu": re.compile(r"(?:\.|\b)is_cpu\(\)|device\(\)\.is_cpu\(\)|==\s*(?:at::|c10::)?(?:kCPU|DeviceType::CPU)\b"),
               "cuda": re.compile(r"(?:\.|\b)is_cuda\(\)|device\(\)\.is_cuda\(\)|==\s*(?:at::|c10::)?(?:kCUDA|DeviceType::CUDA)\b")}
_PREDICATE_DEPTH = 3
# An iterator's output dtype (`iter.dtype()`): a comparison's is bool (Note [a comparison's output dtype] in graph.dtypes), not read here.
_OUTPUT_DTYPE = re.compile(r"\b\w+\s*(?:\.|->)\s*dtype\(\s*0?\s*\)")


def rank_of(op) -> int | None:
    """The number of dimensions an operator named for its spatial dimensions
    takes its input with (conv2d: 4), when its schema's fixed-size lists
    agree (Note [arms that cannot run]); None otherwise."""
    m = _SPATIAL_NAME.search(op.name.name)
    if m is None:
        return None
    spatial = int(m.group(1))
    sizes = {int(n) for n in re.findall(r"\b(?:Sym)?[Ii]nt\[(\d)\]", op.schema)}
    return spatial + 2 if sizes == {spatial} else None


def cannot_run(conditions, known: dict[str, bool], definition, ctx: GraphContext, rank: int | None = None) -> str | None:
    """Why a call under `conditions` (its innermost and those around it) cannot
    run for the call whose known values are `known`; None when it may."""
    if not any(conditions):
        return None
    cache = kept_results(ctx, "_cannot_run")  # the calls of one definition share their arms
    key = (tuple(conditions), tuple(sorted(known.items())), rank, str(definition.location) if definition is not None else None)
    if key not in cache:
        cache[key] = _cannot_run(conditions, known, definition, ctx, rank)
    return cache[key]


def _cannot_run(conditions, known: dict[str, bool], definition, ctx: GraphContext, rank: int | None) -> str | None:
    for condition in conditions:
        if not condition:
            continue
        m = _ARM.match(condition)
        if m is not None:
            test = m.group(2)
            if test.endswith("...") or not balanced(test) or not _decidable(test, known, rank, definition, ctx):
                continue  # cut when recorded, or nothing in it the call fixes: not read
            holds = decide(test, known, ctx, rank, path=definition.location.path if definition is not None else None)
            if holds is not None and holds == bool(m.group(1)):
                return f"cannot run for this call: {'the test holds' if m.group(1) else 'the test fails'} ({_why(test, known, rank, ctx)})"
            continue
        c = _CASE.match(condition)
        if c is not None and definition is not None:
            reason = _case_reason(c.group(1), definition, known, ctx, rank)
            if reason is not None:
                return reason
    return None


# Note [returns before a call]
# A function that returns early for the call runs nothing after that return:
# UnaryOps.cpp's conj_physical starts `if (!self.is_complex()) return self;`,
# so for a real input its at::_conj_physical (and the conj_kernel loop below
# it) never runs. A call written after an `if (TEST) return ...;` (or `if
# (TEST) { return ...; }`) of the function body's top level, whose TEST is
# decided true for the call (the dtype, Note [dtype branches] in
# graph.dtypes; the values it passes, Note [arms that cannot run]), cannot
# run: it is a branch, shown collapsed and never a leaf. A return nested in
# another block, or one whose test is unknown, rules nothing out.
_IF = re.compile(r"\bif\s*\(")


def returned_before(line: int, definition, known: dict[str, bool], ctx: GraphContext, rank: int | None = None) -> str | None:
    """Why a call on `line` of `definition` cannot run: the function returns
    before it for the call (Note [returns before a call]); None when it may."""
    if definition is None or ctx.index is None or ctx.dtype is None and not known and rank is None:
        return None
    for end, test in _early_returns(definition, ctx):
        if end >= line:
            break
        holds = dtypes.evaluate(f"if ({test})", ctx.dtype)
        if holds is None and balanced(test) and _decidable(test, known, rank, definition, ctx):
            holds = decide(test, known, ctx, rank, path=definition.location.path)
        if holds:
            return f"cannot run for this call: the function returns before it, under if ({test}) at line {end}"
    return None


def _early_returns(definition, ctx: GraphContext) -> tuple[tuple[int, str], ...]:
    """(the line a return ends on, its test) of each `if (TEST) return ...;`
    at the top level of a definition's body, in order."""
    cache = kept_results(ctx, "_early_returns")
    key = (definition.name, str(definition.location))
    if key not in cache:
        cache[key] = tuple(_read_early_returns(definition, ctx))
    return cache[key]


def _read_early_returns(definition, ctx: GraphContext):
    from kernelmap.graph.code import code_only, tree_lines

    location = definition.location
    if not location.end_line:
        return
    text = code_only(tree_lines(ctx, location.path), location.line, location.end_line)
    opened = text.find("{")
    if opened < 0:
        return
    depth, i = 1, opened + 1
    while i < len(text):
        ch = text[i]
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
            if depth == 0:
                return
        elif ch == "#" and depth >= 1:
            return  # a `#if` in the body may compile a return out: read no further
        elif depth == 1 and ch == "i" and (m := _IF.match(text, i)) and _starts_statement(text, i):
            close = _matching(text, m.end() - 1, "(", ")") - 1  # the `)` closing the test
            if close >= len(text) - 1:
                return
            test = re.sub(r"\s+", " ", text[m.end() : close]).strip()
            after = _skip_space(text, close + 1)
            end = None
            if text.startswith("return", after) and not (text[after + 6 : after + 7].isalnum() or text[after + 6 : after + 7] == "_"):
                semi = text.find(";", after)
                end = semi if semi >= 0 and "{" not in text[after:semi] else None
            elif text.startswith("{", after):
                block = _matching(text, after, "{", "}") - 1  # the `}` closing the block
                inner = text[after + 1 : block].strip()
                if re.fullmatch(r"return\b[^;{}]*;", inner, re.S):
                    end = block
            if end is not None:
                yield location.line + text.count("\n", 0, end), test
                i = end + 1
                continue
            i = close  # the test read; the statement's body is walked as any other text
        i += 1


def _starts_statement(text: str, i: int) -> bool:
    """Whether the `if` at `i` starts a statement of its block: not a loop's
    body (`for (...) if`), nor an `else if` of a chain, which is reached only
    when the arms before it are not taken."""
    j = i - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    return j < 0 or text[j] in ";{}"  # `else if` and `for (...) if` end otherwise


def case_cannot_run(line: int, definition, known: dict[str, bool], ctx: GraphContext, rank: int | None = None) -> str | None:
    """Why a call on `line`, which the index records under no case (a `#if`
    inside the case resets it: `case ConvBackend::MkldnnTranspose:` then `#if
    AT_MKLDNN_ENABLED()`), cannot run: the case around it read from the text."""
    label = _enclosing_case(line, definition, ctx)
    return _case_reason(label, definition, known, ctx, rank) if label is not None else None


def _case_reason(label: str, definition, known: dict[str, bool], ctx: GraphContext, rank: int | None) -> str | None:
    possible = switch_values(definition, ctx, known, rank)
    if possible is None:
        return None
    labels = _fallthrough(label, definition, ctx)  # `case Slow2d: case SlowDilated2d: ...` share one arm
    if any(_same_enumerator(lab, p) for lab in labels for p in possible):
        return None
    return f"cannot run for this call: the selector cannot return {' or '.join(labels)} (it can return {', '.join(sorted(possible)) or 'nothing'})"


def _definition_text(definition, ctx: GraphContext) -> tuple[list[str], int]:
    from kernelmap.graph.code import tree_lines

    location = definition.location
    lines = tree_lines(ctx, location.path)
    return list(lines[location.line - 1 : location.end_line or location.line]), location.line


_CASE_LINE = re.compile(r"^\s*case\s+((?:\w+::)*\w+)\s*:")


def _fallthrough(label: str, definition, ctx: GraphContext) -> list[str]:
    """The case labels that share the arm of `label`: those written just before it, with nothing between."""
    lines, _ = _definition_text(definition, ctx)
    short = label.rsplit("::", 1)[-1]
    for i, text in enumerate(lines):
        m = _CASE_LINE.match(text)
        if m and m.group(1).rsplit("::", 1)[-1] == short:
            group = [m.group(1)]
            j = i - 1
            while j >= 0 and (prev := _CASE_LINE.match(lines[j])) is not None and lines[j].strip().endswith(":"):
                group.insert(0, prev.group(1))
                j -= 1
            return group
    return [label]


def _enclosing_case(line: int, definition, ctx: GraphContext) -> str | None:
    """The case label whose arm holds `line`: the nearest `case X:` above it
    with no `break;` or `return` statement ending an arm between."""
    from kernelmap.graph.code import _CODE_ONLY, _blank_keeping_lines

    lines, first = _definition_text(definition, ctx)
    code = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(lines)).split("\n")
    depth = 0  # blocks closed between the line and the one read (a nested `if {...}` in the arm)
    for i in range(line - first - 1, -1, -1):
        text = code[i].strip()
        depth += text.count("}") - text.count("{")
        if depth < 0:
            return None  # left the block the case would be in
        if depth == 0:
            m = _CASE_LINE.match(code[i])
            if m:
                return m.group(1)
            if text.startswith(("break;", "return ", "default:", "switch")):
                return None
    return None


_WORDS = re.compile(r"[A-Za-z_]\w*")


def _decidable(test: str, known: dict[str, bool], rank: int | None, definition, ctx: GraphContext) -> bool:
    """Whether a test names anything the call fixes: a known value, the rank,
    or a predicate of the caller's file (tests of another device are read
    by rules.other_device_reason already)."""
    words = set(_WORDS.findall(test))
    if any(k.split(".", 1)[0] in words for k in known):
        return True
    if rank is not None and ("ndimension" in words or "dim" in words):
        return True
    if definition is None or "(" not in test:
        return False
    return bool(words & _file_predicates(definition.location.path, ctx)) or any(_kernel_predicate(m.group(1), ctx) for m in _CALLED.finditer(test))


# a function called in a test, not a method: `use_mkldnn_matmul(` but not `self.dim(`
_CALLED = re.compile(r"(?<![\w.>:])([A-Za-z_]\w*)\s*\(")


def _kernel_predicate(name: str, ctx: GraphContext) -> bool:
    """Whether kernel code defines `name` (the build's definitions) as one `return`:
    a predicate of another file (Blas.cpp's dot tests mkldnn/Matmul.cpp's use_mkldnn_matmul)."""
    cache = kept_results(ctx, "_kernel_predicate")
    if name not in cache:
        from kernelmap.graph.rules import KERNEL_DIRS

        cache[name] = name not in _NOT_PREDICATES and any(
            _returned(d, ctx) is not None for d in _compiled([d for d in ctx.index.definitions(name) if d.location.path.startswith(KERNEL_DIRS)], ctx))
    return cache[name]


_NOT_PREDICATES = frozenset(("if", "while", "for", "switch", "return", "sizeof", "static_cast", "defined"))


def _file_predicates(path: str, ctx: GraphContext) -> frozenset[str]:
    """The names of the functions a file defines whose body is one `return`: the predicates a test may call."""
    cache = kept_results(ctx, "_file_predicates")
    if path not in cache:
        from kernelmap.graph.code import _by_short_name

        found = set()
        for name, ds in _by_short_name(ctx.index, path).items():
            if any(_returned(d, ctx) is not None for d in _compiled(ds, ctx)):
                found.add(name)
        cache[path] = frozenset(found)
    return cache[path]


def _compiled(definitions, ctx: GraphContext, arity: int | None = None) -> list:
    """Of several definitions of one name, those the build compiles that take
    `arity` arguments (any, when None): mkldnn/Matmul.cpp defines
    use_mkldnn_bf32_matmul(mat1, mat2, result) for a build without oneDNN
    (`return false;`), and for one with it both that (testing the tensors)
    and a static use_mkldnn_bf32_matmul() (testing the settings); the
    release CPU build compiles the last two, and a call's arguments pick one."""
    from kernelmap.graph.code import compiled, parameters

    if len(definitions) < 2:
        return list(definitions)
    kept = [d for d in definitions if compiled(d.symbol.condition, ctx) is not False]
    if arity is not None and len(kept) > 1:
        kept = [d for d in kept if _takes(parameters(d, ctx), arity)]
    return kept


def _takes(declared: list[str] | None, arity: int) -> bool:
    """Whether a definition declaring `declared` can be called with `arity` arguments (its defaults left out)."""
    if declared is None:
        return True
    return sum(1 for p in declared if "=" not in p) <= arity <= len(declared)


def _why(test: str, known: dict[str, bool], rank: int | None, ctx: GraphContext) -> str:
    words = set(re.findall(r"[\w.]+", test))
    facts = [f"{k}={('true' if v else 'false') if isinstance(v, bool) else f'{v:g}'}" for k, v in known.items() if k in words or k.rsplit(".", 1)[-1] in words]
    if rank is not None and _RANK.search(test):
        facts.append(f"{rank}-D input")
    if other_device_reason(f"if ({test})", ctx.device) or any(w in test for w in ("is_cuda", "is_cpu", "cudnn", "mkldnn", "miopen")):
        facts.append(f"on {ctx.device}")
    return ", ".join(dict.fromkeys(facts)) or test


def _same_enumerator(case: str, value: str) -> bool:
    return case.rsplit("::", 2)[-2:] == value.rsplit("::", 2)[-2:]


def decide(test: str, known: dict[str, bool], ctx: GraphContext, rank: int | None = None, depth: int = 0, path: str | None = None) -> bool | None:
    """Whether `test` holds for the call: True, False, or None when unknown.
    `path`: the file the test is written in (its predicates are read)."""
    test = test.strip()
    alternatives = terms(test, "||")
    if len(alternatives) > 1:
        found = [decide(a, known, ctx, rank, depth, path) for a in alternatives]
        return True if True in found else (False if all(f is False for f in found) else None)
    conjuncts = terms(test, "&&")
    if len(conjuncts) > 1:
        found = [decide(c, known, ctx, rank, depth, path) for c in conjuncts]
        return False if False in found else (True if all(f is True for f in found) else None)
    term = conjuncts[0]
    if term.startswith("!"):
        inner = decide(term[1:], known, ctx, rank, depth, path)
        return None if inner is None else not inner
    if term in ("true", "false"):
        return term == "true"
    name = term.replace("->", ".")
    if name in known:
        value = known[name]
        return value if isinstance(value, bool) else value != 0
    if (sides := _equality(term)) is not None:  # `a.is_neg() != b.is_neg()`: two tests the call decides
        left, right = (decide(side, known, ctx, rank, depth, path) for side in sides[1:])
        if left is not None and right is not None:
            return (left == right) == (sides[0] == "==")
    if (compared := _NUMBER_TEST.fullmatch(term)) is not None and any(not isinstance(v, bool) for v in known.values()):
        found = _number_test(compared, known)  # Note [numbers passed as literals] in graph.values
        if found is not None:
            return found
    if rank is not None and (m := _RANK.fullmatch(term)) is not None:
        return _compare(rank, m.group(2), int(m.group(3)))
    if other_device_reason(f"if ({term})", ctx.device) is not None:
        return False  # a test of another device or backend (`input.is_cuda()`, `params.use_cudnn(...)`)
    own = _OWN_DEVICE.get(ctx.device)
    if own is not None and own.search(term) and "!" not in term:
        return True
    if ctx.dtype is not None and not _OUTPUT_DTYPE.search(term):  # Note [dtype branches], [an element type tested] in graph.dtypes
        found = dtypes.evaluate(f"if ({term})", ctx.dtype)
        if found is not None:
            return found
    if "globalContext()" in term and (found := _setting_test(term, ctx)) is not None:  # Note [settings at their defaults]
        return found
    if depth < _PREDICATE_DEPTH and "(" in term:
        return _predicate(term, known, ctx, rank, depth, path)
    return None


# Note [settings at their defaults]
# A test of a global setting reads it from at::globalContext(): mkldnn_gemm's
# `use_mkldnn_bf32_matmul()` is `use_mkldnn_bf16_matmul() &&
# at::globalContext().float32MatmulPrecision() == at::Float32MatmulPrecision::MEDIUM`.
# Answers are for the settings at their defaults, read from the tree as any
# other fact: the getter (Context.cpp's `Context::float32MatmulPrecision`)
# whose body is `return MEMBER;`, and the member's initializer in
# Context.h (`float32_matmul_precision = check_env(...) == true ? HIGH :
# HIGHEST`: an environment variable left unset takes the `:` arm). A bool
# setting is its value; one compared with an enumerator (== or !=) is
# decided by the enumerator's last name. A member initialized in more than
# one place (under `#ifdef USE_ROCM` and its `#else`) is not read, nor is
# deterministic mode, whose arms are ranked (Note [ranking a call's ends] in
# graph.ends) rather than ruled out.
_SETTING = re.compile(r"(?:at::)?globalContext\(\)\s*\.\s*(\w+)\(\)")
_SETTING_TEST = re.compile(rf"(!?)\s*{_SETTING.pattern}(?:\s*(==|!=)\s*((?:\w+::)*\w+))?")
_CONTEXT_FILES = ("aten/src/ATen/Context.h", "aten/src/ATen/Context.cpp")
_RANKED_SETTINGS = frozenset(("deterministicAlgorithms", "deterministicFillUninitializedMemory"))


def _setting_test(term: str, ctx: GraphContext) -> bool | None:
    """Whether a test of a global setting holds at the settings' defaults (Note [settings at their defaults])."""
    m = _SETTING_TEST.fullmatch(term.strip())
    if m is None or m.group(2) in _RANKED_SETTINGS:
        return None
    value = setting_default(m.group(2), ctx)
    if value is None:
        return None
    if m.group(3) is None:
        if value not in ("true", "false"):
            return None
        holds = value == "true"
    else:
        if value in ("true", "false") or re.fullmatch(r"-?[\d.]+\w*", value):
            return None
        holds = (value.rsplit("::", 1)[-1] == m.group(4).rsplit("::", 1)[-1]) == (m.group(3) == "==")
    return not holds if m.group(1) else holds


def setting_default(getter: str, ctx: GraphContext) -> str | None:
    """The default of the global setting at::globalContext().GETTER() as the
    tree writes it (`true`, `at::Float32MatmulPrecision::HIGHEST`); None when
    it cannot be read (Note [settings at their defaults])."""
    cache = kept_results(ctx, "_setting_default")
    if getter not in cache:
        cache[getter] = _read_setting_default(getter, ctx) if ctx.index is not None else None
    return cache[getter]


def _read_setting_default(getter: str, ctx: GraphContext) -> str | None:
    from kernelmap.graph.code import _CODE_ONLY, _blank_keeping_lines, tree_lines

    getters = [d for d in ctx.index.definitions(f"at::Context::{getter}") if d.location.path in _CONTEXT_FILES]
    bodies = {_returned(d, ctx) for d in getters}
    if len(bodies) != 1:
        return None
    member = bodies.pop()
    if member is None or not re.fullmatch(r"[A-Za-z_]\w*", member):
        return None
    header = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(tree_lines(ctx, _CONTEXT_FILES[0])))
    found = re.findall(rf"^\s*[\w:<>]+\s+{re.escape(member)}\s*(?:=\s*([^;{{}}]*?)|\{{([^;{{}}]*)\}})\s*;", header, re.M)
    if len(found) != 1:
        return None
    value = re.sub(r"\s+", " ", found[0][0] or found[0][1]).strip()
    chosen = re.fullmatch(r"(.*?)\s*\?\s*((?:\w+::)*\w+)\s*:\s*((?:\w+::)*\w+)", value)
    if chosen is not None:  # `check_env("X") == true ? A : B`: the variable unset is not `true`
        if not re.fullmatch(r"(?:c10::utils::)?check_env\([^()]*\)\s*==\s*true", chosen.group(1)):
            return None
        value = chosen.group(3)
    return value if re.fullmatch(r"true|false|(?:\w+::)*\w+", value) else None


def _equality(term: str) -> tuple[str, str, str] | None:
    """(`==` or `!=`, left, right) of a term that compares two tests at its
    top level (`a.is_neg() != b.is_neg()`); None for any other term."""
    depth = 0
    for i, ch in enumerate(term):
        depth += (ch in "(<[") - (ch in ")>]") if ch not in "<>" or term[i - 1 : i + 1] not in ("->",) else 0
        if depth == 0 and term.startswith(("==", "!="), i):
            left, right = term[:i].strip(), term[i + 2 :].strip()
            if left and right and not right.startswith("="):
                return term[i : i + 2], left, right
            return None
    return None


# A number as C++ writes it: `2`, `-1`, `0.5`, `.5`, `1e-5`, `2.0f`.
_NUMBER_LITERAL = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlLuU]*")
# A number read from a value by name: `beta`, `beta.to<float>()`, `alpha.toComplexDouble()`, `beta_.toDouble()`
_READ_AS_NUMBER = re.compile(r"([A-Za-z_]\w*)(?:\s*\.\s*(?:toComplexDouble|toDouble|toFloat|toLong|toInt|to\s*<\s*[\w:]+\s*>)\s*\(\s*\))?")


def number_value(text: str, known: dict) -> float | None:
    """The number an argument (or an operand of a test) is for the call: a
    literal, a cast of one (`scalar_t(1)`, `static_cast<float>(0)`), or a
    value the caller knows read as a number (Note [numbers passed as literals])."""
    text = text.strip()
    cast = re.fullmatch(r"(?:static_cast\s*<\s*[\w:]+\s*>|[A-Za-z_][\w:]*)\s*\((.*)\)", text)
    if cast is not None and _NUMBER_LITERAL.fullmatch(cast.group(1).strip()):
        text = cast.group(1).strip()
    if _NUMBER_LITERAL.fullmatch(text):
        try:
            return float(text.rstrip("fFlLuU"))
        except ValueError:
            return None
    m = _READ_AS_NUMBER.fullmatch(text)
    if m is not None:
        value = known.get(m.group(1))
        if value is not None and not isinstance(value, bool):
            return float(value)
    return None


# `beta.toComplexDouble() == 0.0`, `beta != scalar_t(1)`, `alpha == 1`: a value compared with a number
_NUMBER_TEST = re.compile(r"(.+?)\s*(==|!=|>=|<=|>|<)\s*(.+)")


def _number_test(compared: re.Match, known: dict) -> bool | None:
    """Whether a comparison of a number the call passes with a number holds;
    None when either side is not a number the call fixes."""
    left, right = compared.group(1), compared.group(3)
    a, b = number_value(left, known), number_value(right, known)
    if a is None or b is None or not any(ch.isalpha() or ch == "_" for ch in left + right):
        return None
    return _compare(a, compared.group(2), b)


def _compare(a: int, op: str, b: int) -> bool:
    return {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


# `params.is_depthwise(input, weight)`, `is_fused_kernel_acceptable(input, p)`
_CALL = re.compile(r"(?:([A-Za-z_]\w*)\s*(?:\.|->)\s*)?([A-Za-z_]\w*)\s*\((.*)\)", re.S)


def _predicate(term: str, known: dict[str, bool], ctx: GraphContext, rank: int | None, depth: int, path: str | None) -> bool | None:
    """A call of a predicate whose body is one `return EXPR;`, as EXPR with
    the object's known fields (Note [arms that cannot run]): a method of an
    object whose fields are known, or a function of the test's own file."""
    m = _CALL.fullmatch(term)
    if m is None or ctx.index is None:
        return None
    receiver, name = m.group(1), m.group(2)
    fields = {k[len(receiver) + 1:]: v for k, v in known.items() if k.startswith(f"{receiver}.")} if receiver is not None else {}
    if not fields and not (receiver is None and ((path is not None and name in _file_predicates(path, ctx)) or _kernel_predicate(name, ctx))) \
            and not (receiver is not None and rank is not None):
        return None
    found = _one_return(name, ctx, len(terms(m.group(3), ",")) if m.group(3).strip() else 0)
    if found is None:
        return None
    return decide(found, {**known, **fields}, ctx, rank, depth + 1, path)


def _one_return(name: str, ctx: GraphContext, arity: int | None = None) -> str | None:
    """The expression the one definition of `name` in kernel code returns, when
    its body is that `return` alone; of overloads, the one the build compiles
    that takes `arity` arguments."""
    cache = kept_results(ctx, "_one_return")
    key = (name, arity)
    if key not in cache:
        from kernelmap.graph.rules import KERNEL_DIRS

        found = _compiled([d for d in ctx.index.definitions(name) if d.location.path.startswith(KERNEL_DIRS)], ctx, arity)
        bodies = {_returned(d, ctx) for d in found}
        cache[key] = bodies.pop() if len(bodies) == 1 else None
    return cache[key]


def _returned(definition, ctx: GraphContext) -> str | None:
    """The expression a definition returns when its body is one `return`
    (in a block of its own, after a `#if` the build leaves out: mkldnn's
    use_mkldnn_bf16_matmul tests an Arm CPU first under `#if
    defined(__aarch64__)`); None otherwise."""
    from kernelmap.graph.code import code_only, tree_lines

    location = definition.location
    lines = tree_lines(ctx, location.path)
    text = code_only(lines, location.line, location.end_line or location.line)
    if "#" in text:
        text = _without_left_out(text, ctx)
    opened = text.find("{")
    if opened < 0:
        return None
    body = text[opened + 1 : text.rfind("}")].strip()
    while body.startswith("{") and body.endswith("}") and balanced(body[1:-1]):
        body = body[1:-1].strip()
    m = re.fullmatch(r"return\s+(.*?);", body, re.S)
    return re.sub(r"\s+", " ", m.group(1)).strip() if m and ";" not in m.group(1) else None


_LEFT_OUT = re.compile(r"^[ \t]*#\s*if\s+(.*?)\s*$(.*?)^[ \t]*#\s*endif\b[^\n]*$", re.M | re.S)
# `defined(__aarch64__)`: a test of the machine the build is for
_ARCHITECTURE = re.compile(r"defined\s*\(?\s*(__aarch64__|__arm__|__powerpc__|__s390x__|__x86_64__)\s*\)?")


def _without_left_out(text: str, ctx: GraphContext) -> str:
    """`text` less each `#if COND ... #endif` block (with no `#else`) whose
    COND the build leaves out: one the build model decides false, or a
    test of another machine than the one kernelmap runs on (answers are for
    its CPU: Note [the CPU capability that runs] in graph.ends)."""
    import platform

    from kernelmap.graph.code import compiled

    machine = {"x86_64": "__x86_64__", "AMD64": "__x86_64__", "aarch64": "__aarch64__", "arm64": "__aarch64__"}.get(platform.machine())

    def left_out(m: re.Match) -> str:
        condition, inner = m.group(1), m.group(2)
        if re.search(r"^[ \t]*#\s*(?:else|elif|if)", inner, re.M):
            return m.group(0)
        arch = _ARCHITECTURE.fullmatch(condition.strip())
        out = (arch.group(1) != machine if machine is not None else None) if arch else (compiled(condition, ctx) is False)
        return "\n" * m.group(0).count("\n") if out else m.group(0)

    return _LEFT_OUT.sub(left_out, text)


# -- selectors -----------------------------------------------------------------


def switch_values(definition, ctx: GraphContext, known: dict[str, bool], rank: int | None) -> set[str] | None:
    """The values the selector a definition switches on can return for the
    call (`_select_conv_backend` in _convolution): None when there is no such
    switch, or its selector cannot be read."""
    from kernelmap.graph.code import call_arguments, parameters, _bound_flags
    from kernelmap.graph.resolve import _resolve_direct

    calls = kept_results(ctx, "_switched_calls")
    key = (definition.name, str(definition.location))
    if key not in calls:
        calls[key] = _switched_call(definition, ctx)
    found = calls[key]
    if found is None:
        return None
    site = found
    selectors = _resolve_direct(site, definition, ctx)
    if not selectors:
        return None
    selector = selectors[0]
    arguments = call_arguments(site, ctx) or []
    declared = parameters(selector, ctx) or []
    inner = _bound_flags(declared, arguments, known)
    key = (selector.name, str(selector.location), tuple(sorted(inner.items())), rank, ctx.device)
    cache = kept_results(ctx, "_switch_values")
    if key not in cache:
        cache[key] = _returnable(selector, inner, ctx, rank)
    return cache[key]


def _switched_call(definition, ctx: GraphContext):
    """The call site whose result a `switch` of `definition` is on: `auto
    backend = _select_conv_backend(...); ... switch (backend)`; None when none."""
    from kernelmap.graph.code import tree_lines

    location = definition.location
    lines = tree_lines(ctx, location.path)
    text = "\n".join(lines[location.line - 1 : location.end_line or location.line])
    switched = re.search(r"\bswitch\s*\(\s*([A-Za-z_]\w*)\s*\)", text)
    if switched is None:
        return None
    variable = switched.group(1)
    set_by = re.search(rf"\b{variable}\s*=\s*((?:\w+::)*(\w+))\s*(?:<[^;()]*>)?\s*\(", text[: switched.start()])
    if set_by is None:
        return None
    line = location.line + text.count("\n", 0, set_by.start(1))
    return next((s for s in ctx.index.calls_from(definition) if s.name == set_by.group(2) and s.location.line == line), None)


def _returnable(selector, known: dict[str, bool], ctx: GraphContext, rank: int | None) -> set[str] | None:
    """The enumerators a selector's body can return for the call (Note [arms that cannot run])."""
    from kernelmap.graph.code import code_only, tree_lines

    location = selector.location
    lines = tree_lines(ctx, location.path)
    text = code_only(lines, location.line, location.end_line or location.line)
    opened = text.find("{")
    if opened < 0:
        return None
    returns = _returns(text, opened + 1)
    if not returns or not all(re.fullmatch(r"(?:\w+::)+\w+", value) for _, value in returns):
        return None  # a selector returns enumerators only; anything else is not read
    possible = set()
    for tests, value in returns:
        if all(decide(test, known, ctx, rank) is not (not taken) for test, taken in tests):
            possible.add(value)
    return possible


def _returns(text: str, at: int) -> list[tuple[list[tuple[str, bool]], str]]:
    """Each `return VALUE;` of the block that starts at `at` (after its `{`),
    with the if/else tests around it: (test, whether taken) in order."""
    found: list[tuple[list[tuple[str, bool]], str]] = []
    _block(text, at, [], found)
    return found


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _matching(text: str, i: int, opening: str, closing: str) -> int:
    """The index after the bracket that closes the one at `i`."""
    depth = 0
    while i < len(text):
        depth += (text[i] == opening) - (text[i] == closing)
        i += 1
        if depth == 0:
            return i
    return len(text)


def _block(text: str, i: int, tests: list, found: list) -> int:
    """Read statements until the `}` that closes the block; the index after it."""
    while True:
        i = _skip_space(text, i)
        if i >= len(text):
            return i
        if text[i] == "}":
            return i + 1
        i = _statement(text, i, tests, found)


def _statement(text: str, i: int, tests: list, found: list) -> int:
    i = _skip_space(text, i)
    if i >= len(text):
        return i
    if text[i] == "{":
        return _block(text, i + 1, tests, found)
    m = re.match(r"if\s*(?:constexpr\s*)?\(", text[i:])
    if m:
        open_at = i + m.end() - 1
        close = _matching(text, open_at, "(", ")")
        test = re.sub(r"\s+", " ", text[open_at + 1 : close - 1]).strip()
        i = _statement(text, close, [*tests, (test, True)], found)
        after = _skip_space(text, i)
        if re.match(r"else\b", text[after:]):
            return _statement(text, after + 4, [*tests, (test, False)], found)
        return i
    m = re.match(r"return\b([^;]*);", text[i:], re.S)
    if m:
        value = re.sub(r"\s+", " ", m.group(1)).strip()
        choice = re.fullmatch(r"(.*?)\s*\?\s*((?:\w+::)+\w+)\s*:\s*((?:\w+::)+\w+)", value)
        if choice is not None:  # `return input.is_mkldnn() ? ConvBackend::MkldnnEmpty : ConvBackend::Empty;`
            found.append(([*tests, (choice.group(1), True)], choice.group(2)))
            found.append(([*tests, (choice.group(1), False)], choice.group(3)))
        else:
            found.append((list(tests), value.replace(" ", "")))
        return i + m.end()
    m = re.match(r"(?:for|while|switch)\s*\(", text[i:])
    if m:  # a loop's or a switch's body: its returns are under tests not read
        close = _matching(text, i + m.end() - 1, "(", ")")
        return _statement(text, close, [*tests, ("?", True)], found)
    # any other statement: up to its `;` outside brackets (a lambda's body included)
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            if depth == 0:
                return i  # the block's own `}`
            depth -= 1
        elif ch == ";" and depth == 0:
            return i + 1
        i += 1
    return i
