"""The process wiring and the adapters: everything that runs, talks to Slack or Redis, or
reads the environment.

- ``runtime``: builds the run engine (the one place), the one cluster connector, the
  background run driver, the stability reports; ``settings``: the only reader of the
  environment; ``workers``: the bounded worker pools; ``console``: the chat in a terminal;
  ``text``: a reply as plain text (console and shell).
- ``shell/``: ``upgradebot <verb>`` (argparse built from the verb table) and its output.
- ``slack/``: ``upgradebot serve``: the Bolt app, the Web API, run threads, Block Kit,
  pacing, idempotency, HTTP probes and metrics.
- ``reports/``: the stability reports' scheduler, event collectors and posting.
- ``storage/``: Redis: the run store (the only ``redis`` importer), its key layout, the
  shell's local server and an embedded one for the demo and tests.
- ``demo/``: ``upgradebot demo``: the world (Redis, kubesim, the console) and the story.

Imports point one way: ``bot -> handlers -> runbooks``; nothing in ``handlers`` or
``runbooks`` imports from here.
"""
