"""The cluster steps of a plugin DaemonSet, and the checks that verify it.

:class:`~runbooks.daemonset.steps.DaemonSetSteps` implements the engine's
:class:`~runbooks.engine.steps.Steps`; each step lives in a module named for what it does:
``preflight`` (pre-checks and the baseline), ``canarying``, ``verifying`` (judged by
``checks`` and ``events``, with ``smoke_testing``), ``promoting``, ``rolling_back``,
``following`` (a rollout node by node), over ``patching`` (the only mutations),
``observing`` (reads) and ``baselines`` (what verify compares with). A new check goes
into ``checks`` (pure verdicts) and is called from ``verifying``.
"""
