"""Who may talk to the app: each request -> passed on, or refused with 403.

A page on any web site can make the browser send requests to 127.0.0.1, and
can rebind a DNS name of its own to it. So every request must:

- name an allowed host in its `Host` header: a loopback address written as an
  address (`127.0.0.1`, `[::1]`, `127.1`), `localhost`, or a name the server
  was told to answer to (the address `serve --host` bound). A rebound name
  (`Host: evil.example`) is refused before anything is read;
- come from the app's own pages: an `Origin` header, when sent, must be this
  server's own origin, and `Sec-Fetch-Site`, when sent, must be `same-origin`
  or `none` (the user typed or opened the URL). A request another site's page
  makes (a link, a form, `fetch`, an image) is refused, whatever it asks for;
- carry this launch's token, everywhere but the app's own scripts and styles
  (`/static/`). `kernelmap serve` prints a link holding the token
  (`/?token=...`); opening it sets a cookie (`HttpOnly`, `SameSite=Strict`,
  named after the port, since cookies are shared between the ports of one
  host) and leads to the same page without the token. A foreign page can
  neither read the cookie nor make the browser send it (SameSite=Strict), and
  cannot learn the token: it is printed to the terminal only. The link itself
  is let in from anywhere (`Guard.enter`): only its holder can make it.

Note [web origin checks]
The three checks are independent on purpose: browsers that send no
Sec-Fetch-Site still send Origin on the requests that change state, and a
client that sends neither (curl, a script) still needs the token.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import re
import socket
from collections.abc import Iterable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, unquote_plus

TOKEN_PARAM = "token"
ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})
LOOPBACK_NAMES = frozenset({"localhost"})
_NUMERIC_V4 = re.compile(r"[0-9a-fA-FxX.]{1,64}")


def loopback_address(text: str) -> bool:
    """Whether `text` is an IP address (in any spelling of one: `127.1`,
    `0x7f.0.0.1`, `::1`, `::ffff:127.0.0.1`) on the loopback network. Names
    are not addresses: they are never looked up here."""
    text = text.strip().removeprefix("[").removesuffix("]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        if not _NUMERIC_V4.fullmatch(text):
            return False
        try:  # the short and numeric IPv4 forms getaddrinfo and browsers accept
            ip = ipaddress.ip_address(socket.inet_aton(text))
        except OSError:
            return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def is_loopback(host: str) -> bool:
    """Whether every address `host` (an address or a name) stands for is a
    loopback address, so that serving on it reaches this machine only."""
    if loopback_address(host):
        return True
    try:
        found = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return False
    return bool(found) and all(loopback_address(str(address[0])) for *_, address in found)


def split_host(header: str) -> str | None:
    """The host name of a `Host` header value (`127.0.0.1:8765`, `[::1]:80`,
    `localhost`), lowercased; None when it is not one."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        if end < 0 or not re.fullmatch(r"(:[0-9]{1,5})?", header[end + 1 :]):
            return None
        return header[1:end]
    name, _, port = header.partition(":")
    if port and not re.fullmatch(r"[0-9]{1,5}", port):
        return None
    return name.rstrip(".") or None


def cookie_name(port: int | None) -> str:
    return f"kernelmap-token-{port}" if port else "kernelmap-token"


