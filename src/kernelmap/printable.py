"""External text (trace names, file contents and paths, tree names, what the
user typed) made safe to print on a terminal: control characters (escape
sequences that set a window title or clear the screen, carriage returns,
bells), line and paragraph separators, lone surrogates and format characters
(Unicode category Cf: bidi overrides and isolates that reorder what is shown,
zero-width spaces and joiners that hide text, the soft hyphen, the BOM) become
visible `\\x1b`-style escapes. Newlines and tabs of multi-line output are kept
(`printable`); one-line fields escape them too (`printable_line`).

Imports nothing of kernelmap: every command, static ones included, uses it."""

from __future__ import annotations

import re

# Every character of Unicode category Cf, as ranges. Written out, not computed:
# scanning all 1.1M code points with `unicodedata` costs ~0.1 s, paid by every
# command at import. This is Unicode 14.0's list (Python 3.11) plus 15.0's
# additions (U+13439-1343F, for Python 3.12 on); a code point unassigned in an
# older Python's tables is escaped all the same. tests/test_robustness_more.py
# checks it against the running Python's `unicodedata`: a Python with a newer
# Unicode that adds format characters fails there until they are added here.
FORMAT_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x0600, 0x0605),
    (0x061C, 0x061C),  # Arabic letter mark
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner; LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x2064),
    (0x2066, 0x206F),  # bidi isolates, deprecated format characters
    (0xFEFF, 0xFEFF),  # zero-width no-break space (BOM)
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),  # tag characters
)

# The classes hold the format characters of the BMP and every non-BMP character
# in one range, which `_escape` gives back unchanged unless it is a format
# character: `re` tests each non-BMP range of a class on every character it
# scans, and nine of them made a scan 4 times slower.
_BMP_FORMAT = "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in FORMAT_RANGES if b < 0x10000)
_ASTRAL_FORMAT = frozenset(c for a, b in FORMAT_RANGES if a >= 0x10000 for c in range(a, b + 1))
_CONTROL = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{_BMP_FORMAT}\U00010000-\U0010ffff]")
_LINE_CONTROL = re.compile(rf"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{_BMP_FORMAT}\U00010000-\U0010ffff]")
# Most text (trace names, paths) is ASCII, and `str.isascii` costs nothing:
# such text is scanned for the ASCII controls alone.
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_ASCII_LINE_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    if c < 0x100:
        return f"\\x{c:02x}"
    if c < 0x10000:
        return f"\\u{c:04x}"
    return f"\\U{c:08x}" if c in _ASTRAL_FORMAT else m.group(0)  # \U: `\ue0001` would read as U+E000 and a "1"


def printable(text: str) -> str:
    """`text` with every control and format character (and lone surrogate) escaped; newlines and tabs kept."""
    return (_ASCII_CONTROL if text.isascii() else _CONTROL).sub(_escape, text)


def printable_line(text: str) -> str:
    """`printable` for one line of output (a path, a tree's root): newlines and tabs are escaped too."""
    return (_ASCII_LINE_CONTROL if text.isascii() else _LINE_CONTROL).sub(_escape, text)


# An error line names what the user gave: a name of 100 KB would make it a
# page. A long run without a space (a name, a path) is shortened to its start
# and end; then the whole line, should it still be long.
ECHO_WORD = 200
ECHO_LINE = 1000
_LONG_WORD = re.compile(rf"\S{{{ECHO_WORD + 1},}}")


def shortened(text: str, limit: int = ECHO_LINE) -> str:
    """`text` when it is at most `limit` characters; else its start and end
    around a count of what is left out, so that a line stays a line."""
    if len(text) <= limit:
        return text
    tail = limit // 5
    head = limit - tail
    return f"{text[:head]}…[{len(text) - head - tail} characters]…{text[-tail:]}"


def shortened_line(text: str) -> str:
    """An error line with every long name in it shortened (`shortened`), and then the line itself."""
    return shortened(_LONG_WORD.sub(lambda m: shortened(m.group(0), ECHO_WORD), text), ECHO_LINE)
