"""Model requests without httpx's per-call preparation: what every call repeats, done once.

Every model call went through ``AsyncClient.build_request``, which parses the URL string,
normalises the call's headers and merges them with the client's, and folds in the client's
cookies; and httpx read every response's cookies through ``http.cookiejar`` (two compatibility
objects and a ``urllib`` request per response) although providers set none. Together ~45 µs
of CPU per model call, two calls per tool-using run (``bench/instructions.py``).

- ``PreparedPost``: one endpoint's POST with its URL parsed and its headers merged once; each
  call builds the request from those parts (the same headers in the same order, the same
  ``Host`` and ``Content-Length``, the same timeout as ``build_request`` gives). While the
  client holds a cookie (a provider, or a gateway in front of it, set one), calls go through
  ``build_request``, which sends it.
- ``ProviderClient``: httpx's ``AsyncClient`` whose cookie store reads a response only when it
  carries ``Set-Cookie`` (the only header the store reads: ``Set-Cookie2`` is off by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["PreparedPost", "ProviderClient"]


class _SetCookieOnly(httpx.Cookies):
    """A cookie store that skips responses without ``Set-Cookie``."""

    def extract_cookies(self, response: httpx.Response) -> None:
        """As httpx's, only when there is something to extract."""
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class ProviderClient(httpx.AsyncClient):
    """The providers' shared client (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._store = _SetCookieOnly(super().cookies)

    @property
    def cookies(self) -> httpx.Cookies:
        """The client's cookies (sent with every request, as httpx does)."""
        return self._store

    @cookies.setter
    def cookies(self, cookies: httpx._types.CookieTypes) -> None:
        self._store = _SetCookieOnly(cookies)


class PreparedPost:
    """POSTs to one URL with fixed headers and timeout (see the module docstring)."""

    __slots__ = ("_client", "_extensions", "_headers", "_raw", "_timeout", "_url")

    def __init__(self, client: httpx.AsyncClient, url: str, headers: Mapping[str, str],
                 timeout: httpx.Timeout | None) -> None:
        self._client = client
        self._url = httpx.URL(url)
        self._headers = dict(headers)
        self._timeout = timeout
        merged = httpx.Headers(client.headers)
        merged.update(self._headers)
        self._raw = merged.raw
        self._extensions = {"timeout": (timeout or client.timeout).as_dict()}

    def build(self, content: bytes) -> httpx.Request:
        """The request carrying ``content`` (a fresh object each call: httpx changes it)."""
        if self._client.cookies:
            return self._client.build_request(
                "POST", self._url, content=content, headers=self._headers,
                timeout=self._timeout or httpx.USE_CLIENT_DEFAULT)
        return httpx.Request("POST", self._url, headers=self._raw, content=content,
                             extensions=dict(self._extensions))
