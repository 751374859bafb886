"""kernelmap for coding agents: an MCP server (the official `mcp` SDK) whose
tools are kernelmap's questions (where, stack, path, callers, explain, find,
gen, kernel, diff, trace, trees, expand) and whose resources are the lines
an answer points at, over stdio or streamable HTTP on loopback.

    from kernelmap.mcp import create_server
    create_server(source="debian-2.6.0").run()          # stdio

`server` builds the tools and their replies, `bound` cuts a reply to a size
limit (Note [bounded answers]), `warm` keeps the producers open between
calls, `resources` maps locations to URIs and reads them, `http` serves the
streamable HTTP transport on loopback.
"""

from __future__ import annotations

from kernelmap.mcp.server import create_server

__all__ = ["create_server"]
