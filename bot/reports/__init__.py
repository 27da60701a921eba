"""The stability reports at work: the scheduler (derived from the runs, one fenced leader),
the event collectors that watch a monitoring run's cluster, and posting each report once.

``wiring`` puts the three together for one process (built by :mod:`bot.runtime`); the
verdicts and the report model are domain logic in :mod:`runbooks.stability`.
"""
