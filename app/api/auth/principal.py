"""Who is calling, once their credentials are checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Via = Literal["api_key", "client_token", "jwt", "stream_token", "open"]


@dataclass(slots=True, frozen=True)
class Principal:
    """A caller: always a tenant; an end user also has a ``subject`` (the app's user id), the
    ``agents`` it may start (None: every agent) and the ``threads`` it may use (None: any of
    its own). A stream token's caller may read one run (or thread), ``run_id``."""

    tenant: str
    subject: str | None = None
    agents: frozenset[str] | None = None
    threads: frozenset[str] | None = None
    run_id: str | None = None
    via: Via = "api_key"
    streams_of: str | None = None
    """A stream token's: the end user its run (or thread) is of, whose open streams its own
    count with (None: the tenant's run)."""

    def stream_holder(self) -> tuple[str, str] | None:
        """Whose open streams this caller's count with (``app.delivery.stream_holds``): an
        end user's, and a stream token's for that user's run or thread; None for the
        tenant's key and a token for the tenant's own run (the tenant's to hand out)."""
        user = self.subject if self.subject is not None else self.streams_of
        return None if user is None else (self.tenant, user)

    @property
    def end_user(self) -> bool:
        """An end user (a client token or an identity provider's JWT), not the tenant's key."""
        return self.subject is not None

    def sees(self, tenant: str, owner: str | None, thread_id: str | None) -> bool:
        """Whether a run or thread of ``tenant`` owned by ``owner`` (a thread, or a run of
        the thread ``thread_id``) is this caller's: the tenant's key sees every one of its
        tenant; an end user only its own, and of those only its ``threads`` when it has
        such a grant."""
        if tenant != self.tenant or (self.subject is not None and owner != self.subject):
            return False
        return self.threads is None or thread_id in self.threads
