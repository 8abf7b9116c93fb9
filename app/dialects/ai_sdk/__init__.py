"""The Vercel AI SDK dialect (``useChat``): the request (``request``, ``answers``), the
projection of a run's log as a UI message stream (``projector``) and the routes."""
