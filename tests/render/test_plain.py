"""kernelmap.render.plain draws uncoloured text byte for byte as rich draws
it: `where` answers of the real catalog (static, live, with a tree's source
steps) at several widths, and grids of random words, each against rich
itself in the same test; what plain cannot draw alike falls back to rich."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelmap.render import plain
from kernelmap.render import where as where_render
from kernelmap.render.text import escaped
from tests.graph.conftest import TREE_NAME, indexed_tree  # noqa: F401 - the shared indexed tree

WIDTHS = (20, 37, 60, 90, None)


def _rich_console(out: io.StringIO, width: int) -> Console:
    return Console(file=out, width=width, force_terminal=False, no_color=True, color_system=None, highlight=False, emoji=False)


def _same_as_rich(answers) -> int:
    """Renders each answer both ways at each width; returns how many plain drew itself."""
    drawn = 0
    for answer in answers:
        answer = escaped(answer)
        for width in WIDTHS:
            for full in (False, True):
                expected = where_render._rich_text(answer, width, False, True, full)
                assert where_render.to_text(answer, width=width, color=False, full=full) == expected, (answer.op.name, width)
                try:
                    where_render._draw(answer, plain.Console(file=io.StringIO(), width=width or 120), plain.Table, plain.Text, True, full)
                    drawn += 1
                except plain.NotPlain:
                    pass
    return drawn


@pytest.fixture
def op_names(wheel_only_cache):
    from kernelmap.catalog import load_catalog

    names = [name for (name,) in load_catalog()._db.execute("SELECT qualified FROM ops ORDER BY id")]
    return ["aten::" + name for name in names[:: max(1, len(names) // 80)]]


def test_static_where_answers_match_rich(op_names):
    from kernelmap import api

    answers = [api.where(name, static=True) for name in op_names]
    assert len(answers) >= 70
    drawn = _same_as_rich(answers)
    assert drawn >= len(answers) * len(WIDTHS) * 2 * 3 // 4  # plain draws most of them (rich the narrowest)


def test_live_where_answers_match_rich(op_names):
    from kernelmap import api

    answers = [api.where(name, device="cpu") for name in op_names[::8]]
    assert all(a.live is not None for a in answers)
    assert _same_as_rich(answers) > 0


def test_where_answers_with_source_steps_match_rich(indexed_tree):  # noqa: F811
    from kernelmap import api

    answers = [api.where(name, device=device, with_source=True, static=True, source=TREE_NAME)
               for name, device in (("aten::add.Tensor", "cpu"), ("aten::conv2d", "cuda"), ("aten::mm", "cuda"), ("aten::sum.dim_IntList", "cpu"))]
    assert any(a.source for a in answers)
    assert _same_as_rich(answers) > 0


_ALPHABET = "abcdefghij" * 4 + "   ()]:,._-/#@" + "\n"


def _words(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.05:
        return ""
    if kind < 0.1:
        return rng.choice(["SymInt[2] stride=1", "[bold]x[/bold]", "a[#ff0000]", "caf\u00e9 au lait", "tab\there", "\\[not a tag]"])
    words = [rng.choice([" ", ""]) * rng.randint(0, 2) + "".join(rng.choice(_ALPHABET) for _ in range(rng.choice([1, 3, 8, 15, 40, 130])))
             for _ in range(rng.randint(1, 12))]
    return " ".join(words)


def _draw(console, Table, Text, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 6)):
        what = rng.random()
        if what < 0.2:
            console.print()
        elif what < 0.4:
            console.print(Text(_words(rng), style="bold"))
        elif what < 0.5:
            console.print(Text(_words(rng).replace("\n", " "), style="dim"), overflow="ellipsis", no_wrap=True)
        else:
            grid = Table.grid(padding=(0, 2))
            columns = rng.randint(2, 3)
            for n in range(columns - 1):
                grid.add_column(no_wrap=True, style="dim" if n else None)
            grid.add_column(overflow="fold")
            for _ in range(rng.randint(1, 5)):
                cells = ["".join(rng.choice("abc:._ ") for _ in range(rng.randint(0, 14))) for _ in range(columns - 1)]
                last = _words(rng)
                grid.add_row(*cells, Text.assemble((last, "green"), "  ", Text("x.cpp:12", style="cyan")) if rng.random() < 0.5 else last)
            console.print(grid)


@pytest.mark.parametrize("seed", range(40))
def test_random_grids_match_rich(seed):
    """Random words, long words, newlines, markup, wide characters and tabs at widths from 20 to 130."""
    rng = random.Random(seed)
    for _ in range(25):
        width = rng.randint(20, 130)
        state = rng.getstate()
        expected = io.StringIO()
        _draw(_rich_console(expected, width), Table, Text, rng)
        rng.setstate(state)
        out = io.StringIO()
        try:
            _draw(plain.Console(file=out, width=width), plain.Table, plain.Text, rng)
        except plain.NotPlain:
            continue
        assert out.getvalue() == expected.getvalue(), (seed, width)


def test_not_plain_is_what_rich_draws_otherwise():
    for text in ("caf\u00e9", "a\tb", "\x1b[31m"):
        with pytest.raises(plain.NotPlain):
            plain.Text(text)
    grid = plain.Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    with pytest.raises(plain.NotPlain):
        grid.add_row("x", "[bold]markup[/bold]")  # a str cell is markup to rich
    grid.add_row("x", "SymInt[2] is no tag")
    assert grid.lines(40) == ["x  SymInt[2] is no tag"]


def test_static_where_text_imports_no_rich(wheel_only_cache):
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from kernelmap.cli import cli
        result = CliRunner().invoke(cli, ["where", "aten::conv2d", "--static"])
        assert result.exit_code == 0, result.output
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("rich", "pygments", "jinja2", "msgspec", "torch")))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
