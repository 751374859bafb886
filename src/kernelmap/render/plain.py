"""Uncoloured text laid out line for line as rich lays it out, without
importing rich (a third of a cold `kernelmap where`'s time): the few pieces
of rich's API a renderer uses (`Console.print`, `Table.grid`, `Text`) for
text of printable ASCII, where one character is one column.

    from kernelmap.render import plain
    try:
        text = draw(plain.Console(file=out, width=120), plain.Table, plain.Text)
    except plain.NotPlain:  # wide characters, markup, a table that must crop: rich draws it
        text = draw(rich.console.Console(file=out, width=120, ...), rich.table.Table, rich.text.Text)

What rich would draw otherwise (a character outside printable ASCII, a
tab, a string that reads as console markup, a grid whose unwrappable
columns do not fit) raises `NotPlain`, and the caller asks rich. Styles and
links are accepted and dropped, as rich drops them without colour.
tests/render/test_plain.py holds the two to the same bytes.
"""

from __future__ import annotations

import re
from typing import IO, Any

_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n]")  # one character, one column: printable ASCII (a newline splits lines)
_MARKUP = re.compile(r"\[[a-z#/@]")  # rich reads a string (not a Text) as console markup: a tag's start
_WORD = re.compile(r"\s*\S+\s*")  # rich._wrap's word: leading space, the word, trailing space


class NotPlain(Exception):
    """What rich would draw differently from this module: draw it with rich."""


def _checked(text: str, markup: bool, newlines: bool = True) -> str:
    if _NOT_PLAIN.search(text) or (markup and _MARKUP.search(text)) or (not newlines and "\n" in text):
        raise NotPlain(text)
    return text


class Text:
    """rich.text.Text's plain characters (styles are dropped)."""

    def __init__(self, text: str = "", style: Any = None):
        self.plain = _checked(text, markup=False)

    @classmethod
    def assemble(cls, *parts: Any) -> Text:
        text = cls()
        for part in parts:
            if isinstance(part, tuple):
                text.append(*part)
            else:
                text.append(part)
        return text

    def append(self, text: Any, style: Any = None) -> Text:
        self.plain += text.plain if isinstance(text, Text) else _checked(text, markup=False)
        return self

    def append_text(self, text: Text) -> Text:
        self.plain += text.plain
        return self

    def stylize(self, style: Any, start: int = 0, end: int | None = None) -> None:
        pass


def _plain(cell: Any) -> str:
    """A cell's or a printed object's characters: a str is markup to rich (Note in the module's docstring)."""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return _checked(cell, markup=True)
    raise NotPlain(type(cell).__name__)


def _divide_line(text: str, width: int) -> list[int]:
    """rich._wrap.divide_line with fold=True, for text of one column per character."""
    breaks: list[int] = []
    offset = 0
    match = _WORD.match(text, 0)
    while match is not None:
        start, end = match.span()
        word = match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            folded = [word[i : i + width] for i in range(0, len(word), width)]
            for n, piece in enumerate(folded):
                if start:
                    breaks.append(start)
                if n == len(folded) - 1:
                    offset = len(piece)
                else:
                    start += len(piece)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
        match = _WORD.match(text, end)
    return breaks


def _wrapped(text: str, width: int) -> list[str]:
    """The lines rich's Text.wrap gives `text` at `width` (overflow fold), each cut to `width`
    (what is past it is the trailing space of a word)."""
    lines = []
    for line in text.split("\n"):
        cuts = [0, *_divide_line(line, width), len(line)]
        lines += [line[a:b][:width] for a, b in zip(cuts, cuts[1:])]
    return lines


class _Column:
    def __init__(self, no_wrap: bool, overflow: str):
        self.no_wrap = no_wrap
        self.overflow = overflow
        self.cells: list[str] = []


class Table:
    """rich.table.Table.grid: no box, no header, padding between columns only."""

    def __init__(self, padding: int):
        self.padding = padding
        self.columns: list[_Column] = []

    @classmethod
    def grid(cls, padding: tuple[int, int] = (0, 0)) -> Table:
        if len(padding) != 2 or padding[0] != 0:
            raise NotPlain(f"padding {padding}")
        return cls(padding[1])

    def add_column(self, style: Any = None, no_wrap: bool = False, overflow: str = "ellipsis") -> None:
        self.columns.append(_Column(no_wrap, overflow))

    def add_row(self, *cells: Any) -> None:
        if len(cells) != len(self.columns):
            raise NotPlain("a row of another length")
        for column, cell in zip(self.columns, cells):
            column.cells.append(_checked(_plain(cell), markup=False, newlines=not column.no_wrap))

    def lines(self, max_width: int) -> list[str]:
        """The grid's lines, as rich's Table lays them out in `max_width` columns."""
        columns = self.columns
        if not columns or not columns[0].cells:
            raise NotPlain("an empty grid")
        pads = [self.padding] * (len(columns) - 1) + [0]  # collapsed padding, none at the edges
        widths = [min(max(max(map(len, cell.split("\n"))) + pad for cell in column.cells), max_width) or 1
                  for column, pad in zip(columns, pads)]
        excess = sum(widths) - max_width
        if excess > 0:  # rich's Table._collapse_widths: only a wrapping column gives way
            wrapping = [n for n, column in enumerate(columns) if not column.no_wrap]
            if len(wrapping) != 1:
                raise NotPlain("a grid of several wrapping columns too wide")
            n = wrapping[0]
            widths[n] -= excess
            if widths[n] - pads[n] < 1 or any(c.overflow != "fold" for c in columns if not c.no_wrap):
                raise NotPlain("a grid whose fixed columns do not fit")
        out = []
        for row in zip(*(column.cells for column in columns)):
            drawn = []
            for column, cell, width, pad in zip(columns, row, widths, pads):
                inner = width - pad
                if column.no_wrap:
                    if any(len(line) > inner for line in cell.split("\n")):
                        raise NotPlain("a cell cropped")
                    lines = cell.split("\n")
                else:
                    lines = _wrapped(cell, inner)
                drawn.append([line.ljust(width) for line in lines])
            height = max(map(len, drawn))
            for k in range(height):
                out.append("".join(cell[k] if k < len(cell) else " " * width for cell, width in zip(drawn, widths)))
        return out


class Console:
    """rich.console.Console without colour, writing to `file` at `width` columns."""

    def __init__(self, file: IO[str], width: int, **_: Any):
        self.file = file
        self.width = width

    def print(self, obj: Any = None, overflow: str | None = None, no_wrap: bool | None = None) -> None:
        if obj is None:
            lines = [""]
        elif isinstance(obj, Table):
            lines = obj.lines(self.width)
        else:
            text = _plain(obj)
            if no_wrap:
                lines = [line if len(line) <= self.width else line[: self.width - 1] + "\u2026" if overflow == "ellipsis" else line[: self.width]
                         for line in text.split("\n")]
            elif overflow not in (None, "fold"):
                raise NotPlain(f"overflow {overflow}")
            else:
                lines = _wrapped(text, self.width)
        self.file.write("".join(line + "\n" for line in lines))
