"""The domain, Slack- and Redis-free: what the bot knows and does about a cluster.

``cluster`` is the adapter over the official client (the only code that imports
``kubernetes``); ``errors`` our error hierarchy; ``inventory`` the inventory runbook;
``policy`` the validated policy file. Runbooks take a cluster adapter and return pydantic
models; they never format a chat message, import ``slack_*`` or ``redis``, or read the
environment.
"""
