"""The policy file (``UPGRADEBOT_CONFIG``) as validated pydantic models, no I/O.

``bot/settings.py`` reads the YAML and validates it into :class:`Policy`; the run engine,
handlers and runbooks receive the model. Unknown keys are refused so a typo
(``aprovers:``) is an error at start-up, not a silently ignored rule.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from runbooks.metrics.spec import MetricCheckSpec, PrometheusPolicy
from runbooks.names import DNS1123_LABEL, DNS1123_SUBDOMAIN, Namespace, ObjectName, OwnerName
from runbooks.policy_checks import (
    LONGEST_SECONDS,
    USER_ID,
    Strict,
    at_least,
    distinct,
    duration,
    duration_seconds,
)
from runbooks.policy_checks import slack_ids as _ids
from runbooks.policy_identities import Identities
from runbooks.policy_rollout import LABEL_KEY, MAX_WAVES, WAVE_SIZE, Drain, Wave, Window

GROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")
SLASH_COMMAND = re.compile(r"^/[a-z0-9_-]{1,31}$")




class CompatibilityOverride(Strict):
    """The compatibility matrix overridden for one target (policy ``targets[].compatibility``):
    ``min_driver`` replaces the matrix's minimum NVIDIA driver branch (also for an image the
    matrix does not know); ``ignore: true`` skips the check for this target."""

    min_driver: str | None = None
    ignore: bool = False

    @field_validator("min_driver", mode="before")
    @classmethod
    def _branch(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if value is not None and not (isinstance(value, str) and value.isdigit()):
            raise ValueError(f"min_driver {value!r} is not a driver branch (its major version, e.g. \"550\")")
        return value


class Target(Strict):
    """A DaemonSet the bot may upgrade: ``namespace/name``, and optionally the log line
    (a regular expression) that says its plugin registered with the kubelet."""

    namespace: Namespace
    name: ObjectName
    registration: str | None = None
    workloads: list[str] = Field(default_factory=list)
    """The workloads upgraded in one run with this DaemonSet, in order, the DaemonSet itself
    among them: ``daemonset/<name>`` or ``deployment/<name>``, each optionally ``:<container>``
    (default: the container running the same image repository as the target's). Those
    before the DaemonSet are upgraded before its canary pod, those after it once it is
    promoted; a rollback restores them all, in the reverse order. Empty: the DaemonSet alone."""
    waves: list[Wave] = Field(default_factory=list)
    """The promotion in waves (``[1, 5%, 25%, 100%]``, or mappings with ``soak`` and
    ``approve_next``): each wave's nodes are replaced and verified before the next starts.
    Empty: the whole promotion at once, by the DaemonSet's own update strategy."""
    spread: list[str] = Field(default_factory=list)
    """Node labels naming failure domains, widest first (``topology.kubernetes.io/zone``,
    a rack label): the waves take their nodes from every domain in turn."""
    windows: list[Window] = Field(default_factory=list)
    """When the target may change: a canary, a promotion wave starts only inside one (a wave
    only if its soak ends inside it too); verification and rollbacks run at any time.
    Empty: at any time."""

    drain: Drain | None = None
    """Cordon and drain each node before its plugin pod is replaced (``true``, or a mapping of
    :class:`Drain`'s fields); the promotion then replaces the pods itself, wave by wave (one
    wave of every node without ``waves``). None: the plugin restarts under the workloads."""

    @field_validator("drain", mode="before")
    @classmethod
    def _drain_shorthand(cls, value: object) -> object:
        if value is True:
            return {}
        if value is False:
            return None
        return value

    compatibility: CompatibilityOverride | None = None
    """The compatibility matrix overridden for this target (see :class:`CompatibilityOverride`)."""
    owner: OwnerName | None = None
    """Who the target's changes go through. ``helm``: the target belongs to a Helm release and the bot may
    still change it (the next ``helm upgrade`` puts the change back unless the release's values say so: the
    finished run prints the values change). ``clusterpolicy/<name>``: the GPU operator renders it from that
    ClusterPolicy (``upgradebot rbac`` grants get and patch on it by name). None: a target someone owns
    (runbooks.owners) is refused."""

    @property
    def clusterpolicy(self) -> str | None:
        """The ClusterPolicy named by ``owner: clusterpolicy/<name>``, else None."""
        return self.owner.partition("/")[2] if self.owner and self.owner.startswith("clusterpolicy/") else None
    stages: list[str] = Field(default_factory=list)
    """Kubeconfig contexts in the order an image goes through them (``staging``, ``prod-eu``,
    ``prod-us``): a canary on one is requested only once the same image's run on the stage
    before has ended with a stable last stability report. Empty: any cluster, any order."""

    @field_validator("stages")
    @classmethod
    def _stages(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.strip() or len(value) > 253 or any(c.isspace() for c in value):
                raise ValueError(f"{value!r} is not a kubeconfig context name")
        if len(set(values)) != len(values):
            raise ValueError("a stage is listed twice")
        if len(values) == 1:
            raise ValueError("one stage orders nothing: list at least two contexts, or none")
        return values

    @model_validator(mode="after")
    def _soaks_fit(self) -> Target:
        if self.windows and self.waves:
            longest = max(w.minutes[1] for w in self.windows) * 60
            for wave in self.waves[:-1]:
                if duration_seconds(wave.soak) > longest:
                    raise ValueError(f"wave {wave.nodes} soaks {wave.soak}, longer than any maintenance window: "
                                     "the next wave could never start")
        return self

    @field_validator("waves", mode="before")
    @classmethod
    def _wave_shorthand(cls, value: object) -> object:
        if isinstance(value, list):
            return [v if isinstance(v, dict) else {"nodes": v} for v in value]
        return value

    @field_validator("waves")
    @classmethod
    def _waves(cls, values: list[Wave]) -> list[Wave]:
        if not values:
            return values
        if len(values) > MAX_WAVES:
            raise ValueError(f"{len(values)} waves is more than {MAX_WAVES}")
        if values[-1].nodes != "100%":
            raise ValueError("the last wave must be 100% (else some nodes would never get the new image)")
        for kind in ("count", "percent"):
            sizes = [int(w.nodes.rstrip("%")) for w in values if (w.percent is None) == (kind == "count")]
            if any(b <= a for a, b in itertools.pairwise(sizes)):
                raise ValueError(f"wave sizes are cumulative: each {kind} must be larger than the one before "
                                 f"({', '.join(w.nodes for w in values)})")
        return values

    @field_validator("spread")
    @classmethod
    def _spread(cls, values: list[str]) -> list[str]:
        for value in values:
            if not LABEL_KEY.fullmatch(value):
                raise ValueError(f"{value!r} is not a node label key (e.g. topology.kubernetes.io/zone)")
        if len(set(values)) != len(values):
            raise ValueError("a spread label is listed twice")
        return values

    @field_validator("workloads")
    @classmethod
    def _workloads(cls, values: list[str], info: ValidationInfo) -> list[str]:
        if not values:
            return values
        seen: set[tuple[str, str]] = set()
        for value in values:
            kind, sep, rest = value.partition("/")
            name, _, container = rest.partition(":")
            if not sep or kind.lower() not in ("daemonset", "deployment") or not DNS1123_SUBDOMAIN.fullmatch(name) \
                    or (container and not DNS1123_LABEL.fullmatch(container)):
                raise ValueError(f"{value!r} is not a workload: use daemonset/<name> or deployment/<name>, "
                                 "optionally :<container>")
            if (kind.lower(), name) in seen:
                raise ValueError(f"{value!r} is listed twice")
            seen.add((kind.lower(), name))
        target = info.data.get("name")
        if target and ("daemonset", target) not in seen:
            raise ValueError(f"workloads must list the target itself (daemonset/{target}) where it comes in the order")
        return values

    def parts(self) -> list[tuple[str, str, str, bool]]:
        """``(kind, name, container, before)`` of each workload besides the DaemonSet, in order."""
        out, before = [], True
        for value in self.workloads:
            kind, _, rest = value.partition("/")
            name, _, container = rest.partition(":")
            if kind.lower() == "daemonset" and name == self.name:
                before = False
                continue
            out.append(({"daemonset": "DaemonSet", "deployment": "Deployment"}[kind.lower()], name, container, before))
        return out

    @field_validator("registration")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression: {exc}") from exc
        if not value.strip():
            raise ValueError("an empty registration pattern matches every log")
        return value

    @classmethod
    def parse(cls, text: str) -> Target:
        namespace, sep, name = text.strip().partition("/")
        if not sep or not DNS1123_LABEL.fullmatch(namespace) or not DNS1123_SUBDOMAIN.fullmatch(name):
            raise ValueError(
                f"{text!r} is not a target: use <namespace>/<daemonset>, e.g. "
                "kube-system/nvidia-device-plugin-daemonset"
            )
        return cls(namespace=namespace, name=name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Principals(Strict):
    users: list[str] = Field(default_factory=list)
    usergroups: list[str] = Field(default_factory=list)

    @field_validator("users")
    @classmethod
    def _users(cls, values: list[str]) -> list[str]:
        return distinct(_ids(values, USER_ID, "user"))

    @field_validator("usergroups")
    @classmethod
    def _groups(cls, values: list[str]) -> list[str]:
        return distinct(_ids(values, GROUP_ID, "user group"))


class Approvers(Principals):
    quorum: Annotated[int, Field(ge=1)] = 1
    allow_self_approval: bool = False
    expire_after: str = "30m"

    @field_validator("expire_after")
    @classmethod
    def _expiry(cls, value: str) -> str:
        return at_least("1m")(value)

    @model_validator(mode="after")
    def _reachable(self) -> Approvers:
        if self.users and not self.usergroups and self.quorum > len(self.users):
            raise ValueError(f"quorum {self.quorum} is more than the {len(self.users)} approver(s) listed: "
                             "no request could ever be approved")
        return self


class ChannelPolicy(Strict):
    cluster: str | None = None


class Oncall(Strict):
    channel: str | None = None
    mention: str | None = None

    @field_validator("channel")
    @classmethod
    def _channel(cls, value: str | None) -> str | None:
        return _ids([value], CHANNEL_ID, "channel")[0] if value is not None else None

    @field_validator("mention")
    @classmethod
    def _mention(cls, value: str | None) -> str | None:
        if value is not None and not (USER_ID.fullmatch(value) or GROUP_ID.fullmatch(value)):
            raise ValueError(f"{value!r} is not a Slack user or user group ID (U…, W… or S…; not @name)")
        return value


class Reports(Strict):
    after: list[str] = Field(default_factory=lambda: ["24h", "48h"])
    """When the stability reports are due, after the promotion; the last one, if stable, ends monitoring."""
    claims_pending_after: str = "15m"
    """A ResourceClaim created since the upgrade and pending longer than this degrades a report."""

    @field_validator("after")
    @classmethod
    def _durations(cls, values: list[str]) -> list[str]:
        return [duration(v) for v in values]

    @field_validator("claims_pending_after")
    @classmethod
    def _pending(cls, value: str) -> str:
        return duration(value)


class Rollback(Strict):
    automatic: bool = True
    requires_approval: bool = True


class SmokeTest(Strict):
    """A pod that uses a GPU through the plugin, run as one more check of each verification."""

    image: str | None = None
    command: list[str] | str | None = None
    expect: str = "Test PASSED"
    namespace: Namespace = "upgradebot-smoke"
    timeout: Annotated[float, Field(gt=0, le=LONGEST_SECONDS)] = 120.0
    """Seconds the pod may take to finish (at most a year, as every duration of the policy)."""
    gpus: Annotated[int, Field(ge=1)] = 1
    device_class: str | None = None
    """For a DRA driver: the device class its claim asks for (default: the class naming the driver)."""
    runtime_class: ObjectName | None = None
    """The smoke pod's ``runtimeClassName`` (default: the target's pods' own RuntimeClass, if any)."""


class StepTimings(Strict):
    """How long the cluster steps wait and watch (``runbooks.engine.steps.StepSettings``)."""

    ready_timeout: str = "5m"
    """How long a replaced pod (canary, promotion, rollback) may take to become Ready."""
    observe_window: str = "30s"
    """How long verify watches restart counts for a rise."""
    poll_interval: str = "1s"
    settle_window: str = "30s"
    """How long the baseline waits for a node caught mid-change (fewer GPUs allocatable than
    capacity, a plugin re-registering) to settle before it is recorded as it is."""
    claim_grace: str = "1m"
    """How long a ResourceClaim made during a DRA driver's step may stay pending while a pod waits for it."""
    smoke_test: SmokeTest | None = None
    """Optional smoke-test pod (typed: a misspelt key is an error, not ignored)."""

    @field_validator("ready_timeout", "observe_window", "claim_grace")
    @classmethod
    def _waits(cls, value: str) -> str:
        return at_least("1s")(value)

    @field_validator("poll_interval")
    @classmethod
    def _poll(cls, value: str) -> str:
        return at_least("0.1s")(value)

    @field_validator("settle_window")
    @classmethod
    def _settle(cls, value: str) -> str:
        return duration(value)


TEAM_ID = re.compile(r"^[TE][A-Z0-9]{2,}$")


class SlackPolicy(Strict):
    teams: list[str] = Field(default_factory=list)
    """Workspace (``T…``) or Enterprise Grid (``E…``) IDs whose people may command and click;
    empty: the bot's own workspace only (as ``auth.test`` says)."""

    @field_validator("teams")
    @classmethod
    def _teams(cls, values: list[str]) -> list[str]:
        return _ids(values, TEAM_ID, "workspace (team)")


class Halt(Strict):
    rollback_after: str = "15m"
    """A run halted longer than this (an unexpected error, a failed rollback) is rolled back
    by itself as soon as the API answers, when ``rollback.automatic`` is on."""

    @field_validator("rollback_after")
    @classmethod
    def _after(cls, value: str) -> str:
        return at_least("1s")(value)


class Shell(Strict):
    approvals: bool = False
    """Whether approvals may be given from the shell and the console (as the identity the
    ``identities`` section maps the caller to); off: approve in Slack."""


class Limits(Strict):
    """How much one person or channel may ask of the bot at once, and for how long."""

    longest_wait: str = "30m"
    """The longest ``window=`` (and every other duration argument) a command may ask for."""
    per_user: Annotated[int, Field(ge=1, le=64)] = 2
    """Long commands (``verify``, ``inventory``, ``report``) one user may have running at once."""
    per_channel: Annotated[int, Field(ge=1, le=64)] = 4
    """Long commands one channel may have running at once."""

    @field_validator("longest_wait")
    @classmethod
    def _longest(cls, value: str) -> str:
        at_least("1s")(value)
        if duration_seconds(value) > duration_seconds("24h"):
            raise ValueError(f"{value!r} is too long: a command that waits more than 24h holds a worker for a day")
        return value


class InventoryPolicy(Strict):
    """What the inventory holds the plugins' manifests to."""

    max_unavailable: str = "1"
    """The most plugin pods a RollingUpdate may take down at once (a count, or a percentage of
    the DaemonSet's nodes, rounded up): a plugin DaemonSet whose ``maxUnavailable`` is higher
    gets a ``max-unavailable`` finding."""

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _limit(cls, value: object) -> str:
        text = str(value).strip()
        if isinstance(value, bool) or not WAVE_SIZE.fullmatch(text) or (text.endswith("%") and int(text[:-1]) > 100):
            raise ValueError(f"{value!r} is not a count (e.g. 1) or a percentage up to 100% (e.g. 10%)")
        return text


class Verify(Strict):
    unknown: Literal["fail", "warn"] = "fail"
    """A check that could not be made (a 403, a timeout): ``fail`` blocks the step like a
    failed check; ``warn`` lets it pass, still shown as unknown with the reason."""
    metrics: list[MetricCheckSpec] | None = None
    """Metric checks read from ``prometheus`` (``runbooks.metrics.spec``); not given: the built-in
    XID, ECC and GPU-utilisation checks; ``[]``: none. Without ``prometheus`` none run."""


class Migrations(Strict):
    """Which workloads ``apply-migration`` may change (``migrate`` only reads, anywhere)."""

    namespaces: list[Namespace] = Field(default_factory=list)
    """The namespaces whose Deployments a migration run may change; empty: migration runs are off."""


class CanaryPolicy(Strict):
    """The canary (policy ``canary``)."""

    per_class: bool = False
    """Every hardware class (GPU product x driver branch x runtime) the target runs on needs its
    own canary node before promotion: a request whose nodes leave a class out is refused, naming
    the classes. False: one node may stand for the fleet (``node=auto`` still picks one per class)."""


class RegistryMirror(Strict):
    """Where a registry is asked for a tag's digest instead of itself (``images.mirrors``)."""

    url: str
    """The mirror's base URL (``https://mirror.example.com``); asked as containerd asks a mirror,
    ``/v2/<path>/manifests/<tag>?ns=<registry>``."""
    ca_file: str | None = None
    """A CA bundle that signs the mirror's certificate (default: the system's)."""

    @field_validator("url")
    @classmethod
    def _https(cls, value: str) -> str:
        if not value.startswith("https://"):
            raise ValueError(f"{value!r}: a mirror is reached over https (https://host[:port])")
        return value


class ImagesPolicy(Strict):
    """The images a request may name (policy ``images``), and how a promotion names its image."""

    allow_latest: bool = False
    """Accept an explicit ``:latest`` tag (an untagged image is refused either way)."""
    pin_digest: bool = True
    """The promotion (and every wave) writes the image as ``repository@sha256:…``, the digest the
    canary's pods pulled (their ``imageID``), and a rollback writes back the digest the pods ran
    before the run; a promotion is refused while the tag resolves to another digest than the
    canary verified. False: the tag is written, as requested."""
    mirrors: dict[str, RegistryMirror] = Field(default_factory=dict)
    """Registry host -> the mirror to ask what a tag resolves to now (``nvcr.io: {url: …}``); a
    registry not listed is asked itself over https."""


class Policy(Strict):
    """The whole policy file; every section optional (docs/policy.md lists the defaults)."""

    slash_command: str = "/upgrade"
    channels: dict[str, ChannelPolicy] = Field(default_factory=dict)
    requesters: Principals = Field(default_factory=Principals)
    approvers: Approvers = Field(default_factory=Approvers)
    oncall: Oncall = Field(default_factory=Oncall)
    reports: Reports = Field(default_factory=Reports)
    rollback: Rollback = Field(default_factory=Rollback)
    targets: list[Target] = Field(default_factory=list)
    steps: StepTimings = Field(default_factory=StepTimings)
    verify: Verify = Field(default_factory=Verify)
    inventory: InventoryPolicy = Field(default_factory=InventoryPolicy)
    """The limits the inventory's manifest findings judge by."""
    halt: Halt = Field(default_factory=Halt)
    slack: SlackPolicy = Field(default_factory=SlackPolicy)
    identities: Identities = Field(default_factory=Identities)
    shell: Shell = Field(default_factory=Shell)
    limits: Limits = Field(default_factory=Limits)
    migrations: Migrations = Field(default_factory=Migrations)
    canary: CanaryPolicy = Field(default_factory=CanaryPolicy)
    prometheus: PrometheusPolicy | None = None
    """Where verify's metric checks and the reports' metric view read (``{url, bearer_token_file}``)."""
    gpu_resources: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu"])
    """Extended resources the inventory reports and checks per node."""
    images: ImagesPolicy = Field(default_factory=ImagesPolicy)
    """Which image references a request may name (``images.allow_latest``)."""

    @model_validator(mode="after")
    def _shell_approvals_need_identities(self) -> Policy:
        if self.shell.approvals and self.identities.empty:
            raise ValueError("shell.approvals needs identities (identities.accounts or identities.tokens): without "
                             "them an OS account's name would be its identity")
        return self

    @model_validator(mode="after")
    def _stages_need_reports(self) -> Policy:
        staged = [str(t) for t in self.targets if t.stages]
        if staged and not self.reports.after:
            raise ValueError(f"targets {', '.join(staged)} go through stages, which wait for each stage's last "
                             "stability report: reports.after must schedule at least one")
        return self

    @field_validator("gpu_resources")
    @classmethod
    def _resources(cls, values: list[str]) -> list[str]:
        for value in values:
            domain, sep, name = value.partition("/")
            if not sep or not DNS1123_SUBDOMAIN.fullmatch(domain) or not name:
                raise ValueError(f"{value!r} is not an extended resource name: use e.g. nvidia.com/gpu")
        return values

    @field_validator("channels", mode="before")
    @classmethod
    def _channels(cls, value: object) -> object:
        if isinstance(value, dict):
            _ids([str(k) for k in value], CHANNEL_ID, "channel")
            return {k: (v if v is not None else {}) for k, v in value.items()}
        return value

    @field_validator("slash_command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not SLASH_COMMAND.fullmatch(value):
            raise ValueError(f"{value!r} is not a slash command: use / and a lower-case word, e.g. /upgrade")
        return value

    @field_validator("targets", mode="before")
    @classmethod
    def _targets(cls, value: object) -> object:
        if isinstance(value, list):
            return [Target.parse(v) if isinstance(v, str) else v for v in value]
        return value

    @property
    def target_refs(self) -> list[str]:
        return [str(t) for t in self.targets]

    def parts_of(self, ref: str) -> list[tuple[str, str, str, bool]]:
        """The other workloads upgraded with target ``ref`` (:meth:`Target.parts`); none when it has none."""
        return next((t.parts() for t in self.targets if str(t) == ref), [])

    def target(self, ref: str) -> Target | None:
        """The policy's entry for target ``ref`` (``namespace/name``), if it has one."""
        return next((t for t in self.targets if str(t) == ref), None)

    @property
    def registration(self) -> dict[str, str]:
        """``{namespace/name: pattern}`` of the targets that name their registration line."""
        return {str(t): t.registration for t in self.targets if t.registration}
