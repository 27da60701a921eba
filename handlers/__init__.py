"""One module per command verb: parse the words, authorize, call a runbook or the run
engine, and return a surface-neutral result. Shared by the shell and Slack front ends;
never imports ``slack_*`` or ``redis``, never formats a chat message."""
