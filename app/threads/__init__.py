"""Threads: conversations that continue across runs (issue 12).

A thread owns a history; a run of the thread starts from it and what the run adds becomes part
of it when the run ends. At most one run of a thread is active; a message posted while one is
follows the post's ``multitask`` policy. ``model`` holds the records, ``store`` the backend
contract (``app/backends/memory_threads.py``, ``redis_threads.py``), ``service`` the operations
the routes call, ``stream`` the thread's one SSE stream, ``conversation`` the in-process helper.
"""
