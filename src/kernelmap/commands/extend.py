"""`kernelmap scaffold` and `kernelmap verify`: thin click commands over
`kernelmap.extend`."""

from __future__ import annotations


import click

from kernelmap.commands.options import emit, output_options, source_option
from kernelmap.extend.project import DEFAULT_NAMESPACE, KERNELS


@click.command()
@click.argument("op")
@click.option("--name", required=True, help="Name of the custom operator, its package and its files (an identifier).")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Operator namespace: torch.ops.NAMESPACE.NAME.")
@click.option("--cuda", is_flag=True, help="Also write a CUDA kernel (.cu, no torch header) and its C++ glue.")
@click.option("--extra", "extra", multiple=True, metavar="ARG", help='Extra keyword-only argument in schema syntax, with a default: "float alpha=1.0". Repeatable.')
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Project folder [default: ./NAME].")
@click.option("--force", is_flag=True, help="Write into an existing project folder: replaces the files a previous scaffold wrote there, keeps those you edited.")
@click.option("--kernel", type=click.Choice(KERNELS), default="aten", show_default=True,
              help="Convolutions: 'aten' calls ATen (plus a CUDA epilogue); 'direct' writes a direct convolution loop "
                   "and a tiled CUDA kernel.")
@source_option
@output_options
def scaffold(op: str, name: str, namespace: str, cuda: bool, extra: tuple[str, ...], out: str | None, force: bool,
             kernel: str, source: str | None, as_json: bool, width: int | None, html: str | None) -> None:
    """Write a buildable extension project for a custom operator that starts as OP.

    The project holds a C++ CPU kernel (a correct reference to edit), an
    optional CUDA kernel, the TORCH_LIBRARY schema (OP's plus --extra), fake and
    autograd registrations, setup.py (ahead of time) and a just-in-time build,
    tests against OP and a benchmark.

    \b
    Example:
      kernelmap scaffold aten::add.Tensor --name myadd --extra "float beta=1.0"
      cd myadd && python -m pytest tests
    """
    from kernelmap.extend.project import scaffold as run
    from kernelmap.model import ScaffoldAnswer

    start = op
    if source is not None:  # the operator as the selected tree declares it
        from kernelmap.catalog import load_catalog
        from kernelmap.source import select_tree

        tree = select_tree(source)
        start = load_catalog(tree=tree.root, origin=tree.origin).resolve(op)[0]
    result = run(start, name, out=out, namespace=namespace, extra=extra, cuda=cuda, force=force, kernel=kernel)
    answer = ScaffoldAnswer(str(result.root), result.spec.qualified, result.spec.schema, str(result.spec.op), result.family,
                            tuple(str(f) for f in result.files), result.cuda, tuple(str(f) for f in result.kept))
    emit(answer, as_json, width, html)


@click.command()
@click.argument("model_file", type=click.Path(dir_okay=False))
@click.option("--override", "overrides", multiple=True, required=True, metavar="OP=CUSTOM_OP", help="aten::convolution=kernelmap_ext::myconv. Repeatable.")
@click.option("--key", default="CPU", show_default=True, help="Dispatch key the overrides replace.")
@click.option("--load", "load", multiple=True, type=click.Path(exists=True), help="Scaffolded project folder or shared library to load first. Repeatable.")
@click.option("--extra-args", "extra_args", multiple=True, metavar="NAME=VALUE", help="Value of an extra argument of the custom operator (a Python literal): scale=1.5. Repeatable.")
@click.option("--backward", is_flag=True, help="Also run backward and compare the gradients of the input and every parameter.")
@click.option("--runs", type=int, default=5, show_default=True, help="Timed runs of each; the median is reported.")
@click.option("--model-fn", default=None, help="Name of the model factory in MODEL_FILE [default: model, or its only public function].")
@click.option("--rtol", type=float, default=None, help="Relative tolerance [default: torch.testing.assert_close's for each dtype].")
@click.option("--atol", type=float, default=None, help="Absolute tolerance [default: torch.testing.assert_close's for each dtype].")
@output_options
def verify(model_file: str, overrides: tuple[str, ...], key: str, load: tuple[str, ...], extra_args: tuple[str, ...],
           backward: bool, runs: int, model_fn: str | None, rtol: float | None, atol: float | None, as_json: bool,
           width: int | None, html: str | None) -> None:
    """Run a model with and without overrides; a verdict, a table per overridden operator, timings.

    MODEL_FILE defines example_input() and a model factory: model(), or its one
    public function (resnet50 in examples/resnet50.py). The model runs in eval
    mode with torch.manual_seed(0). Exit status 0 when every output (and
    gradient) is within --rtol/--atol and every override received calls, 1
    otherwise, 2 for bad input.

    \b
    Example:
      kernelmap verify examples/resnet50.py --load myconv \\
          --override aten::convolution=kernelmap_ext::myconv --extra-args scale=1.0 --runs 3 --rtol 1e-5 --atol 1e-6
    """
    from kernelmap.extend.compare import parse_extra_args, parse_override
    from kernelmap.extend.compare import verify as run
    from kernelmap.commands.options import emit
    from kernelmap.runscript import absolute, user_code

    pairs = dict(parse_override(o) for o in overrides)
    html_path = absolute(html)  # before the model file's code runs, which may change folder
    with user_code():  # the model file's prints (and a build's) go to stderr, the report alone to stdout
        report = run(model_file, pairs, key=key, backward=backward, runs=runs, load=load,
                     extra_args=parse_extra_args(extra_args), model_fn=model_fn, rtol=rtol, atol=atol)
    emit(report, as_json, width, html_path)
    if not report.passed:
        click.get_current_context().exit(1)
