"""``GET /`` and ``/static/*``: the playground's files as shipped, under a strict CSP."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from app.api.routes.playground import CSP
from app.engine.events import Event
from tests.api.conftest import serve

STATIC = Path(__file__).parents[2] / "app" / "static"


async def test_the_page_and_its_modules_are_served_with_a_strict_csp() -> None:
    async with serve(api_keys="key-a:alpha") as api:  # no key needed for the page itself
        page = await api.client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-security-policy"] == CSP
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.content == (STATIC / "index.html").read_bytes()
        for name in ("agentloop.js", "app.js", "transcript.js", "panels.js", "dom.js", "asks.js",
                     "access.js"):
            module = await api.client.get(f"/static/{name}")
            assert module.status_code == 200
            assert module.headers["content-type"] == "text/javascript; charset=utf-8"
            assert module.content == (STATIC / name).read_bytes()
        css = await api.client.get("/static/playground.css")
        assert css.headers["content-type"].startswith("text/css")
        missing = await api.client.get("/static/nope.js")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        escape = await api.client.get("/static/..%2Fconfig.py")
        assert escape.status_code == 404
        schema = (await api.client.get("/openapi.json",
                                       headers={"Authorization": "Bearer key-a"})).json()
        assert "/" not in schema["paths"] and "/static/{name}" not in schema["paths"]


async def test_every_script_and_style_the_page_names_is_same_origin() -> None:
    html = (STATIC / "index.html").read_text()
    assert "<script>" not in html and "style=" not in html and "http" not in html
    for js in STATIC.glob("*.js"):
        text = js.read_text()
        assert "innerHTML" not in text and "eval(" not in text, js.name


async def test_the_playground_can_be_turned_off() -> None:
    async with serve(playground=False) as api:
        page = await api.client.get("/")
        assert page.status_code == 404
        assert (await api.client.get("/static/app.js")).status_code == 404


def test_the_client_listens_to_every_event_type() -> None:
    """EventSource delivers a named event only to a listener of that name: a type missing from
    agentloop.js's list would never reach the page."""
    source = (STATIC / "agentloop.js").read_text()
    listed = re.search(r"EVENT_TYPES = \[(.*?)\];", source, re.S)
    assert listed is not None
    names = set(re.findall(r"'(\w+)'", listed[1]))
    assert names == {cls.__dataclass_fields__["type"].default for cls in typing.get_args(Event)}
