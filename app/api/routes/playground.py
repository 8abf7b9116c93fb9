"""The playground: ``GET /`` serves one page, ``GET /static/<file>`` its ES modules and CSS.

No build step: the files in ``app/static/`` ship as package data and go out as they are. Every
response carries a strict same-origin Content-Security-Policy (no inline script or style, no
other origin, no framing), so the page can do nothing but call this service. The routes take no
credentials: the page asks for an API key itself when the API answers 401. Off with
``AGENTLOOP_PLAYGROUND=false`` (the routes are then not mounted at all: 404).
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Response

from app.api.errors import ApiError

router = APIRouter(tags=["playground"], include_in_schema=False)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
"""Same origin only: EventSource and fetch fall under ``connect-src``."""
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml"}


def _static_files() -> dict[str, bytes]:
    """Every servable file of ``app/static`` by name, read once."""
    folder = resources.files("app") / "static"
    return {entry.name: entry.read_bytes() for entry in folder.iterdir()
            if entry.is_file() and any(entry.name.endswith(s) for s in TYPES)}


FILES = _static_files()


def _send(name: str) -> Response:
    body = FILES.get(name)
    if body is None:
        raise ApiError(404, "not_found", f"no static file {name}")
    media = next(t for suffix, t in TYPES.items() if name.endswith(suffix))
    return Response(body, media_type=media, headers={
        "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"})


@router.get("/")
async def playground() -> Response:
    """The playground page."""
    return _send("index.html")


@router.get("/static/{name}")
async def static_file(name: str) -> Response:
    """One of the page's modules, its stylesheet or icon."""
    return _send(name)
