"""The streamable HTTP transport on loopback: the server's Starlette app
(the SDK's) behind uvicorn on a socket bound first, so that `--port 0`
names the port it got and the allowed Host and Origin headers name it
exactly. A request whose Host or Origin is not this loopback address is
refused (403/421) by the SDK's DNS-rebinding protection, which stays on
whatever the address."""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Callable

from kernelmap.errors import BadInput

PATH = "/mcp"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port); BadInput when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise BadInput(f"cannot serve on {host}: {e}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise BadInput(f"cannot serve on {host}:{port}: {e.strerror}") from None
    sock.setblocking(False)
    return sock


def security(host: str, port: int):
    """The Host and Origin values a request may carry: this address and port,
    and the loopback names for it when it is loopback."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = {host if ":" not in host else f"[{host.strip('[]')}]"}
    if is_loopback(host):
        hosts |= {"127.0.0.1", "localhost", "[::1]"}
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(f"{h}:{port}" for h in hosts),
        allowed_origins=sorted(f"http://{h}:{port}" for h in hosts),
    )


def serve(server, host: str = "127.0.0.1", port: int = 8766, ready: Callable[[str], None] | None = None) -> None:
    """Serve `server` (an MCPServer) at http://host:port/mcp until interrupted."""
    import anyio
    import uvicorn

    sock = bind(host, port)
    port = sock.getsockname()[1]
    app = server.streamable_http_app(streamable_http_path=PATH, transport_security=security(host, port), host=host)
    url = f"http://{host if ':' not in host else '[' + host.strip('[]') + ']'}:{port}{PATH}"
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    (ready or (lambda u: print(f"serving MCP on {u}", file=sys.stderr, flush=True)))(url)
    anyio.run(lambda: uv.serve(sockets=[sock]))
