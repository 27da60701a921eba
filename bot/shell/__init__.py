"""``upgradebot <verb>``: the shell front end for people and CI pipelines.

``cli`` builds argparse from the verb table of :mod:`handlers.verbs` (plus the process
verbs ``serve``, ``console``, ``demo``) and maps errors to exit codes; ``output`` prints
a verb's reply as text or its model as JSON, and a run's progress line by line.
"""
