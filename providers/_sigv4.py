"""How Bedrock requests are authorised: a bearer API key, or AWS SigV4 through botocore.

``BearerAuth`` sends ``AWS_BEARER_TOKEN_BEDROCK`` as ``Authorization: Bearer``. ``SigV4Auth``
signs with botocore's ``SigV4Auth`` (service ``bedrock``) using credentials from botocore's
standard chain: static keys, a shared-config profile, container and instance roles. Both return
the headers to add; neither logs them. Resolving credentials may call a metadata endpoint, so it
runs in a worker thread; botocore caches and refreshes them in the session.

botocore is optional (the ``bedrock`` extra): without it, signing fails with
``MissingBotocore``, which the adapter reports as an ``error`` event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from botocore.session import Session

INSTALL_HINT = "install the `bedrock` extra (pip install 'agentloop[bedrock]')"
# environment variables → botocore config variables, for the session built from `env`
_CONFIG_VARS = {"AWS_PROFILE": "profile", "AWS_CONFIG_FILE": "config_file",
                "AWS_SHARED_CREDENTIALS_FILE": "credentials_file"}


class MissingBotocore(RuntimeError):
    """SigV4 signing was needed but botocore is not installed."""


class RequestAuth(Protocol):
    """Produces the authorisation headers for one request."""

    async def headers(self, method: str, url: str, body: bytes,
                      headers: Mapping[str, str]) -> dict[str, str]:
        """Headers to add (``Authorization``, ``X-Amz-Date`` …) for this exact request."""
        ...


class BearerAuth:
    """``Authorization: Bearer <AWS_BEARER_TOKEN_BEDROCK>``."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "BearerAuth(***)"

    async def headers(self, method: str, url: str, body: bytes,
                      headers: Mapping[str, str]) -> dict[str, str]:
        """The bearer header."""
        return {"authorization": f"Bearer {self._token}"}


class SigV4Auth:
    """SigV4 signatures for service ``bedrock`` in ``region``, credentials from ``env``."""

    def __init__(self, env: Mapping[str, str], region: str) -> None:
        self._env = {k: v for k, v in env.items() if k.startswith("AWS_")}
        self._region = region
        self._session: Session | None = None

    def __repr__(self) -> str:
        return f"SigV4Auth(region={self._region!r})"

    async def headers(self, method: str, url: str, body: bytes,
                      headers: Mapping[str, str]) -> dict[str, str]:
        """Sign the request; raises ``MissingBotocore`` or botocore's credential errors."""
        return await asyncio.to_thread(self._sign, method, url, body, dict(headers))

    def _sign(self, method: str, url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        try:
            from botocore.auth import SigV4Auth as BotoSigner
            from botocore.awsrequest import AWSRequest
        except ImportError as exc:
            raise MissingBotocore(f"Bedrock SigV4 signing needs botocore: {INSTALL_HINT}") from exc
        credentials = self._session_for_env().get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials found (env keys, AWS_PROFILE, container or "
                               "instance role), and AWS_BEARER_TOKEN_BEDROCK is not set")
        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        BotoSigner(credentials.get_frozen_credentials(), "bedrock", self._region).add_auth(request)
        return {k: v for k, v in request.headers.items() if k.lower() not in
                {h.lower() for h in headers}}

    def _session_for_env(self) -> Session:
        if self._session is None:
            import botocore.session

            session = botocore.session.Session()
            for var, name in _CONFIG_VARS.items():
                if self._env.get(var):
                    session.set_config_variable(name, self._env[var])
            key, secret = self._env.get("AWS_ACCESS_KEY_ID"), self._env.get("AWS_SECRET_ACCESS_KEY")
            if key and secret:
                session.set_credentials(key, secret, self._env.get("AWS_SESSION_TOKEN"))
            self._session = session
        return self._session
