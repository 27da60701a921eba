"""What ``upgradebot local start|stop`` (``make try``) says: the sentences of that one verb of the shell."""

from __future__ import annotations

LOCAL_SUMMARY = "start or stop kubesim, a local Redis and a ready two-person policy in the background (make try)"
LOCAL_USAGE = "local start|stop"
LOCAL_ACTION_HELP = ("start: kubesim (gpu-small), this user's Redis and a policy, left running; "
                     "stop: stop what start or the shell started (kubesim and the shell's Redis)")
LOCAL_NOTHING_RUNNING = "Nothing was running: no kubesim started by `upgradebot local start`, no local Redis."


def local_started(pid: int, url: str) -> str:
    return f"kubesim is running in the background (pid {pid}, {url}); so is this user's Redis."


def local_already_running(pid: int, url: str) -> str:
    return f"Already running: kubesim (pid {pid}, {url}) and this user's Redis; nothing was started."


def local_paste(lines: list[str]) -> str:
    return ("Paste these three lines into your shell (the third defines `bob`, which runs a command as Bob, "
            "the approver):\n" + "\n".join(lines))


def local_stop_hint(prog: str) -> str:
    return f"`{prog} local stop` stops them."


def local_stopped(what: str, pid: int) -> str:
    return f"Stopped {what} (pid {pid})."


def local_did_not_start(log: str, tail: str) -> str:
    return f"kubesim did not start (its log, {log}, ends: {tail or 'nothing'}): nothing is running"


def local_did_not_stop(what: str, pid: int) -> str:
    return f"{what} (pid {pid}) did not stop on SIGTERM, nor on SIGKILL: stop it by hand"
