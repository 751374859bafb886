"""`kernelmap mcp`: the MCP server for coding agents, over stdio or HTTP."""

from __future__ import annotations

import click

from kernelmap.commands.options import source_option


@click.command()
@source_option
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP (at /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve HTTP on (any that is not loopback warns).")
@click.option("--port", type=click.IntRange(0, 65535), default=8766, show_default=True, help="HTTP port (0: any free port, named on stderr).")
def mcp(source, http, host, port):
    """Serve kernelmap's questions to a coding agent over MCP.

    The tools (where, stack, path, callers, explain, find, gen, kernel, diff,
    trace, trees, expand) answer with each answer's JSON document, bounded in
    size; resources read the lines an answer points at. Stdio by default (an
    MCP client starts the command); --http serves http://127.0.0.1:8766/mcp.

    \b
    Example:
      kernelmap mcp
      kernelmap mcp --source debian-2.6.0
      kernelmap mcp --http --port 0
    """
    from kernelmap.mcp import create_server

    if source is not None:
        from kernelmap.source import select_tree

        select_tree(source)  # an unknown tree is a one-line error before serving
    server = create_server(source)
    if not http:
        server.run("stdio")
        return
    from kernelmap.mcp.http import is_loopback, serve

    if not is_loopback(host):
        click.echo(f"kernelmap: warning: serving on {host}, which is not loopback: anyone who reaches it can read the served trees", err=True)
    try:
        serve(server, host, port)
    except KeyboardInterrupt:
        pass
