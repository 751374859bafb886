"""`kernelmap render`: show a saved answer again, reshaped by processors."""

from __future__ import annotations

import dataclasses

import click

from kernelmap.commands.options import all_option, check_input_file, check_min_us, emit, output_options


@click.command("render")
@click.argument("document", type=click.Path(dir_okay=False))
@click.option("--depth", type=int, default=None, help="Cut call trees below this depth.")
@click.option("--hide-below", "hide", multiple=True, metavar="NAME", help="Hide the children of nodes named NAME. Repeatable.")
@click.option("--collapse-branches", is_flag=True, help="Collapse branches for another device or backend.")
@click.option("--prune", is_flag=True, help="Cut tensor utility calls to one step each and drop helpers that reach nothing else.")
@click.option("--min-us", type=float, default=0.0, help="Hide trace nodes shorter than this many microseconds.")
@all_option
@output_options
def render_(document, depth, hide, collapse_branches, prune, min_us, show_all, as_json, width, html):
    """Render a saved answer (any kernelmap --json document) again, as text or JSON.

    Call trees (stack, callers, trace) can be reshaped: cut at a depth,
    hide the children of a node, collapse other-device branches, prune
    plumbing.

    \b
    Example:
      kernelmap stack torch.nn.Conv2d --device cuda --json > conv.json
      kernelmap render conv.json --depth 3
      kernelmap render conv.json --hide-below at::native::_convolution --json
    """
    from kernelmap import answers, processors
    from kernelmap.errors import BadInput
    from kernelmap.printable import printable
    from kernelmap.model import CallTree
    from kernelmap.render.json import loads

    if depth is not None and depth < 0:
        raise BadInput(f"--depth must be 0 or more, not {depth}")
    check_min_us(min_us)
    check_input_file(document, "the document")
    try:
        with open(document, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise BadInput(f"cannot read {document}: {e.strerror}") from None
    except ValueError as e:  # not UTF-8
        raise BadInput(f"{document} is not JSON: {e}") from None
    try:
        doc = loads(text)  # at any depth: a trace's tree nests deeper than json.load recurses
    except ValueError as e:
        raise BadInput(f"{document} is not JSON: {e}") from None
    # A saved document is anyone's text: no control character reaches the terminal, and a
    # document of the right kind but another shape is bad input, not a traceback.
    doc = _printable(doc)
    try:
        answer = answers.load(doc)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
        raise BadInput(f"{document} is not a document kernelmap can render ({type(e).__name__}: {e})") from None

    def reshape(tree: CallTree) -> CallTree:
        for name in hide:
            if not any(n.name == name or n.name.endswith(f"::{name}") for _, n in tree.walk()):
                raise BadInput(f"--hide-below {printable(name[:200])!r}: no node of the tree is named so")
        if collapse_branches:
            tree = processors.collapse_branches(tree)
        if prune:
            tree = processors.prune_plumbing(tree)
        for name in hide:
            tree = processors.hide_below(tree, name)
        if depth is not None:
            tree = processors.cut_at_depth(tree, depth)
        return tree

    if isinstance(answer, CallTree):
        answer = reshape(answer)
    elif getattr(answer, "DOCUMENT", "") == "trace" and answer.tree is not None:
        answer = dataclasses.replace(answer, tree=reshape(answer.tree))
    elif depth is not None or hide or collapse_branches or prune or min_us:
        given = [o for o, on in (("--depth", depth is not None), ("--hide-below", hide), ("--collapse-branches", collapse_branches),
                                 ("--prune", prune), ("--min-us", min_us)) if on]
        raise BadInput(f"{', '.join(given)} reshape call trees; {document} holds none (a {getattr(answer, 'DOCUMENT', type(answer).__name__)} document)")
    from rich.errors import ConsoleError

    try:
        emit(answer, as_json, width, html, min_us=min_us, full=show_all)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError, ConsoleError) as e:  # ConsoleError: rich cannot draw a value
        raise BadInput(f"{document} is not a document kernelmap can render ({type(e).__name__}: {e})") from None


def _printable(doc):
    """`doc` with every string's control characters escaped (newlines and tabs kept), iteratively."""
    from kernelmap.printable import printable

    def clean(value):
        return printable(value) if isinstance(value, str) else value

    root = [clean(doc)]
    stack = [root[0]] if isinstance(root[0], (dict, list)) else []
    while stack:
        container = stack.pop()
        if isinstance(container, dict):
            items = [(clean(k), clean(v)) for k, v in container.items()]
            container.clear()
            container.update(items)
            stack.extend(v for _, v in items if isinstance(v, (dict, list)))
        else:
            container[:] = [clean(v) for v in container]
            stack.extend(v for v in container if isinstance(v, (dict, list)))
    return root[0]
