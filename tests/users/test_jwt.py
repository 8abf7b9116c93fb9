"""An identity provider's JWTs as end users' credentials: checked against a key set (JWKS)
served by a local HTTP server, rotated while the service runs, or a shared secret; every
kind of bad token is a 401. And the service's own client tokens refused when expired or
forged. On both backends."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import jwt
import pytest
import redis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.api.auth.client_tokens import AUDIENCE, ISSUER, ClientTokens
from app.process.main import create_app
from app.store import make_backend
from app.store.memory.backend import MemoryBackend
from tests.api.conftest import make_settings
from tests.control.conftest import CommandProvider
from tests.support.live_server import LiveServer

ISS, AUD = "https://idp.example", "agentloop-test"


class KeySet:
    """RSA keys by kid, and the JWKS the local identity provider serves."""

    def __init__(self) -> None:
        self.private: dict[str, rsa.RSAPrivateKey] = {}
        self.served: list[str] = []
        self.fetches = 0

    def add(self, kid: str) -> None:
        self.private[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid in self.served:
            jwk: dict[str, Any] = jwt.algorithms.RSAAlgorithm.to_jwk(
                self.private[kid].public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def sign(self, kid: str, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISS, "aud": AUD, "sub": "user-1", "iat": now, "exp": now + 300,
                "org": "t", **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None},
                          self.private[kid], algorithm="RS256", headers={"kid": kid})

    def public_pem(self, kid: str) -> bytes:
        return self.private[kid].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module")
def idp() -> Iterator[tuple[KeySet, str]]:
    keys = KeySet()
    keys.add("k1")
    keys.add("k2")
    keys.served = ["k1"]

    async def jwks(request: Any) -> JSONResponse:
        keys.fetches += 1
        return JSONResponse(keys.jwks())

    with LiveServer(Starlette(routes=[Route("/.well-known/jwks.json", jwks)])) as server:
        yield keys, f"{server.url}/.well-known/jwks.json"


@asynccontextmanager
async def serve(kind: str, redis_url: str | None, **settings: Any) -> AsyncIterator[str]:
    provider = CommandProvider()
    store: Any = make_backend(redis_url, lease=5.0) if kind == "redis" else MemoryBackend()
    app = create_app(make_settings(api_keys="key-t:t", **settings), backend=store,
                     resolve_provider=lambda spec: (provider, spec.split(":", 1)[-1]))
    with LiveServer(app) as server:
        yield server.url


@pytest.fixture(params=["memory", "redis"])
def kind(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "memory":
        return "memory", None
    url = request.getfixturevalue("redis_server_url")
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return "redis", url


async def status(url: str, token: str, path: str = "/runs") -> int:
    async with httpx.AsyncClient(base_url=url) as client:
        return (await client.get(path, headers={"Authorization": f"Bearer {token}"})
                ).status_code


async def test_jwts_against_a_rotating_key_set(idp: tuple[KeySet, str],
                                               kind: tuple[str, str | None]) -> None:
    keys, jwks_url = idp
    keys.served = ["k1"]
    async with serve(*kind, jwt_jwks_url=jwks_url, jwt_issuer=ISS, jwt_audience=AUD,
                     jwt_tenant_claim="org", jwt_jwks_refetch_seconds=0) as url:
        good = keys.sign("k1")
        assert await status(url, good) == 200
        async with httpx.AsyncClient(base_url=url) as client:
            mine = await client.post("/threads", json={}, headers={
                "Authorization": f"Bearer {good}"})
            assert mine.status_code == 201
            thread = mine.json()["id"]
            # the tenant's key sees it; the JWT's user owns it
            listed = (await client.get("/threads", headers={"Authorization": "Bearer key-t"})
                      ).json()["threads"]
            assert [t["id"] for t in listed] == [thread]
            other_user = keys.sign("k1", sub="user-2")
            assert (await client.get(f"/threads/{thread}", headers={
                "Authorization": f"Bearer {other_user}"})).status_code == 404
        keys.served = ["k2"]  # the provider rotates its key
        assert await status(url, keys.sign("k2")) == 200  # an unknown kid: fetched again
        assert await status(url, good) == 401  # the retired key no longer checks
        now = int(time.time())
        rsa_public = keys.public_pem("k2")
        bad = {
            "expired": keys.sign("k2", iat=now - 600, exp=now - 300),
            "not yet valid": keys.sign("k2", nbf=now + 300),
            "wrong issuer": keys.sign("k2", iss="https://evil.example"),
            "wrong audience": keys.sign("k2", aud="someone-else"),
            "no tenant claim": keys.sign("k2", org=None),
            "alg none": jwt.encode({"sub": "x", "iss": ISS, "aud": AUD, "exp": now + 60,
                                    "org": "t"}, None, algorithm="none",
                                   headers={"kid": "k2"}),
            "HS256 under the RSA public key": _hs256_with(rsa_public, kid="k2", iss=ISS,
                                                          aud=AUD, exp=now + 60),
            "bad signature": keys.sign("k2")[:-6] + "AAAAAA",
            "unknown kid": jwt.encode({"sub": "x", "iss": ISS, "aud": AUD, "exp": now + 60,
                                       "org": "t"}, keys.private["k2"], algorithm="RS256",
                                      headers={"kid": "k9"}),
        }
        fetches = keys.fetches
        for why, token in bad.items():
            assert await status(url, token) == 401, why
        assert keys.fetches <= fetches + 1  # one unknown kid: one fetch, not one per token


def _hs256_with(secret: bytes, kid: str, **claims: Any) -> str:
    """The algorithm-confusion attack: HMAC keyed with the provider's public key."""
    import base64
    import hashlib
    import hmac
    import json

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64(json.dumps({"sub": "attacker", "org": "t", **claims}).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


async def test_jwts_under_a_shared_secret(kind: tuple[str, str | None]) -> None:
    secret = "s" * 32
    async with serve(*kind, jwt_secret=secret, jwt_tenant="t") as url:
        now = int(time.time())
        good = jwt.encode({"sub": "u", "exp": now + 60, "agents": ["x"]}, secret, "HS256")
        assert await status(url, good) == 200
        forged = jwt.encode({"sub": "u", "exp": now + 60}, "t" * 32, "HS256")
        assert await status(url, forged) == 401
        no_exp = jwt.encode({"sub": "u"}, secret, "HS256")
        assert await status(url, no_exp) == 401
        bad_agents = jwt.encode({"sub": "u", "exp": now + 60, "agents": "x"}, secret, "HS256")
        assert await status(url, bad_agents) == 401
        assert await status(url, "key-t") == 200  # API keys keep working


def test_client_tokens_expire_and_cannot_be_forged() -> None:
    tokens = ClientTokens(b"k" * 32)
    token, _ = tokens.mint(tenant="t", subject="s", agents=["a"], threads=None, ttl=60)
    who = tokens.verify(token)
    assert who is not None and (who.tenant, who.subject, who.agents) == ("t", "s",
                                                                       frozenset({"a"}))
    old, _ = tokens.mint(tenant="t", subject="s", agents=None, threads=None, ttl=60,
                         now=time.time() - 120)
    assert tokens.verify(old) is None
    assert ClientTokens(b"x" * 32).verify(token) is None
    other_aud = jwt.encode({"iss": ISSUER, "aud": "elsewhere", "sub": "s", "tenant": "t",
                            "iat": 1, "exp": int(time.time()) + 60}, b"k" * 32, "HS256")
    assert tokens.verify(other_aud) is None
    assert AUDIENCE == "agentloop:client"