class Guard:
    """ASGI middleware: the checks of this module's docstring, before the app
    sees a request."""

    def __init__(self, app, token: str, hosts: Iterable[str] = ()):
        self.app = app
        self.token = token
        self.hosts = frozenset(h.lower().strip("[]").rstrip(".") for h in hosts) | LOOPBACK_NAMES

    def host_allowed(self, name: str | None) -> bool:
        return name is not None and (name in self.hosts or loopback_address(name))

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":  # the app has no websocket routes
            return await send({"type": "websocket.close", "code": 1008})
        headers = _headers(scope)
        if not self.host_allowed(split_host(headers.get("host", ""))):
            return await _respond(send, 403, _page("this server answers to its own address only (the Host header names another)"))
        port = (scope.get("server") or (None, None))[1]
        query = scope.get("query_string", b"").decode("latin-1")
        given = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == TOKEN_PARAM]
        if given:  # the printed link: whoever has the token may come in, from wherever they clicked it
            if scope["method"] not in ("GET", "HEAD") or len(given) != 1 or not hmac.compare_digest(given[0].encode(), self.token.encode()):
                return await _respond(send, 403, _page("this link's token is not this server's: open the link `kernelmap serve` printed when it started"))
            return await self.enter(scope, headers, send, query, port)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            return await _respond(send, 403, _page(refusal))
        if not (scope["method"] in ("GET", "HEAD") and scope["path"].startswith("/static/")) and not self.has_token(headers, port):
            return await _respond(send, 403, _page("this server needs the link `kernelmap serve` printed when it started "
                                                   "(it holds a token that lets this browser in)"))
        return await self.app(scope, receive, send)

    async def enter(self, scope, headers: dict[str, str], send, query: str, port: int | None) -> None:
        """Set the token's cookie and lead to the same page without the token.
        Opened from the terminal or the address bar, a redirect; clicked in
        another site's page (a terminal in a browser), a page that moves on
        by itself: a redirect would carry that site's mark (Sec-Fetch-Site),
        and the browser would not send the new cookie with it."""
        # the URL without the token, as it was written (still percent-encoded: no header or markup can be made of it)
        rest = "&".join(part for part in query.split("&") if part and unquote_plus(part.split("=", 1)[0]) != TOKEN_PARAM)
        path = (scope.get("raw_path") or quote(scope["path"]).encode()).decode("latin-1")
        location = "/" + path.lstrip("/\\") + (f"?{rest}" if rest else "")  # never `//host`: nothing leads off this server
        cookie = (b"set-cookie", f"{cookie_name(port)}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode())
        if headers.get("sec-fetch-site", "none") in ALLOWED_FETCH_SITES:
            return await _respond(send, 303, b"", [(b"location", location.encode("latin-1")), cookie])
        target = html.escape(location)
        body = (f'<!doctype html><html lang=en><meta charset=utf-8><meta http-equiv="refresh" content="0; url={target}">'
                f'<title>kernelmap</title><p><a href="{target}">continue to kernelmap</a></html>').encode()
        return await _respond(send, 200, body, [cookie])

    def refusal(self, scope, headers: dict[str, str]) -> str | None:
        """Why a request from a page must not reach the app (Origin, Sec-Fetch-Site); None when it may."""
        host = headers.get("host", "")
        origin = headers.get("origin")
        if origin is not None and origin != f"{scope.get('scheme', 'http')}://{host.strip().lower()}":
            return "requests from other sites are refused (the Origin header names another site)"
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ALLOWED_FETCH_SITES:
            return "requests from other sites are refused (open the page from the address bar or the link `kernelmap serve` printed)"
        return None

    def has_token(self, headers: dict[str, str], port: int | None) -> bool:
        jar = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except Exception:  # http.cookies raises CookieError, and others on odd input: no token then
            return False
        found = jar.get(cookie_name(port))
        return found is not None and hmac.compare_digest(found.value.encode(), self.token.encode())


def _headers(scope) -> dict[str, str]:
    """The request's headers by lowercase name; a header sent twice is kept
    as a value no check accepts."""
    out: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        name = key.decode("latin-1").lower()
        text = value.decode("latin-1")
        out[name] = f"{out[name]}; {text}" if name in out and name == "cookie" else ("\x00twice" if name in out else text)
    return out


def _page(message: str) -> bytes:
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><title>kernelmap: refused</title>"
        f"<p data-testid=refused>kernelmap: refused: {html.escape(message)}</p></html>"
    ).encode()


async def _respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = ()) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store"), *headers]})
    await send({"type": "http.response.body", "body": body})
