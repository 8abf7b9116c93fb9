"""The toolkits' dialects: projections of a run's stored event log for frontends built on the
Vercel AI SDK (``ai_sdk``) and AG-UI (``ag_ui``). Each dialect only translates stored events,
like a provider adapter in reverse; none runs a loop of its own, so a run started through one
is watched through the native stream or the other dialect alike (``tail`` reads the log).
"""
