"""A process of the service: the ``agentloop`` command (``cli``), the ASGI app and its
lifespan (``main``), the shared resources (``services``, ``setup``), health checks
(``liveness``)."""
