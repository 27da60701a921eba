"""What a process says when its configuration cannot work: one line on stderr, then exit 2.

The operator's surface, kept apart from :mod:`handlers.messages` (what the bot says to the
people it serves): ``serve``'s and the workers' start-up errors (Slack secrets, Redis,
kubeconfig) and the policy file's refusals, each naming what is wrong and where to fix it.
"""

from __future__ import annotations


def error_redis_volatile(url: str) -> str:
    return (f"Redis at {url} has no persistence (neither AOF nor RDB snapshots): a restart would lose every "
            "run, with a DaemonSet possibly half-upgraded. Turn on appendonly (or save) in Redis, or pass "
            "--allow-volatile-redis to run anyway")


def warning_redis_volatile(url: str) -> str:
    return f"Redis at {url} has no persistence (allowed by --allow-volatile-redis): a Redis restart loses every run"


def error_redis_persistence_unknown(reason: str) -> str:
    return f"{reason}: if it does persist (AOF or RDB), pass --allow-volatile-redis to run anyway"

ERROR_TOKEN_REQUIRED = ("SLACK_BOT_TOKEN is not set: copy the Bot User OAuth Token (xoxb-…) from the app's "
                        "OAuth & Permissions page")
WORKER_NEEDS_POLICY = ("a worker needs the policy file (UPGRADEBOT_CONFIG): without one nobody is trusted to "
                       "request or approve, and there is no work to take")


def error_unknown_lanes(unknown: list[str], lanes: tuple[str, ...]) -> str:
    named = f"unknown lane(s) {', '.join(unknown)}; " if unknown else "no lane named; "
    return named + f"--lanes takes {', '.join(lanes)} (comma-separated)"


ERROR_REDIS_URL_IN_POD = ("REDIS_URL is not set, and in a pod a Redis of the bot's own would lose every run when "
                          "the pod moves: point REDIS_URL at a Redis that keeps its data (deploy/, docs/operations.md)")
ERROR_SIGNING_SECRET_REQUIRED = ("SLACK_SIGNING_SECRET is not set: copy the Signing Secret from the app's Basic "
                                 "Information page (or set SLACK_APP_TOKEN to use Socket Mode)")
ERROR_APP_TOKEN_INVALID = "SLACK_APP_TOKEN must be an app-level token (xapp-…) with the connections:write scope"


def error_socket_mode_failed(reason: str) -> str:
    return (f"cannot open the Socket Mode connection ({reason}): check SLACK_APP_TOKEN "
            "and that Socket Mode is enabled for the app")


def warning_auth_test_failed(reason: str) -> str:
    return f"Slack auth.test failed ({reason}): /readyz reports it (the replica stays ready) until it succeeds"


def policy_unreadable(path: str, reason: str) -> str:
    return f"cannot read UPGRADEBOT_CONFIG {path}: {reason}"


def policy_not_regular(path: str) -> str:
    return f"UPGRADEBOT_CONFIG {path} is not a regular file (a FIFO, a device, a directory): name the policy's YAML file"


def policy_too_large(path: str, mib: int) -> str:
    return f"UPGRADEBOT_CONFIG {path} is larger than {mib} MiB: a policy is a few kilobytes, is this the right file?"


def policy_not_utf8(path: str, offset: int) -> str:
    return f"UPGRADEBOT_CONFIG {path} is not UTF-8 (byte {offset}): save it as UTF-8"


def policy_too_deep(path: str, depth: int) -> str:
    return f"UPGRADEBOT_CONFIG {path} is nested deeper than {depth} levels: a policy needs about six"


def policy_too_many_values(path: str, limit: int) -> str:
    return (f"UPGRADEBOT_CONFIG {path} holds more than {limit} values once its aliases are expanded: "
            "use fewer anchors and aliases")


POLICY_EXPECTED = {"bool_type": "true or false", "int_type": "a whole number", "float_type": "a number"}
"""What a policy value of the wrong type must be, by pydantic's error type (nothing is coerced)."""


def policy_wrong_type(expected: str, given: object) -> str:
    return f"must be {expected}, not {_policy_value(given)}"


