"""The domain, Slack- and Redis-free: what the bot knows and does about a cluster.

``cluster`` is the adapter over the official client (the only code that imports
``kubernetes``); ``errors`` our error hierarchy; ``inventory`` the inventory runbook;
``policy`` the validated policy file; ``validation`` checks what people type. The cluster
steps of a run (``daemonset_steps``) live in modules named for what they do:
``preflight``, ``canarying``, ``verifying`` (judged by ``checks`` and ``events``, with
``smoke_testing``), ``promoting``, ``rolling_back``, ``following``, ``patching``, over
``observing`` (reads) and ``baselines`` (what verify compares with). Runbooks take a cluster adapter and return pydantic
models; they never format a chat message, import ``slack_*`` or ``redis``, or read the
environment.
"""
