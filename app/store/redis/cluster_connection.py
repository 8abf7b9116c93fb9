"""Cluster node connections that another task may close mid-command.

redis-py's cluster client answers ``CLUSTERDOWN`` or a slot without a master (both happen in a
failover) by closing every node's connections, in-use ones included. A command of another
task that is just then sending on one of them does not fail as a connection error: its write
finds the stream writer gone (``AttributeError``) or, on uvloop, the transport closed
(``RuntimeError``). Neither is an error the cluster client retries, and neither maps to the
backend's 503, so a request for a run on a healthy master answered 500. Here both become the
connection error they are: the cluster client re-reads the slot map and retries, and what still
fails is a ``BackendError`` (503 with ``Retry-After``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError


class ClusterConnection(Connection):
    """A node connection whose send, when another task has closed it, is a connection error."""

    async def send_packed_command(self, command: bytes | str | Iterable[bytes],
                                  check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)
        except BaseException as exc:
            # redis-py closes the connection on errors while writing, not on those of the
            # connect and handshake it makes first: a node met mid-failover left the socket
            # open, and the cluster client then dropped the connection with the node.
            with contextlib.suppress(Exception):
                await self.disconnect(nowait=True)
            if isinstance(exc, AttributeError | RuntimeError):
                # the writer another task closed: nothing usable is lost by calling it so
                raise RedisConnectionError(
                    f"connection closed by another task while sending: {exc}") from exc
            raise


class ClusterSSLConnection(ClusterConnection, SSLConnection):
    """:class:`ClusterConnection` over TLS (``rediss://``)."""


def use_cluster_connections(client: RedisCluster) -> None:
    """Make every node connection of ``client`` (the seeds, the nodes discovered later and the
    per-master clients built from them) a :class:`ClusterConnection`. ``RedisCluster`` takes no
    connection class of its own; its nodes take theirs from ``connection_kwargs``."""
    plain = client.connection_kwargs.get("connection_class", Connection)
    cls = ClusterSSLConnection if issubclass(plain, SSLConnection) else ClusterConnection
    client.connection_kwargs["connection_class"] = cls
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = cls
