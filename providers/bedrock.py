"""Amazon Bedrock ``ConverseStream`` adapter.

``POST {endpoint}/model/{url-encoded model id}/converse-stream``; the endpoint defaults to
``https://bedrock-runtime.{AWS_REGION}.amazonaws.com`` and is overridden by
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``. Authorisation (``providers._sigv4``): the Bedrock API key
``AWS_BEARER_TOKEN_BEDROCK`` when set, else SigV4 with botocore's credential chain.

The request body is built by ``providers._bedrock_wire`` (``parallel_tool_calls`` is not
supported by Converse and is ignored); the binary event stream is decoded by
``providers._bedrock_stream``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from urllib.parse import quote

import httpx
import orjson

from providers._bedrock_stream import BedrockDecoder
from providers._bedrock_wire import PROVIDER_NAME, build_body
from providers._http import RetryPolicy
from providers._sigv4 import BearerAuth, RequestAuth, SigV4Auth
from providers._stream_guard import guarded_stream
from providers.attachment_fetch import AttachmentFetcher
from providers.attachments import EVERYTHING, Accepts, inline_urls
from providers.base import ModelRequest
from providers.events import ProviderEvent
from providers.messages import Attachment

DEFAULT_REGION = "us-east-1"


class BedrockProvider:
    """Streams replies from Bedrock's Converse API (``name`` is ``"bedrock"``)."""

    name = PROVIDER_NAME
    accepts: Accepts = EVERYTHING
    """Images and every document type; URLs are fetched here (Converse takes bytes only)."""

    def __init__(self, *, client: httpx.AsyncClient, endpoint: str, auth: RequestAuth,
                 retry: RetryPolicy | None = None,
                 fetcher: AttachmentFetcher | None = None) -> None:
        self._client = client
        self._endpoint = endpoint.rstrip("/")
        self._auth = auth
        self._retry = retry or RetryPolicy()
        self._fetcher = fetcher or AttachmentFetcher()

    @classmethod
    def from_env(cls, *, client: httpx.AsyncClient, env: Mapping[str, str],
                 retry: RetryPolicy | None = None,
                 fetcher: AttachmentFetcher | None = None) -> BedrockProvider:
        """Region, endpoint and credentials from ``env`` (``AWS_*`` variables)."""
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        endpoint = (env.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
                    or f"https://bedrock-runtime.{region}.amazonaws.com")
        token = env.get("AWS_BEARER_TOKEN_BEDROCK")
        auth: RequestAuth = BearerAuth(token) if token else SigV4Auth(env, region)
        return cls(client=client, endpoint=endpoint, auth=auth, retry=retry, fetcher=fetcher)

    def __repr__(self) -> str:
        return f"BedrockProvider(endpoint={self._endpoint!r}, auth={self._auth!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the reply to ``request`` (see ``providers.base.Provider``)."""
        url = f"{self._endpoint}/model/{quote(request.model, safe='')}/converse-stream"

        async def build() -> httpx.Request:
            messages = await inline_urls(request.messages, self._fetcher.inline, _never)
            body = orjson.dumps(build_body(dataclasses.replace(request, messages=messages)))
            headers = {"content-type": "application/json",
                       "accept": "application/vnd.amazon.eventstream"}
            headers |= await self._auth.headers("POST", url, body, headers)
            return self._client.build_request("POST", url, content=body, headers=headers)

        return guarded_stream(label=self.name, model=request.model, client=self._client,
                              build=build, retry=self._retry, decoder=BedrockDecoder())


def _never(block: Attachment) -> bool:
    """No URL goes to Converse: each is fetched and sent as bytes."""
    return False
