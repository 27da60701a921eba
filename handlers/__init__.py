"""The verbs: parse the words, authorize, call a runbook or the run engine, and return a
surface-neutral reply. Shared by the shell, the console and Slack; never imports
``slack_*`` or ``redis``, never formats a chat message.

- ``verbs``: the one table of verbs, read by the chat router and the shell's argparse;
  ``routing``: the row type (:class:`~handlers.routing.Command`), the router and ``help``.
- ``runs`` (the run verbs), ``inventory``, ``verify``, ``report``: a row each, next to
  its parser and handler.
- ``clicks``: Approve, Reject and Request rollback; ``run_views``: runs as messages and
  the buttons on them; ``replies``: the surface-neutral reply model.
- ``messages``: every sentence the bot says of its own, for every surface.
- ``access``: user groups; ``arguments`` and ``decoding``: the words of a command.
"""
