"""The Redis backend (``RedisBackend``), plain or Cluster: its parts over one base (``core``),
all key names in ``keys``, every Lua script in ``scripts`` and ``thread_scripts``."""
