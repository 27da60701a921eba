"""The process's settings: the one place that reads the environment.

:class:`Settings` is read once at start-up: each field from its environment variable,
validated by pydantic (as pydantic-settings' ``BaseSettings`` did, case-sensitive, unknown
variables ignored; without its import, 40 ms of every shell verb, and the ``.env`` and
cloud secret-store readers it loads that no verb uses: issue 63); :meth:`Settings.policy` reads and validates the YAML policy file named by
``UPGRADEBOT_CONFIG`` into :class:`runbooks.policy.Policy`. Secrets are ``SecretStr`` so
they never show up in a repr or a log line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)

from handlers.messages import did_you_mean

if TYPE_CHECKING:  # the policy's models and yaml are loaded by `policy()`, when a verb reads the policy (issue 39)
    from runbooks.policy import Policy


class SettingsError(ValueError):
    """The environment or the policy file is unusable; the message says which and why."""


def _env(name: str) -> AliasChoices:
    return AliasChoices(name)


class Settings(BaseModel):
    """The environment variables the bot reads, each documented where it is declared.

    ``Settings()`` reads them from the environment; a value given by its variable's name
    (``Settings(REDIS_URL=...)``) wins over the environment's."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kubeconfig: str | None = Field(None, validation_alias=_env("KUBECONFIG"))
    """Kubeconfig file(s), ``:``-separated; unset: ``~/.kube/config``, else in-cluster."""
    config_file: Path | None = Field(None, validation_alias=_env("UPGRADEBOT_CONFIG"))
    """The YAML policy file; unset: built-in defaults (no targets, anyone may request)."""
    redis_url: str | None = Field(None, validation_alias=_env("REDIS_URL"))
    """Redis for runs, locks and the audit trail; unset: this user's own persistent local server (``bot/storage/local.py``)."""
    slack_bot_token: SecretStr | None = Field(None, validation_alias=_env("SLACK_BOT_TOKEN"))
    """``xoxb-…`` token of the Slack app."""
    slack_signing_secret: SecretStr | None = Field(None, validation_alias=_env("SLACK_SIGNING_SECRET"))
    """Verifies that requests to ``/slack/events`` come from Slack."""
    slack_app_token: SecretStr | None = Field(None, validation_alias=_env("SLACK_APP_TOKEN"))
    """``xapp-…`` token: when set, ``serve`` uses Socket Mode instead of HTTP."""
    slack_api_url: str = Field("https://slack.com/api/", validation_alias=_env("SLACK_API_URL"))
    """Slack Web API base URL, with its trailing slash (tests point it at a fake)."""
    workers: int = Field(8, ge=1, le=256, validation_alias=_env("UPGRADEBOT_WORKERS"))
    """``serve``: background workers for commands and clicks (the work after ``ack()``)."""
    reserved_workers: int = Field(2, ge=0, le=255, validation_alias=_env("UPGRADEBOT_RESERVED_WORKERS"))
    """Of ``workers``, how many long reads (``verify``'s window, ``inventory``, ``report`` …) never
    take: kept for short commands and requests (at least one thread is left to long reads)."""
    decision_workers: int = Field(4, ge=1, le=64, validation_alias=_env("UPGRADEBOT_DECISION_WORKERS"))
    """``serve``: workers of their own for decisions (Approve, Reject, Request rollback; the
    ``approve``, ``reject``, ``rollback``, ``close`` commands), which long reads never occupy."""
    worker_processes: int = Field(1, ge=0, le=16, validation_alias=_env("UPGRADEBOT_WORKER_PROCESSES"))
    """``serve``: sets of worker processes it starts beside itself (each: one for decisions, one
    for commands and runs; ``bot/processes.py``); 0: none, ``upgradebot worker`` runs elsewhere."""
    worker_nice: int = Field(10, ge=0, le=19, validation_alias=_env("UPGRADEBOT_WORKER_NICE"))
    """``serve``: how much lower the priority of the workers it starts is (``nice``), so its acks get the CPU first."""
    http_threads: int = Field(16, ge=1, le=256, validation_alias=_env("UPGRADEBOT_HTTP_THREADS"))
    """``serve``: threads answering HTTP requests (``/slack/events``, probes, metrics)."""
    slack_pace: float = Field(1.0, ge=0, le=60, validation_alias=_env("UPGRADEBOT_SLACK_PACE"))
    """``serve``: seconds between two messages of a run to one channel (Slack allows about one a second)."""
    sweep_interval: float = Field(30.0, gt=0, le=3600, validation_alias=_env("UPGRADEBOT_SWEEP_INTERVAL"))
    """``serve``: seconds between two sweeps that expire overdue requests and resume unfinished runs."""
    kubernetes_service_host: str | None = Field(None, validation_alias=_env("KUBERNETES_SERVICE_HOST"))
    """Set by the kubelet in every pod: ``serve`` then requires ``REDIS_URL``."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", validation_alias=_env("LOG_LEVEL"))
    """``serve``: the least severe log lines written."""
    log_format: Literal["text", "json"] = Field("text", validation_alias=_env("LOG_FORMAT"))
    """``serve``: ``text`` (one line each) or ``json`` (one object a line, with the run, user and verb)."""
    home: Path = Field(Path("~").expanduser(), validation_alias=_env("HOME"))
    """Where the default kubeconfig (``~/.kube/config``) is looked for."""
    identity_token: SecretStr | None = Field(None, validation_alias=_env("UPGRADEBOT_TOKEN"))
    """A CI job's identity: a secret whose SHA-256 the policy's ``identities.tokens`` maps to a
    Slack user (``bot/shell/identity.py``); unset: the OS account through ``identities.accounts``."""
    state_home: Path | None = Field(None, validation_alias=_env("XDG_STATE_HOME"))
    """Without ``REDIS_URL`` the shell keeps its own Redis under ``$XDG_STATE_HOME/upgradebot``
    (default ``~/.local/state/upgradebot``)."""
    test_kill_at: str | None = Field(None, validation_alias=_env("UPGRADEBOT_TEST_KILL_AT"))
    """Tests only: SIGKILL this process at the named engine checkpoint (``runbooks/engine/driving.py``);
    a worker ``serve`` started kills ``serve`` first (the whole replica crashes)."""
    worker_of: int | None = Field(None, validation_alias=_env("UPGRADEBOT_WORKER_OF"))
    """Set by ``serve`` for the workers it starts: its process id (they die with it)."""

    @model_validator(mode="before")
    @classmethod
    def _environment(cls, given: Any) -> Any:
        """Each field's variable from the environment, unless given."""
        if not isinstance(given, dict):
            return given
        found = dict(given)
        for field in cls.model_fields.values():
            alias = field.validation_alias
            name = alias.choices[0] if isinstance(alias, AliasChoices) else None
            if isinstance(name, str) and name not in found and name in os.environ:
                found[name] = os.environ[name]
        return found

    @property
    def in_pod(self) -> bool:
        """Whether this process runs in a Kubernetes pod."""
        return bool(self.kubernetes_service_host)

    @property
    def default_kubeconfig(self) -> Path:
        return self.home / ".kube" / "config"

    @property
    def state_dir(self) -> Path:
        """Where the shell keeps its local Redis when ``REDIS_URL`` is unset."""
        return (self.state_home or self.home / ".local" / "state") / "upgradebot"

    def kubeconfig_path(self, override: str | None = None) -> str | None:
        """``--kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config`` if it exists, else None."""
        if override:
            return override
        if self.kubeconfig:
            return self.kubeconfig
        return str(self.default_kubeconfig) if self.default_kubeconfig.exists() else None

    def policy(self) -> Policy:
        """The policy file, validated; the defaults when ``UPGRADEBOT_CONFIG`` is unset."""
        import yaml

        from bot import policy_file
        from runbooks.policy import Policy

        if self.config_file is None:
            return Policy()
        try:
            data = policy_file.load(self.config_file) or {}  # bounded, a SafeLoader (bot/policy_file.py)
        except policy_file.PolicyFileError as exc:
            raise SettingsError(str(exc)) from exc
        except yaml.YAMLError as exc:
            raise SettingsError(f"UPGRADEBOT_CONFIG {self.config_file} is not valid YAML: {_one_line(exc)}") from exc
        if not isinstance(data, dict):
            raise SettingsError(f"UPGRADEBOT_CONFIG {self.config_file} must be a YAML mapping")
        try:
            policy = Policy.model_validate(data, strict=True)  # nothing coerced (runbooks.policy_checks.Strict)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'file'}: {_reason(err)}{_did_you_mean(err)}"
                for err in exc.errors()
            )
            raise SettingsError(f"UPGRADEBOT_CONFIG {self.config_file}: {problems}") from exc
        if not policy.approvers.users and not policy.approvers.usergroups:
            raise SettingsError(f"UPGRADEBOT_CONFIG {self.config_file}: approvers: name at least one user or user "
                                "group (an empty list would let anyone approve)")
        return policy


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def load_settings() -> Settings:
    """Settings from the environment, with problems reported as :class:`SettingsError`."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise SettingsError(f"bad environment: {problems}") from exc


def _reason(error: Any) -> str:
    """Why a policy value is refused: pydantic's sentence, or for a boolean or number of another
    type what it must be and what it was (``must be true or false, not the string 'yes'``)."""
    from handlers import startup_messages as startup_msg

    expected = startup_msg.POLICY_EXPECTED.get(error.get("type", ""))
    if expected is None:
        return str(error["msg"])
    return startup_msg.policy_wrong_type(expected, error.get("input"))


def _did_you_mean(error: Any) -> str:
    """`` (did you mean identities?)`` after an unknown policy key, naming the key of its mapping it
    most looks like (issue 41); '' for any other error."""
    if error.get("type") != "extra_forbidden" or not error.get("loc"):
        return ""
    from runbooks.policy import Policy

    *where, key = error["loc"]
    hint = did_you_mean(str(key), _keys_at(Policy, where))
    return f" ({hint})" if hint else ""


def _keys_at(model: Any, loc: Sequence[object]) -> list[str]:
    """The keys the policy's model takes at ``loc`` (``["approvers"]``: ``users``, ``usergroups``)."""
    current: Any = model
    for part in loc:
        current = _inside(current, part)
        if current is None:
            return []
    current = _model_of(current)
    if current is None:
        return []
    return [name for name, field in current.model_fields.items() for name in (name, field.alias) if name]


def _model_of(annotation: Any) -> Any:
    """The pydantic model an annotation holds (``Shell | None``: ``Shell``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    models = [m for m in (_model_of(a) for a in get_args(annotation)) if m is not None]
    return models[0] if len(models) == 1 and get_origin(annotation) not in (list, tuple, dict) else None


def _inside(annotation: Any, part: object) -> Any:
    """What ``annotation`` holds at ``part`` of a location: a model's field, a list's item, a dict's value."""
    model = _model_of(annotation)
    if model is not None and isinstance(part, str):
        fields = {field.alias or name: field for name, field in model.model_fields.items()} | model.model_fields
        return fields[part].annotation if part in fields else None
    args = get_args(annotation)
    if get_origin(annotation) in (list, tuple) and isinstance(part, int) and args:
        return args[0]
    if get_origin(annotation) is dict and len(args) == 2:
        return args[1]
    inner = [a for a in args if a is not type(None)]
    return _inside(inner[0], part) if len(inner) == 1 else None
