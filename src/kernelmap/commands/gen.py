"""`kernelmap gen`: the generated code one operator passes through."""

from __future__ import annotations

import click

from kernelmap.commands.options import all_option, codegen_bar, emit, output_options, source_option

LAYERS = ("binding", "ops", "autograd", "register", "ufunc", "all")


@click.command()
@click.argument("op")
@click.option(
    "--layer",
    type=click.Choice(LAYERS),
    default="all",
    show_default=True,
    help="Which generated code to show: the Python binding, at::_ops entry points, "
    "autograd/tracing wrappers, Register<Key> wrappers, or ufunc kernels.",
)
@all_option
@source_option
@click.option("--regenerate", is_flag=True, help="Generate the files again even if the cache has them.")
@output_options
def gen(op: str, layer: str, show_all: bool, source: str | None, regenerate: bool, as_json: bool, width: int | None, html: str | None) -> None:
    """Show the generated code behind operator OP: the code that exists only
    in a PyTorch build directory, regenerated with torchgen and cached.

    OP is an operator name: aten::conv2d, conv2d, add.out (a base name such
    as `add` picks its most common overload), or a Python name where and
    stack take (torch.nn.Conv2d: the first operator it reaches). The files
    are generated from the tree that where, stack and path read (--source,
    else the default tree), with its own torchgen; with no tree registered,
    from the installed torch.

    By default, one line per generated layer a call passes (binding,
    dispatcher entry, autograd wrapper, the Register<Key> wrappers of CPU,
    CUDA and the composite keys, ufunc kernels), each at its file:line, the
    rest of a layer folded to a line with a count; --all, or one --layer,
    shows every piece with its code.

    \b
    Example:
      kernelmap gen add.Tensor
      kernelmap gen add.Tensor --all
      kernelmap gen aten::conv2d --layer binding
      kernelmap gen add.out --layer ufunc --json
    """
    from kernelmap.codegen import Layer, locate
    from kernelmap.commands.source import one_line_warnings

    one_line_warnings()
    from kernelmap.errors import NoSourceTree
    from kernelmap.source import choose_tree

    # Note [the default tree]: the tree where, stack and path answer from, else the installed torch
    tree, chosen = None, None
    try:
        choice = choose_tree(source)
        tree, chosen = choice.tree.root, choice.note
    except NoSourceTree:
        if source is not None:
            raise
    layers = tuple(Layer) if layer == "all" else (Layer(layer),)
    from kernelmap.errors import UnknownName

    note = None
    try:
        from kernelmap.codegen import resolve_op

        resolve_op(op, tree)
    except UnknownName:  # a Python name (torch.nn.Conv2d, F.relu): the first operator it reaches, as where and stack take it
        if "." not in op or "::" in op:
            raise
        op, note = _operator_of(op, tree)
    with codegen_bar() as bar:
        code = locate(op, layers=layers, tree=tree, progress=bar, regenerate=regenerate)
    said = tuple(n for n in (chosen, note) if n is not None)
    if said:
        from dataclasses import replace

        code = replace(code, notes=(*said, *code.notes))
    emit(code, as_json, width, html, full=show_all or layer != "all")


def _operator_of(name: str, tree) -> tuple[str, str]:
    from kernelmap import env
    from kernelmap.catalog import load_catalog
    from kernelmap.names import resolve_ops
    from kernelmap.suggest import closest_names

    install = env.torch_install()
    catalog = load_catalog(tree=tree) if tree is not None else load_catalog()
    with closest_names(python_root=install.site_packages):
        ops = resolve_ops(name, catalog, load_catalog(), install.site_packages)
    op = str(ops[0].name)
    return op, f"{name} runs {op}: its generated code follows"
