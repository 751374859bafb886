"""`kernelmap serve`: the local web app on uvicorn."""

from __future__ import annotations

import click

from kernelmap.web.guard import is_loopback, loopback_address

__all__ = ["serve", "is_loopback"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (anything but loopback exposes your files' sources to the network).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on (0: any free port, printed when serving).")
@click.option("--source", default=None, help="Source tree of the answer pages, and whose index links trace kernels to their definitions (a registered name or a path).")
@click.option("--max-upload-mb", type=click.IntRange(1, 4096), default=256, show_default=True, help="Largest trace upload accepted, packed or unpacked.")
def serve(host: str, port: int, source: str | None, max_upload_mb: int) -> None:
    """Serve kernelmap's pages on a local web app: search, where, stack,
    callers, explain, gen, a source viewer and trace import. Open the link
    it prints: it holds this launch's token, which the app asks of every
    browser (other web pages cannot send it).

    \b
    Example:
      kernelmap serve                  # http://127.0.0.1:8765/?token=...
      kernelmap serve --port 9000 --source debian-2.6.0
    """
    import secrets
    import socket

    import uvicorn

    from kernelmap.errors import BadInput
    from kernelmap.web.app import create_app
    from kernelmap.web.server import config, host_names

    if source is not None:  # named and unknown: one line now, not a page error per request
        from kernelmap.source import select_tree

        select_tree(source)
    # the socket is bound here, so a port in use or a host that does not resolve is one line, before anything is served
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except (OSError, UnicodeError, OverflowError) as e:
        raise BadInput(f"cannot serve on {host}:{port}: {getattr(e, 'strerror', None) or e}") from None
    bound_address, bound = sock.getsockname()[:2]  # the address host stood for; the port --port 0 left to the system
    if not loopback_address(bound_address):
        click.echo(f"kernelmap: warning: serving on {host}, not loopback: anyone who can reach it and has the link can read the served source trees", err=True)
    token = secrets.token_urlsafe(32)
    app = create_app(max_upload=max_upload_mb * 1024 * 1024, source=source, token=token, hosts=host_names(host, bound_address))
    shown = "127.0.0.1" if bound_address == "0.0.0.0" else "[::1]" if bound_address == "::" else host
    shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown  # an IPv6 address is bracketed in a URL
    click.echo(f"kernelmap serving on http://{shown}:{bound}/?token={token} (Ctrl-C stops)", err=True)
    uvicorn.Server(config(app)).run(sockets=[sock])
