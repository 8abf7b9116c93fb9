"""A throw-away certificate authority and a loopback server certificate, made with ``openssl``.

``make_tls(directory)`` writes ``ca.pem`` (the CA a client trusts, e.g. through
``SSL_CERT_FILE``), ``server.pem`` and ``server.key`` (for ``127.0.0.1``, ``::1`` and
``localhost``) once, and returns their paths; ``server_context``/``client_context`` build the
``ssl`` contexts. The benchmark's fake model serves ``https://`` with them, as real providers do,
and the wire tests use them for the TLS paths of the provider transports.
"""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

_EXT = ("subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n")


@dataclass(frozen=True)
class TLSFiles:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_tls(directory: Path) -> TLSFiles:
    """The CA and server files under ``directory`` (made once; EC P-256 keys, 30 days)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    if all(p.is_file() for p in (files.ca, files.cert, files.key)):
        return files
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
             "-subj", "/CN=agentloop bench CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    _openssl("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj",
             "/CN=localhost", cwd=directory)
    (directory / "server.ext").write_text(_EXT)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "30", "-extfile", "server.ext",
             cwd=directory)
    return files


def server_context(files: TLSFiles, alpn: list[str] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(files.cert, files.key)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def client_context(files: TLSFiles) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(files.ca))
