"""``uldp collector serve --dev-example DIR`` (``uldp.collector.http.example``): the example
web page served by the collector itself, same origin and one CA — off by default, refused
outside a development setup (loopback, the dev CA of ``uldp collector certs``) with one
line naming the flag and nothing written, and serving only plain files directly in DIR.
The page itself, in headless Chromium, is ``client-ts/scripts/browser-first-run.mjs``."""

from __future__ import annotations

import datetime
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _page(tmp_path: Path) -> Path:
    d = tmp_path / "dist"
    d.mkdir()
    (d / "index.html").write_text('<!doctype html><script type="module" src="app.js"></script>')
    (d / "app.js").write_text("import('./chunk-AB12.js');")
    (d / "chunk-AB12.js").write_text("export const x = 1;")
    (d / "sub").mkdir()
    (d / "sub" / "x.js").write_text("no")
    (tmp_path / "secret.txt").write_text("outside")
    return d


def _get(url: str, ca: Path, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    ctx = ssl.create_default_context(cafile=str(ca))

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **kw):  # type: ignore[no-untyped-def]
            return None
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx), NoRedirect())
    try:
        with opener.open(urllib.request.Request(url, method=method), timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def test_dev_example_serves_the_page_and_nothing_else(start_collector, tmp_path):
    c = start_collector(http=True, http_config={"dev_example": _page(tmp_path)})
    ca = c.pki.ca_cert
    status, h, body = _get(c.http_url + "/example/", ca)
    assert status == 200 and h["content-type"].startswith("text/html") and b"app.js" in body
    csp = h["content-security-policy"]
    for rule in ("script-src 'self'", "connect-src 'self'", "default-src 'none'"):
        assert rule in csp, csp
    for name in ("app.js", "chunk-AB12.js"):
        status, h, _ = _get(f"{c.http_url}/example/{name}", ca)
        assert status == 200 and h["content-type"].startswith("text/javascript")
    for bad in ("sub/x.js", "..%2Fsecret.txt", "../secret.txt", ".hidden.js", "nothing.js",
                "app.exe"):
        assert _get(f"{c.http_url}/example/{bad}", ca)[0] == 404, bad
    assert _get(c.http_url + "/example/app.js", ca, method="POST")[0] == 405
    status, h, _ = _get(c.http_url + "/example?autostart=1", ca)
    assert status == 308 and h["location"] == "/example/?autostart=1"
    assert _get(c.http_url + "/healthz", ca)[2] == b"SERVING\n"


def test_dev_example_is_off_by_default(start_collector):
    c = start_collector(http=True)
    assert _get(c.http_url + "/example/", c.pki.ca_cert)[0] == 404


def _foreign_cert(tmp_path: Path) -> Path:
    """A self-signed certificate of another CA (a production-like setup)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Example Corp CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp_path / "prod.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "prod.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tmp_path / "prod.key").chmod(0o600)
    return tmp_path / "prod.pem"


@pytest.mark.parametrize("case, says", [
    ("no-http", "--dev-example needs --http-port"),
    ("host", "--dev-example is a development mode: it needs --host on loopback"),
    ("cert", "--dev-example is a development mode: it needs the development certificates"),
    ("dir", "no such directory (build the page first"),
    ("index", "no index.html in it"),
])
def test_dev_example_is_refused_outside_a_dev_setup(pki, tmp_path, capsys, case, says):
    from uldp.collector.cli.service import main

    page = _page(tmp_path)
    argv = ["collector", "serve", "--db", str(tmp_path / "x.db"), "--port", "0",
            "--dev-example", str(page)]
    if case != "no-http":
        argv += ["--http-port", "0"]
    if case == "cert":
        cert = _foreign_cert(tmp_path)
        argv += ["--tls-cert", str(cert), "--tls-key", str(tmp_path / "prod.key"),
                 "--admin-token-file", str(pki.directory / "admin.token")]
    else:
        argv += ["--tls-dir", str(pki.directory)]
    if case == "host":
        argv += ["--host", "0.0.0.0"]
    if case == "dir":
        argv[argv.index(str(page))] = str(tmp_path / "missing")
    if case == "index":
        (page / "index.html").unlink()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.db").exists()
