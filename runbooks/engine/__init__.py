"""The run engine: runs, their states and the one table of transitions, gates, approvals,
leases, and the interfaces the rest plugs into.

What belongs here is what every kind of run shares, whatever it changes on a cluster:
``runs`` (the data and the transition table), ``transitioning`` (the one writer),
``gating`` and ``approving`` (requests and who may decide them), ``leasing`` (one worker
per run), ``driving`` (calling the step of each working state), ``requesting`` (a canary
request checked before it is stored), ``refusals`` (every sentence of a refusal),
``recording`` (how a step reports checks and results), ``commands`` (:class:`Engine`,
what front ends call). ``store`` and ``steps`` are the protocols that ``bot/`` (Redis)
and ``runbooks/daemonset`` (the cluster steps) implement; ``clocks`` the time source.

Nothing here imports :mod:`runbooks.daemonset` (an import-linter contract): steps are
handed to the :class:`~runbooks.engine.commands.Engine`, not imported by it.
"""
