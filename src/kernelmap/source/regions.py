"""Where each definition and call sits: the regions that qualify or condition
it (namespaces, classes, cases and ifs, #if branches, function bodies) and
the condition each gives, found by one sweep in byte order.

Note [regions]
Every capture that qualifies or conditions what lies inside it (a namespace
body, a class body, a switch case, an if branch, a #if body, a #else, a
function body) becomes a region (start byte, end byte, tag, payload). Syntax
nodes nest, so the regions are laminar: a sweep over regions and points
(definition starts, call sites) in byte order with a stack gives, at each
point, exactly its enclosing regions, innermost on top.

Note [named lambdas]
A kernel often binds a lambda to a name and calls it in one arm only:
index_select's `outer_loop`, which calls `copy_stub`, runs when a slice holds
at least the grain size, and a memcpy loop runs otherwise. A call in such a
body takes the condition of the name's first call in the same definition,
not the condition around the lambda's definition, unless a case/if of the
body itself conditions it.
"""

from __future__ import annotations

import operator
import re

from kernelmap.source.calls import _SPACE
from kernelmap.source.facts import Call, InlineNamespace


_COND_MAX = 120  # longer case/if conditions are cut: they are for reading, not evaluation


_STRAY_CLOSE = re.compile(rb"^(\s*}\s*;?\s*(//[^\n]*)?)+$")


def _namespace_name(node) -> str:
    """A namespace definition's name (`a::b` for a nested one); an InlineNamespace for `inline namespace`."""
    name = node.child_by_field_name("name")
    text = _SPACE.sub("", name.text.decode("utf-8", "replace")) if name else "(anonymous namespace)"
    return InlineNamespace(text) if node.child(0).type == "inline" else text


def _recover_namespaces(error_nodes, regions) -> None:
    """Note [early-closed namespaces]: when unbalanced braces in the branches
    of an #if make the grammar close a namespace early, the namespace's real
    closing brace is left over as an ERROR holding only `}`. The definitions
    between the two still belong to the namespace: extend its region to the
    stray brace (as many namespaces as stray braces, innermost last). A
    namespace takes the last of its stray braces only: a region each would
    qualify what lies inside it by the namespace once per brace."""
    extended: dict[tuple[int, int], tuple[int, str]] = {}
    for err in error_nodes:
        text = err.text
        if b"}" not in text or not _STRAY_CLOSE.match(text):
            continue
        count = text.count(b"}")
        sib = err.prev_named_sibling
        while sib is not None and sib.type != "namespace_definition":
            sib = sib.prev_named_sibling
        if sib is None:
            continue
        names = [_namespace_name(sib)]
        cur = sib
        while len(names) < count:
            body = cur.child_by_field_name("body")
            inner = [c for c in body.named_children if c.type != "comment"] if body else []
            if not inner or inner[-1].type != "namespace_definition":
                break
            cur = inner[-1]
            names.append(_namespace_name(cur))
        key = (sib.start_byte, sib.end_byte)
        if key not in extended or extended[key][0] < err.end_byte:
            extended[key] = (err.end_byte, "::".join(names))
    regions.extend((start, end, "scope", names) for (_, start), (end, names) in extended.items())


_ATOM = re.compile(r"!?\s*(defined\s*\(\s*\w+\s*\)|defined\s+\w+|[\w:]+(\([^()]*\))?)")


def _negate(cond: str) -> str:
    """`!cond`, parenthesised unless `cond` is one name, call or defined(X)."""
    if not _ATOM.fullmatch(cond):
        return f"!({cond})"
    return cond[1:].strip() if cond.startswith("!") else f"!{cond}"


def _condition_label(kind: str, node) -> str:
    """"case ConvBackend::Cudnn", "default", "if (x)", "else of if (x)",
    "inside TORCH_CHECK"."""
    if kind == "check":
        return f"inside {node.text.decode('utf-8', 'replace')}"
    if kind == "case":
        value = node.child_by_field_name("value")
        return f"case {_SPACE.sub(' ', value.text.decode('utf-8', 'replace'))}" if value else "default"
    text = _SPACE.sub(" ", node.text.decode("utf-8", "replace"))
    if len(text) > _COND_MAX:
        text = text[: _COND_MAX - 4] + "...)"
    return f"if {text}" if kind == "if" else f"else of if {text}"


def _preproc_of(live) -> str | None:
    """The preprocessor conditions of the regions around a point, joined."""
    conds = [r[3] for r in live if r[2] == "pp"]
    return " && ".join(conds) if conds else None


def _label(labels: dict, cond: tuple) -> str:
    """The label of a case/if region's condition, made once per region."""
    key = (cond[0], cond[1].start_byte)
    label = labels.get(key)
    if label is None:
        label = labels[key] = _condition_label(*cond)
    return label


