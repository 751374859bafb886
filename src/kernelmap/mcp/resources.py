"""The files an answer points at, as MCP resources: a LOCATION -> its URI,
and a URI -> the lines it names, read only from the roots kernelmap serves
(kernelmap.web.files: registered trees, the generated-code cache, the
installed wheel's torch/ and torchgen/; `..`, absolute paths, encoded
separators and links out of a root are refused).

    kernelmap://tree/debian-2.6.0/aten/src/ATen/native/Convolution.cpp#L1701-L1766
    kernelmap://generated/torch-2.13.0+cpu-cf30153c4c13/build/aten/src/ATen/RegisterCPU_0.cpp#L1297
    kernelmap://generated/build/aten/src/ATen/RegisterCPU_0.cpp#L1297   (the installed torch's set)
    kernelmap://wheel/torch/nn/modules/conv.py#L540

A read gives the lines with their numbers (at most MAX_LINES; the whole file
up to that when no lines are named), under a first line naming the file,
the range and the origin.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from mcp.server.mcpserver.exceptions import ResourceError

from kernelmap.errors import KernelmapError
from kernelmap.model import is_generated_path

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from kernelmap.mcp.warm import ServedFiles, Warm

MAX_LINES = 400
_LINES = re.compile(r"L?(\d{1,9})(?:-L?(\d{1,9}))?")


def resource_uri(location: dict[str, Any], origins: dict[str, Any], files: ServedFiles) -> str | None:
    """The URI that reads a LOCATION's lines, or None when it lies in no served root."""
    path = str(location.get("path") or "")
    line = location.get("line")
    if not path or not isinstance(line, int):
        return None
    end = location.get("end_line")
    fragment = f"#L{line}" + (f"-L{end}" if isinstance(end, int) and end != line else "")
    origin = origins.get(location.get("origin")) if isinstance(location.get("origin"), str) else None
    label = origin.get("label") if isinstance(origin, dict) else location.get("origin")
    kind = origin.get("kind") if isinstance(origin, dict) else None
    generated = files.roots.get("generated")
    disk = location.get("file")
    if (kind == "generated" or is_generated_path(path)) and generated is not None:
        if isinstance(disk, str):
            rel = files.generated_rel(disk)
            if rel:
                return f"kernelmap://generated/{quote(rel)}{fragment}"
        return f"kernelmap://generated/{quote(path)}{fragment}" if path.startswith("build/") else None
    for root in files.roots.values():
        if label and root.label == label:
            if root.name.startswith("tree:"):
                return f"kernelmap://tree/{quote(root.name[5:], safe='')}/{quote(path)}{fragment}"
            if root.name == "wheel":
                return f"kernelmap://wheel/{quote(path)}{fragment}"
    return None


def read_lines(files: ServedFiles, root_name: str, path: str, lines: str | None) -> str:
    """The numbered lines of `path` under the root `root_name`, `lines` as `L10`, `L10-L20` or `10-20`."""
    opened = files.open(root_name, path)
    text = opened.text.split("\n")
    if text and text[-1] == "":
        text.pop()
    first, last = 1, min(len(text), MAX_LINES)
    if lines:
        m = _LINES.fullmatch(lines.strip())
        if m is None:
            raise ResourceError(f"lines are named as #L10 or #L10-L20, not {lines[:40]!r}")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        if first < 1 or last < first:
            raise ResourceError(f"no lines {lines[:40]!r}: lines count from 1 and end at or after their start")
        if first > len(text):
            raise ResourceError(f"{path} has {len(text)} lines, not {first}")
        last = min(last, len(text), first + MAX_LINES - 1)
    width = len(str(last))
    body = "\n".join(f"{n:>{width}}  {text[n - 1]}" for n in range(first, last + 1))
    return f"# {path}:{first}-{last} of {len(text)} lines ({opened.root.label})\n{body}\n"


def register_resources(server: MCPServer, warm: Warm) -> None:
    """The resource templates of the three kinds of root."""

    def read(root_name: str, path: str, lines: str | None) -> str:
        try:
            return read_lines(warm.files, root_name, path, lines)
        except KernelmapError as e:
            raise ResourceError(str(e)) from None

    @server.resource("kernelmap://tree/{name}/{+path}{?lines}", name="tree file", mime_type="text/plain",
                     description="Lines of a file of a registered source tree, numbered: "
                                 "kernelmap://tree/NAME/PATH#L10-L20 (or ?lines=L10-L20); the `resource` of a location.")
    async def tree_file(name: str, path: str, lines: str | None = None) -> str:
        return await warm.run(lambda: read(f"tree:{name}", path, lines))

    @server.resource("kernelmap://generated/{+path}{?lines}", name="generated file", mime_type="text/plain",
                     description="Lines of a generated file (bindings, Register<Key> wrappers, ops), by its path under "
                                 "the generated-code cache (SET/build/...) or a build path of the installed torch's set.")
    async def generated_file(path: str, lines: str | None = None) -> str:
        return await warm.run(lambda: read("generated", path, lines))

    @server.resource("kernelmap://wheel/{+path}{?lines}", name="wheel file", mime_type="text/plain",
                     description="Lines of a file of the installed torch wheel's torch/ or torchgen/ (its Python, its yaml).")
    async def wheel_file(path: str, lines: str | None = None) -> str:
        return await warm.run(lambda: read("wheel", path, lines))
