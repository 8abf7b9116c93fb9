"""The AG-UI dialect (``HttpAgent``): the request (``request``), the projection of a run's
log as AG-UI events (``projector``, ``wire``, ``messages``, ``takeover``) and the routes."""
