"""The `source list` and `scaffold` answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelmap.model.documents import Answer, check_document, document


@dataclass(frozen=True)
class SourceEntry:
    """One registered source tree, as `source list` shows it."""

    name: str
    root: str
    version: str
    commit: str | None
    kind: str  # local | fetched
    indexed: bool


SOURCES_VERSION = 1


@dataclass(frozen=True)
class SourceList(Answer):
    trees: tuple[SourceEntry, ...]

    DOCUMENT = "sources"

    def to_json(self) -> dict[str, Any]:
        return document(self.DOCUMENT, SOURCES_VERSION, trees=[dict(t.__dict__) for t in self.trees])

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SourceList:
        d = check_document(d, cls.DOCUMENT, SOURCES_VERSION)
        return cls(tuple(SourceEntry(**t) for t in d.get("trees") or ()))


# ---------------------------------------------------------------------------
# The `scaffold` answer
# ---------------------------------------------------------------------------

SCAFFOLD_VERSION = 1


@dataclass(frozen=True)
class ScaffoldAnswer(Answer):
    """What `kernelmap scaffold` wrote: the custom operator, what it starts as, the files."""

    root: str  # the project folder
    custom_op: str  # kernelmap_ext::myadd
    schema: str
    op: str  # the operator it starts as
    family: str  # the reference kernel it starts with
    files: tuple[str, ...]  # relative to root
    cuda: bool
    kept: tuple[str, ...] = ()  # of `files`, those the user edited, left as they were (--force)

    DOCUMENT = "scaffold"

    def to_json(self) -> dict[str, Any]:
        return document(self.DOCUMENT, SCAFFOLD_VERSION, root=self.root, custom_op=self.custom_op, schema=self.schema, op=self.op,
                        family=self.family, files=list(self.files), cuda=self.cuda, kept=list(self.kept))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScaffoldAnswer:
        d = check_document(d, cls.DOCUMENT, SCAFFOLD_VERSION)
        return cls(d["root"], d["custom_op"], d["schema"], d["op"], d["family"], tuple(d["files"]), bool(d["cuda"]),
                   tuple(d.get("kept", ())))