def _policy_value(value: object) -> str:
    """A value of the policy file as YAML writes it: ``true``, ``1``, ``the string 'yes'``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "an empty value"
    if isinstance(value, str):
        return f"the string {value[:40]!r}" + ("…" if len(value) > 40 else "")
    if isinstance(value, (int, float)):
        return repr(value)
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else type(value).__name__


POLICY_KEY_NOT_PLAIN = "a key must be a plain value (a word or a number), not a list or a mapping"


def error_secret_empty(variable: str) -> str:
    return f"{variable} is set but empty: give it its value from the Slack app's settings, or unset it"


ERROR_BOT_TOKEN_MALFORMED = ("SLACK_BOT_TOKEN is not a bot token (xoxb- then letters, digits and dashes): copy it "
                             "again from the app's OAuth & Permissions page")
ERROR_SIGNING_SECRET_MALFORMED = ("SLACK_SIGNING_SECRET is not a signing secret (16 to 256 letters, digits, - or _, "
                                  "not a token; Slack's is 32 hex digits): copy it again from the app's Basic "
                                  "Information page")


def error_kubeconfig_unusable(reason: str) -> str:
    return f"kubeconfig unusable: {reason}"


LOCAL_REDIS_STOPPED = ("the local Redis is stopped (`upgradebot local stop`), and nothing was started: "
                       "`upgradebot local start` (or `make try`) starts it again, with kubesim; "
                       "or set REDIS_URL to another Redis")
STATE_FIX = "set XDG_STATE_HOME to a directory of your own (the shell's Redis and `local start` keep their state there)"


def state_is_a_link(path: str, target: str) -> str:
    return (f"{path} is a symbolic link (to {target}), not a directory of this user's: remove it, or {STATE_FIX}")


def state_not_kind(path: str, kind: str) -> str:
    return f"{path} is not {kind}: remove it, or {STATE_FIX}"


def state_not_owned(path: str, uid: int) -> str:
    return (f"{path} belongs to another user (uid {uid}), who could replace what upgradebot keeps there: "
            f"refused; remove it, or {STATE_FIX}")


def state_shared(path: str, mode: int, *, directory: bool) -> str:
    fix = "chmod 700" if directory else "chmod 600"
    return (f"{path} can be written by other users (mode {mode:04o}), who could replace what upgradebot keeps "
            f"there: refused; {fix} it if everything in it is yours, or {STATE_FIX}")


def state_parent_not_owned(path: str, uid: int) -> str:
    return (f"{path} belongs to another user (uid {uid}), who could replace upgradebot's state directory in it: "
            f"refused; {STATE_FIX}")


def state_parent_shared(path: str, mode: int) -> str:
    return (f"{path} can be written by other users and is not sticky (mode {mode:04o}; /tmp is 1777): any of them "
            f"could replace upgradebot's state directory in it: refused; {STATE_FIX}")


SERVE_ENVIRONMENT_HEADING = "environment (read once, at start; each in full in docs/operations.md):"
SERVE_ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("SLACK_BOT_TOKEN", "the Bot User OAuth Token xoxb-… (required)"),
    ("SLACK_SIGNING_SECRET", "checks that requests come from Slack (required in HTTP mode)"),
    ("SLACK_APP_TOKEN", "an app-level token xapp-… (connections:write): set, Socket Mode"),
    ("SLACK_API_URL", "the Slack Web API base URL (default https://slack.com/api/)"),
    ("REDIS_URL", "runs, locks, audit (unset: your own local Redis; required in a pod)"),
    ("KUBECONFIG", "the clusters, :-separated (default ~/.kube/config, else in-cluster)"),
    ("UPGRADEBOT_CONFIG", "the policy file (unset: read-only, help and inventory only)"),
    ("UPGRADEBOT_WORKER_PROCESSES", "sets of worker processes started beside serve (1; 0: none)"),
    ("UPGRADEBOT_WORKER_NICE", "how much lower the workers' priority is (10)"),
    ("UPGRADEBOT_WORKERS", "threads of a worker for commands, and as many for runs (8)"),
    ("UPGRADEBOT_RESERVED_WORKERS", "of those, how many long reads never take (2)"),
    ("UPGRADEBOT_DECISION_WORKERS", "threads of a worker for decisions (4)"),
    ("UPGRADEBOT_HTTP_THREADS", "threads answering HTTP (16)"),
    ("UPGRADEBOT_SLACK_PACE", "seconds between two messages of runs to one channel (1.0)"),
    ("UPGRADEBOT_SWEEP_INTERVAL", "seconds between two sweeps of overdue requests and runs (30)"),
    ("LOG_LEVEL", "DEBUG, INFO (default), WARNING or ERROR"),
    ("LOG_FORMAT", "text (default) or json, one object a line"),
    ("KUBERNETES_SERVICE_HOST", "set in a pod: REDIS_URL is then required"),
    ("XDG_STATE_HOME", "the local Redis lives in $XDG_STATE_HOME/upgradebot"),
    ("HOME", "where ~/.kube/config and ~/.local/state are"),
)
"""``upgradebot serve --help``'s epilog: what ``serve`` reads from the environment (bot/settings.py)."""
