"""Claiming and driving runs: the worker (``worker``), the runner of one claimed run
(``runner``) and its event sink (``sink``), resumes after a lost worker (``attempts``), parked
runs (``parking``, ``expiry``), a thread's runs (``thread_runs``), workspace clean-up
(``janitor``)."""
