"""Answer documents: the versioned JSON every answer writes and reads back
(Note [answer documents]), and an answer's view in a notebook (Note [notebook
view]).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kernelmap.errors import KernelmapError


# Note [answer documents]
# Every answer kernelmap gives has one JSON form, a document: an object whose
# key "kernelmap" names the answer and its version ("calltree/2", "where/2"),
# beside the answer's own fields. A version changes whenever a field changes
# meaning or goes away; fields may be added within a version. `from_json`
# refuses any other name or version with a clear error. The answers and their
# versions are listed in kernelmap.answers.


# Note [notebook view]
# A notebook shows an answer as its HTML report. The model imports no
# renderer: the view is registered from above (kernelmap/__init__.py registers
# render.html's, so any answer has it once the package is imported), and an
# answer asks for it when it is shown.
_notebook_view: Callable[[Any], str] | None = None


def show_in_notebooks(view: Callable[[Any], str]) -> None:
    """Make `view(answer)` the HTML a notebook shows for every answer."""
    global _notebook_view
    _notebook_view = view


class Answer:
    """What every answer shares: a notebook shows it as its HTML report (Note [notebook view])."""

    def _repr_html_(self) -> str | None:
        return None if _notebook_view is None else _notebook_view(self)


class DocumentError(KernelmapError):
    """A JSON document that is not the answer it should be."""


def document(answer: str, version: int, /, **fields: Any) -> dict[str, Any]:
    """A document's top level: {"kernelmap": "answer/version", **fields}."""
    return {"kernelmap": f"{answer}/{version}", **fields}


def check_document(d: Any, name: str, version: int) -> Mapping[str, Any]:
    """`d` itself when it is the document `name/version`; DocumentError otherwise."""
    expected = f"{name}/{version}"
    if not isinstance(d, Mapping):
        raise DocumentError(f"not a kernelmap document: expected a JSON object holding {expected}")
    found = d.get("kernelmap")
    if found != expected:
        raise DocumentError(f"not a {expected} document: it says {found!r}" if found else f"not a kernelmap document: no \"kernelmap\" key (expected {expected})")
    return d
