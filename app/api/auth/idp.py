"""An identity provider's JWTs as end-user credentials (Auth0, Clerk, Supabase, Cognito…).

The app's page sends the token its identity provider gave the user; the service checks it
against the provider's key set (``AGENTLOOP_JWT_JWKS_URL``) or a shared secret
(``AGENTLOOP_JWT_SECRET``), its issuer and audience when configured, and its expiry (30 s of
clock skew allowed). The subject is ``sub``; the tenant is ``AGENTLOOP_JWT_TENANT`` or the claim
``AGENTLOOP_JWT_TENANT_CLAIM`` names; the agents it may start are the claim
``AGENTLOOP_JWT_AGENTS_CLAIM`` names (absent: every agent). Each key signs only with its own
algorithms (an RSA key never checks an HS256 token, ``none`` never passes). The key set is
cached and fetched again on a ``kid`` it does not hold (at most once a second), and every
ten minutes, so a rotation at the provider needs no restart here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from app.api.auth.principal import Principal

log = logging.getLogger(__name__)
LEEWAY = 30.0
"""Seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
KEY_ALGORITHMS = {"RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
                  "EC": ("ES256", "ES384", "ES512", "ES256K"), "OKP": ("EdDSA",)}
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")


class InvalidJwt(Exception):
    """Why a JWT was refused (the 401's message)."""


@dataclass(slots=True, kw_only=True)
class IdpSettings:
    """Where the keys are and what the claims mean (``AGENTLOOP_JWT_*``)."""

    jwks_url: str | None = None
    secret: str | None = None
    issuer: str | None = None
    audience: str | None = None
    tenant: str = "default"
    tenant_claim: str | None = None
    agents_claim: str = "agents"
    refresh_every: float = 600.0
    """Seconds a fetched key set is trusted before it is fetched again."""
    refetch_after: float = 1.0
    """Least seconds between two fetches for an unknown ``kid``."""

    @property
    def configured(self) -> bool:
        """Whether JWTs are accepted at all."""
        return bool(self.jwks_url or self.secret)


class IdentityProvider:
    """Verifies JWTs per ``IdpSettings`` (see the module docstring)."""

    def __init__(self, settings: IdpSettings, client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self._client = client
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched = 0.0
        self._lock = asyncio.Lock()

    async def verify(self, token: str) -> Principal:
        """The end user of a valid token; ``InvalidJwt`` saying why not."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidJwt("malformed JWT") from exc
        algorithm = str(header.get("alg", ""))
        key, allowed = await self._key_for(header)
        if algorithm not in allowed:
            raise InvalidJwt(f"algorithm {algorithm!r} is not accepted for this key")
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm], leeway=LEEWAY,
                                audience=self.settings.audience, issuer=self.settings.issuer,
                                options={"require": ["exp", "sub"],
                                         "verify_aud": self.settings.audience is not None})
        except jwt.PyJWTError as exc:
            raise InvalidJwt(str(exc) or type(exc).__name__) from exc
        return self._principal(claims)

    def _principal(self, claims: dict[str, Any]) -> Principal:
        tenant = self.settings.tenant
        if self.settings.tenant_claim:
            value = claims.get(self.settings.tenant_claim)
            if not isinstance(value, str) or not value:
                raise InvalidJwt(f"the token has no {self.settings.tenant_claim!r} claim")
            tenant = value
        agents = claims.get(self.settings.agents_claim)
        if agents is not None and not (isinstance(agents, list)
                                       and all(isinstance(a, str) for a in agents)):
            raise InvalidJwt(f"the {self.settings.agents_claim!r} claim is not a list of names")
        return Principal(tenant=tenant, subject=str(claims["sub"]), via="jwt",
                         agents=None if agents is None else frozenset(agents))

    async def _key_for(self, header: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
        """The key that checks this token, and the algorithms it may sign with."""
        if self.settings.secret is not None and not self.settings.jwks_url:
            return self.settings.secret, HMAC_ALGORITHMS
        kid = str(header.get("kid", ""))
        key = await self._jwk(kid)
        if key is None:
            raise InvalidJwt(f"no key {kid!r} in the identity provider's key set")
        return key.key, KEY_ALGORITHMS.get(str(key.key_type), ())

    async def _jwk(self, kid: str) -> jwt.PyJWK | None:
        now = time.monotonic()
        stale = now - self._fetched > self.settings.refresh_every
        if kid in self._keys and not stale:
            return self._keys[kid]
        async with self._lock:
            now = time.monotonic()
            wanted = kid not in self._keys or now - self._fetched > self.settings.refresh_every
            if wanted and now - self._fetched >= self.settings.refetch_after:
                await self._fetch()
        return self._keys.get(kid)

    async def _fetch(self) -> None:
        assert self.settings.jwks_url is not None
        self._fetched = time.monotonic()
        try:
            if self._client is None:
                self._client = httpx.AsyncClient(timeout=httpx.Timeout(5.0))
            resp = await self._client.get(self.settings.jwks_url)
            resp.raise_for_status()
            found = {}
            for entry in resp.json().get("keys", []):
                try:
                    key = jwt.PyJWK(entry)
                except jwt.PyJWTError:
                    continue  # a key type or use this service cannot check: left out
                found[str(entry.get("kid", ""))] = key
            self._keys = found
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.warning("could not fetch the identity provider's keys from %s: %s",
                        self.settings.jwks_url, exc)

    async def close(self) -> None:
        """Release the key set's HTTP client."""
        if self._client is not None:
            await self._client.aclose()
