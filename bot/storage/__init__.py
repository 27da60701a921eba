"""Redis: where runs, locks, leases, audit trails, idempotency claims, event tallies and
report records live.

``layout`` declares every key (one prefix) and the Lua scripts that write them atomically;
``redis_store`` is the only module that imports ``redis`` and implements the engine's
:class:`~runbooks.engine.store.RunStore`, ``parts`` the large progress values it keeps apart
from a run (sent only when their digests differ); ``local`` starts the shell's persistent
per-user server when ``REDIS_URL`` is unset; ``embedded`` a throwaway server for the demo
and the tests.
"""
