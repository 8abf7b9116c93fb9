"""The in-process backend (``MemoryBackend``): its parts over one state (``core``)."""
