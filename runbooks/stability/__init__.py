"""Stability after an upgrade: the events that matter, collected while the cluster has them,
and the 24 h / 48 h reports judged from them and from the cluster's state.

``tallying`` says what matters and keeps the bounded tally (pure, the collector's hot
path); ``collecting`` applies watch events to it with deduplication and drives the
list/watch/resume loop over the cluster adapter and a :class:`CollectionStore` (the bot's
Redis store); ``reading`` reads the cluster's state now; ``judging`` holds the verdict
rules (pure); ``reports`` the report model every surface renders; ``reporting`` builds it.
No Slack, no Redis, no scheduling here: ``bot/`` runs the collectors and the scheduler.
"""
