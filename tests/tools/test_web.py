"""http_fetch against a real local server: barred addresses refused, every redirect hop checked."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from providers import safe_fetch
from providers.safe_fetch import forbidden_reason
from tests.tools.conftest import call, text
from tool_registry.builtin.web import http_fetch

PAGE = (b"<html><head><title>Hello</title><script>var secret=1</script></head>"
        b"<body><h1>Public page</h1><p>Readable &amp; fine.</p></body></html>")


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/to/"):
            self.send_response(302)
            self.send_header("Location", self.path[len("/to/"):])
            self.end_headers()
            return
        self.server.hosts.append(self.headers.get("Host"))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.hosts = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def public_test_host(monkeypatch):
    """``public.test`` resolves to 127.0.0.1, and only that exact address counts as public:
    the test server stands in for a public site; everything else keeps the real check."""
    real_resolve, real_reason = safe_fetch.resolve_host, safe_fetch.forbidden_reason

    async def resolve(host: str, port: int):
        return [ipaddress.ip_address("127.0.0.1")] if host == "public.test" else (
            await real_resolve(host, port))

    def reason(ip, allow_private):
        return None if str(ip) == "127.0.0.1" else real_reason(ip, allow_private)

    monkeypatch.setattr(safe_fetch, "resolve_host", resolve)
    monkeypatch.setattr(safe_fetch, "forbidden_reason", reason)


@pytest.mark.parametrize("url", ["http://127.0.0.1/", "http://[::1]/", "http://169.254.169.254/",
                                 "http://10.0.0.1/", "http://[fd00:ec2::254]/", "http://0.0.0.0/",
                                 "http://[::ffff:127.0.0.1]/", "http://224.0.0.1/",
                                 "http://localhost/", "file:///etc/passwd", "ftp://example.com/"])
async def test_barred_addresses_are_refused(url, ctx, configure):
    result = await call(http_fetch, {"url": url}, ctx)
    assert result.is_error
    assert "refused" in text(result) or "only http and https" in text(result)


async def test_public_page_is_fetched_with_the_original_host(server, public_test_host, ctx):
    port = server.server_address[1]
    result = await call(http_fetch, {"url": f"http://public.test:{port}/page"}, ctx)
    out = text(result)
    assert not result.is_error, out
    assert "# Hello" in out and "Public page" in out and "Readable & fine." in out
    assert "secret" not in out
    assert server.hosts == [f"public.test:{port}"]


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/",
                                    "http://127.0.0.2/", "http://[::1]/", "http://10.0.0.1/",
                                    "http://[::ffff:169.254.169.254]/"])
async def test_every_redirect_hop_is_checked(target, server, public_test_host, ctx, configure):
    port = server.server_address[1]
    result = await call(http_fetch, {"url": f"http://public.test:{port}/to/{target}"}, ctx)
    assert result.is_error and "refused" in text(result), text(result)
    assert server.hosts == []  # the first hop redirected; nothing else was served


async def test_redirect_to_a_checked_host_is_followed(server, public_test_host, ctx):
    port = server.server_address[1]
    url = f"http://public.test:{port}/to/http://public.test:{port}/final"
    result = await call(http_fetch, {"url": url}, ctx)
    assert "URL: http://public.test" in text(result) and "/final" in text(result)


async def test_metadata_stays_refused_when_private_is_allowed(server, ctx, configure):
    configure(fetch_allow_private=True)
    port = server.server_address[1]
    fine = await call(http_fetch, {"url": f"http://127.0.0.1:{port}/"}, ctx)
    assert "Public page" in text(fine)
    hop = await call(http_fetch, {"url": f"http://127.0.0.1:{port}/to/http://169.254.169.254/"},
                     ctx)
    assert hop.is_error and "metadata" in text(hop)


async def test_body_size_is_capped(server, ctx, configure):
    configure(fetch_allow_private=True, fetch_max_bytes=50)
    port = server.server_address[1]
    result = await call(http_fetch, {"url": f"http://127.0.0.1:{port}/"}, ctx)
    assert "[body cut at 50 bytes]" in text(result)


def test_forbidden_reason_covers_the_ranges():
    for address in ("127.0.0.1", "::1", "169.254.169.254", "fd00:ec2::254", "10.0.0.1",
                    "192.168.1.1", "172.16.0.1", "0.0.0.0", "::", "224.0.0.1", "ff02::1",
                    "fe80::1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "100.64.0.1"):
        assert forbidden_reason(ipaddress.ip_address(address), False), address
    assert forbidden_reason(ipaddress.ip_address("93.184.216.34"), False) is None


TEREDO_TO_10_0_0_1 = "2001:0:4136:e378:8000:63bf:f5ff:fffe"  # client bits are 10.0.0.1 inverted
SIXTOFOUR = {"2002:7f00:1::": "127.0.0.1", "2002:a00:1::": "10.0.0.1",
             "2002:c0a8:101::1": "192.168.1.1", "2002:a9fe:a9fe::": "169.254.169.254"}


@pytest.mark.parametrize("address", [*SIXTOFOUR, TEREDO_TO_10_0_0_1])
async def test_6to4_and_teredo_embedding_private_ipv4_are_refused(address, server,
                                                                  public_test_host, ctx):
    direct = await call(http_fetch, {"url": f"http://[{address}]/"}, ctx)
    assert direct.is_error and "refused" in text(direct) and "embedded" in text(direct), (
        text(direct))
    port = server.server_address[1]
    hop = await call(http_fetch, {"url": f"http://public.test:{port}/to/http://[{address}]/"},
                     ctx)
    assert hop.is_error and "embedded" in text(hop) and server.hosts == []


def test_embedded_metadata_is_refused_even_when_private_is_allowed():
    teredo_to_metadata = ipaddress.IPv6Address(
        (0x20010000 << 96) | (int(ipaddress.IPv4Address("169.254.169.254")) ^ 0xFFFFFFFF))
    for ip in (ipaddress.ip_address("2002:a9fe:a9fe::"), teredo_to_metadata):
        assert "metadata" in (forbidden_reason(ip, True) or ""), ip
    assert forbidden_reason(ipaddress.ip_address("2002:a00:1::"), True) is None
    assert forbidden_reason(ipaddress.ip_address("2002:808:808::"), False) is None  # 8.8.8.8
    assert forbidden_reason(ipaddress.ip_address("64:ff9b:1::a00:1"), False)


@pytest.mark.parametrize("page", ["<a " * 700_000, "<" * 2_000_000, "</" * 1_000_000,
                                  "<!" * 1_000_000, "&" * 2_000_000])
def test_html_to_text_is_linear_on_hostile_pages(page):
    from tool_registry.builtin._html import html_to_text

    started = time.monotonic()
    html_to_text(page)
    assert time.monotonic() - started < 10.0  # html.parser took minutes on the first one


def test_html_to_text_keeps_the_readable_parts():
    from tool_registry.builtin._html import html_to_text

    page = ("<html><head><title>T &amp; t</title><style>p{}</style></head><body>"
            "<script>if (a<b) {x='</div>'}</script><h1>Head</h1><!-- no <p>hidden</p> -->"
            "<p>One&nbsp;two</p><SCRIPT type=x>bad</SCRIPT><ul><li>a</li><li>b</li></ul>"
            "tail</body></html>")
    assert html_to_text(page) == "# T & t\n\nHead\n\nOne\xa0two\n\na\n\nb\n\ntail"
