"""Development mode: the example web page served by the collector itself.

``uldp collector serve --http-port 8443 --dev-example examples/web/dist`` serves the built
example page (``examples/web/``, built by ``client-ts/scripts/build-example.mjs``) under
``/example/`` on the collector's own HTTP port. The page and the collector are then one
origin behind one certificate: no ``--cors-origin`` to set, no second web server, one CA
for the browser to trust, and ``https://127.0.0.1:8443/example/?autostart=1`` joins at
once (README, "Devices in web and mobile apps": the first run).

It is a development mode, off by default, and refused outside one
(:func:`check_dev_setup`): the collector must listen on loopback only and present a
certificate of the development CA that ``uldp collector certs`` makes. Files are read from
the directory at each request (a rebuild shows without a restart), only plain files
directly in it with a safe name, GET and HEAD only, under a strict
Content-Security-Policy (this origin's scripts and connections only).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from pathlib import Path

from uldp.collector.http.app import Receive, Scope, Send, respond

__all__ = ["PREFIX", "ExampleApp", "check_dev_setup"]

PREFIX = "/example/"
#: the development CA of ``uldp collector certs`` (uldp.collector.security.certs)
DEV_CA_NAME = "uldp development CA"
MAX_FILE_BYTES = 16 << 20
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript; charset=utf-8",
         ".css": b"text/css; charset=utf-8", ".map": b"application/json",
         ".json": b"application/json", ".svg": b"image/svg+xml", ".png": b"image/png",
         ".ico": b"image/x-icon", ".txt": b"text/plain; charset=utf-8"}
SECURITY = [
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; "
     b"style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
     b"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache")]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_dev_setup(host: str, cert: Path, directory: Path) -> str | None:
    """Why ``--dev-example`` is refused here (one line naming the flag), or None."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    if not _loopback(host):
        return (f"--dev-example is a development mode: it needs --host on loopback "
                f"(127.0.0.1, ::1 or localhost), got --host {host}")
    try:
        issuer = x509.load_pem_x509_certificate(cert.read_bytes()).issuer
        names = [a.value for a in issuer.get_attributes_for_oid(NameOID.COMMON_NAME)]
    except (OSError, ValueError) as exc:
        return f"--dev-example: cannot read the server certificate {cert}: {exc}"
    if DEV_CA_NAME not in names:
        return (f"--dev-example is a development mode: it needs the development "
                f"certificates of `uldp collector certs` (--tls-dir), and {cert} is issued "
                f"by {', '.join(map(str, names)) or 'another CA'}")
    if not directory.is_dir():
        return (f"--dev-example {directory}: no such directory (build the page first: "
                f"cd client-ts && npm ci && node scripts/build-example.mjs)")
    if not (directory / "index.html").is_file():
        return (f"--dev-example {directory}: no index.html in it (build the page: "
                f"cd client-ts && node scripts/build-example.mjs)")
    return None


class ExampleApp:
    """The ASGI app under ``/example/`` (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()

    def _read(self, name: str) -> bytes | None:
        path = self.directory / name
        try:
            if not path.is_file() or path.resolve().parent != self.directory:
                return None
            if path.stat().st_size > MAX_FILE_BYTES:
                return None
            return path.read_bytes()
        except OSError:
            return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path"][len(PREFIX):] or "index.html"
        if scope["method"] not in ("GET", "HEAD"):
            await respond(send, 405, b"GET only\n", [(b"allow", b"GET")])
            return
        body = (await asyncio.to_thread(self._read, name)
                if _NAME.fullmatch(name) and Path(name).suffix in TYPES else None)
        if body is None:
            await respond(send, 404, b"not found\n")
            return
        await respond(send, 200, body, SECURITY, content_type=TYPES[Path(name).suffix])


async def to_example(scope: Scope, receive: Receive, send: Send) -> None:
    """``/example`` -> ``/example/`` (keeping the query: ``?autostart=1``)."""
    query = scope.get("query_string", b"")
    await respond(send, 308, b"", [(b"location", PREFIX.encode() + (b"?" + query if query
                                                                      else b""))])
