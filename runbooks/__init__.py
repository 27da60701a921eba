"""The domain, Slack- and Redis-free: what the bot knows and does about a cluster.

- ``engine/``: the run engine: the state machine and its one transition table, gates,
  approvals, leases, the store protocol (``bot/`` supplies Redis), and the ``Steps``
  protocol that cluster steps implement.
- ``daemonset/``: the cluster steps of a plugin DaemonSet (canary, verify, promote,
  rollback) and the checks verify makes; handed to the engine, never imported by it.
- ``cluster/``: the adapter over the official client (the only code that imports
  ``kubernetes``).
- ``inventory/``: what a cluster runs and what to fix before an upgrade.
- ``stability/``: the events that matter after an upgrade and the 24 h / 48 h reports.
- ``policy``: the validated policy file; ``errors``: our error hierarchy for cluster
  calls; ``validation``: checks of what people type.

Runbooks take a cluster adapter and return pydantic models; they never format a chat
message, import ``slack_*`` or ``redis``, or read the environment.
"""
