"""Server-sent events out: a run's log read page by page (``log_pages``), its framing
(``frames``), live taps and in-place sends (``tap``, ``direct``), the response (``sse``), a
thread's stream (``thread_stream``), send deadlines and draining on shutdown."""