def _context_of(live) -> tuple[int, tuple | None, tuple | None, str | None, list[tuple]]:
    """Of the regions around a point, outer to inner: (innermost definition,
    innermost case/if inside it, TORCH_LIBRARY block, the named lambda whose
    body holds the point with no case/if between them, the case/ifs around
    the innermost inside the definition, outermost first)."""
    cond = None
    def_index = -1
    lib = None
    lam = None
    around: list[tuple] = []
    for _, _, tag, payload in reversed(live):
        if tag == "cond" and def_index == -1:
            if cond is None:
                cond = payload
            else:
                around.append(payload)
        elif tag == "lambda" and cond is None and lam is None and def_index == -1:
            lam = payload
        elif tag == "def" and def_index == -1:
            def_index = payload
        elif tag == "lib" and lib is None:
            lib = payload
    around.reverse()
    return def_index, cond, lib, lam, around


def _lambda_conditions(calls: list[Call], in_lambdas: list[tuple[int, int, str]]) -> None:
    """Note [named lambdas]: a call in the body of `auto loop = [&](...) {...};`,
    under no case/if of the body, runs where `loop(...)` is first called in
    the same definition, so it takes that call's condition. A lambda only
    passed on (`parallel_for(0, n, grain, loop)`) keeps the condition around
    its definition."""
    first_use: dict[tuple[int, str], tuple[str | None, str | None]] = {}
    for c in calls:
        if c.kind == "direct" and c.callee == c.short:
            first_use.setdefault((c.definition, c.short), (c.condition, c.outer))
    for i, definition, name in in_lambdas:
        if (definition, name) in first_use:
            condition, outer = first_use[(definition, name)]
            calls[i] = calls[i]._replace(condition=condition, outer=outer)


def _sweep(regions, points):
    """(start, kind, payload, context) for each point in byte order (Note
    [regions]). A context is what the regions around the point say: (the
    regions, outer to inner; the first end among them; then as `_preproc_of`
    and `_context_of` read them: preprocessor condition, innermost
    definition, case/if, TORCH_LIBRARY block, named lambda, the case/ifs
    around the case/if). It is the same object as for the previous point when
    the regions are the same, so a reader works out what they say once for a
    run of points.

    Each region pushed on the stack gets its context from the one below it
    (`_inner`): reading all the regions again at every change cost more than
    the rest of the sweep. The stack may hold regions that ended before the
    point (preprocessor regions can cross syntax regions, and only the top is
    popped): those are left out, and the context is read from the rest.
    Nothing changes before `boundary`, the next start of a region or the
    first end of a region around the point."""
    regions.sort(key=_region_order)
    points.sort(key=_POINT_ORDER)
    stack: list[tuple] = []  # contexts, each of the stack up to its region (the last of its regions)
    here = _OUTSIDE
    boundary = -1
    ri = 0
    n = len(regions)
    for start, kind, payload in points:
        if start < boundary:
            yield start, kind, payload, here
            continue
        while ri < n and regions[ri][0] <= start:
            r = regions[ri]
            ri += 1
            while stack and stack[-1][0][-1][1] <= r[0]:
                stack.pop()
            if r[1] > start:
                stack.append(_inner(stack[-1] if stack else _OUTSIDE, r))
        while stack and stack[-1][0][-1][1] <= start:
            stack.pop()
        top = stack[-1] if stack else _OUTSIDE
        if top[1] > start:  # no region on the stack has ended
            here = top
        else:
            live = [c[0][-1] for c in stack if c[0][-1][1] > start]
            if live != here[0]:
                def_index, cond, lib, lam, around = _context_of(live)
                here = (live, min(map(_END, live), default=_NEVER), _preproc_of(live), def_index, cond, lib, lam, tuple(around))
        boundary = here[1]
        if ri < n and regions[ri][0] < boundary:
            boundary = regions[ri][0]
        yield start, kind, payload, here


def _inner(outer: tuple, region: tuple) -> tuple:
    """The context (see `_sweep`) of the regions of `outer` and `region`
    inside them: what `_preproc_of` and `_context_of` read of them, from what
    they read of `outer`'s."""
    live, end, pp, def_index, cond, lib, lam, around = outer
    tag, payload = region[2], region[3]
    if tag == "cond":
        around = (*around, cond) if cond is not None else ()
        cond, lam = payload, None
    elif tag == "def":
        def_index, cond, lam, around = payload, None, None, ()
    elif tag == "lambda":
        lam = payload
    elif tag == "pp":
        pp = payload if pp is None else f"{pp} && {payload}"
    elif tag == "lib":
        lib = payload
    return [*live, region], min(end, region[1]), pp, def_index, cond, lib, lam, around


_NEVER = float("inf")
_END = operator.itemgetter(1)
_OUTSIDE = ([], _NEVER, None, -1, None, None, None, ())  # the context of a point in no region


def _region_order(r):
    return (r[0], -r[1])


_POINT_ORDER = operator.itemgetter(0, 1)
