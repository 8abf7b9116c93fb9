"""The app's own backend for the AG-UI page (FastAPI): it serves the built page and mints an
end user's token with the API key it alone holds; the page never sees the key.

    AGENTLOOP_URL=http://127.0.0.1:8000 AGENTLOOP_API_KEY=... AGENTLOOP_AGENT=assistant \\
        uvicorn token_server:app --port 3000       # after `npm run build`
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles


def create_app(api: str, key: str, agent: str, dist: Path) -> FastAPI:
    """The page (``dist``) and ``POST /api/token``."""
    app = FastAPI()

    @app.post("/api/token")
    async def token() -> Any:
        user = "demo-user"  # your session's user id: the token is this user's only
        async with httpx.AsyncClient() as client:
            resp = await client.post(f"{api}/client_tokens", json={
                "subject": user, "agents": [agent], "ttl": 600},
                headers={"Authorization": f"Bearer {key}"})
        resp.raise_for_status()
        return resp.json()  # {token, expires_at, ...}: the page renews it before it expires

    app.mount("/", StaticFiles(directory=dist, html=True))
    return app


if "AGENTLOOP_API_KEY" in os.environ:
    app = create_app(os.environ.get("AGENTLOOP_URL", "http://127.0.0.1:8000"),
                     os.environ["AGENTLOOP_API_KEY"],
                     os.environ.get("AGENTLOOP_AGENT", "assistant"),
                     Path(os.environ.get("DIST", Path(__file__).parent / "dist")))
