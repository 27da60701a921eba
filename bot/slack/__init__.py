"""The Slack surface (``upgradebot serve``): everything that imports ``slack_bolt`` or
``slack_sdk``.

``serve`` builds the service and runs it; ``app`` the Bolt app and its listeners (ack,
then a worker); ``web`` the Web API client and the user-group directory; ``threads`` a
run's root message and thread; ``blocks`` a reply as Block Kit within Slack's limits;
``pacing`` one message a second per channel; ``idempotency`` claims of deliveries;
``http`` the WSGI app with ``/slack/events`` and the probes; ``metrics`` Prometheus.
What the bot says is worded in :mod:`handlers.messages`, not here.
"""
