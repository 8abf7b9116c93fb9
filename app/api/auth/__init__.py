"""Who is calling (API.md "Auth", and end users): the tenant's API keys, stream tokens, client
tokens the app's backend mints, and an identity provider's JWTs (``authenticator``)."""

from app.api.auth.authenticator import DEFAULT_TENANT, Authenticator
from app.api.auth.principal import Principal

__all__ = ["DEFAULT_TENANT", "Authenticator", "Principal"]
