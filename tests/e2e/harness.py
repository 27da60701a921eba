"""The harness of the Slack end-to-end tests: the policy, test verbs, clicks, the running bot.

``bot`` is the service ``upgradebot serve`` builds, on a real waitress server on
127.0.0.1:0, with ``SLACK_API_URL`` pointing at :class:`tests.fakeslack.FakeSlack` and
``KUBECONFIG`` at the module's kubesim. Besides ``help`` and ``inventory`` it has two
verbs of the tests' own: ``ask`` (mutating; opens an approval gate and posts Approve /
Reject) and ``hold`` (blocks until the test releases it, to tell the ack from the work).
Clicks go to :class:`GateBook`, a small real in-process :class:`~handlers.clicks.Decisions`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from bot.settings import Settings
from bot.slack.serve import Service
from handlers.access import Directory, is_listed
from handlers.arguments import split_pairs
from handlers.clicks import Click, Decided
from handlers.replies import Message, Reply, user_ref
from handlers.routing import Caller, Verb
from handlers.run_views import approval_buttons
from kubesim import KubeSim
from runbooks.policy import Policy
from tests.fakeslack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    Answer,
    FakeSlack,
    block_action,
    post,
    slash_command,
)

POLICY = Policy.model_validate({
    "channels": {"C0OPS": {"cluster": "kubesim"}, "C0LAB": {}},
    "requesters": {"users": ["U0ANA"], "usergroups": ["S0PLATFORM"]},
    "approvers": {"users": ["U0LEAD"], "usergroups": ["S0LEADS"]},
})
USERGROUPS = {"S0PLATFORM": ["U0BEN"], "S0LEADS": ["U0CAT", "U0ANA"]}


@dataclass
class Gate:
    id: str
    requested_by: str
    decided_by: str | None = None
    approved: bool | None = None
    at: dt.datetime | None = None


class GateBook:
    """Gates opened by ``ask``, decided once by an approver who did not ask."""

    def __init__(self, policy: Policy, directory: Callable[[], Directory]) -> None:
        self.policy, self.directory = policy, directory
        self.gates: dict[str, Gate] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def open(self, requested_by: str) -> Gate:
        gate = Gate(id=f"gate-{next(self._ids)}", requested_by=requested_by)
        self.gates[gate.id] = gate
        return gate

    def decide(self, click: Click) -> Decided:
        with self._lock:
            gate = self.gates.get(click.value)
            if gate is None:
                return Decided(accepted=False, reply=Reply.error(f"no request {click.value}"))
            if gate.decided_by is not None:
                what = "approved" if gate.approved else "rejected"
                return Decided(accepted=False, reply=Reply.error(f"already {what} by {user_ref(gate.decided_by)}"))
            if not is_listed(click.user, self.policy.approvers, self.directory()):
                return Decided(accepted=False, reply=Reply.error("you are not an approver"))
            if click.approve and click.user == gate.requested_by:
                return Decided(accepted=False, reply=Reply.error("you asked; another approver must approve"))
            gate.decided_by, gate.approved, gate.at = click.user, click.approve, dt.datetime.now(dt.UTC)
        verdict = f"{'Approved' if click.approve else 'Rejected'} by {user_ref(click.user)} at {gate.at:%H:%M:%S} UTC"
        return Decided(
            accepted=True, replace=Message(title=f"Request {gate.id}", text=verdict),
            reply=Reply(text=f"{gate.id}: {verdict}"),
        )


def ask_verb(book: GateBook) -> Verb:
    usage = "ask <what>"

    def parse(words: Sequence[str]) -> str:
        positional, _ = split_pairs(words, allowed=("cluster",), usage=usage, max_positional=1)
        return positional[0] if positional else "something"

    def handle(what: str, caller: Caller) -> Reply:
        gate = book.open(caller.user)
        return Reply(title=f"Request {gate.id}", text=f"{user_ref(caller.user)} asks for {what}",
                     buttons=approval_buttons(gate.id))

    return Verb(name="ask", usage=usage, summary="ask for approval", parse=parse, handle=handle, mutating=True)


def hold_verb(release: threading.Event, started: threading.Event) -> Verb:
    def handle(_: object, caller: Caller) -> Reply:
        started.set()
        assert release.wait(20), "never released"
        return Reply(text="held and released")

    return Verb(name="hold", usage="hold", summary="wait for the test", parse=lambda words: None, handle=handle,
                takes_cluster=False)


@dataclass
class Bot:
    url: str
    service: Service
    fake: FakeSlack
    book: GateBook
    release: threading.Event
    started: threading.Event
    responses: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def events(self) -> str:
        return self.url + "/slack/events"

    def command(self, text: str, *, user: str = "U0ANA", channel: str = "C0OPS", **kw: object) -> Answer:
        body = slash_command(text, user=user, channel=channel, response_url=self.fake.response_url(f"c{next(self.responses)}"))
        return post(self.events, body, **kw)  # type: ignore[arg-type]

    def click(self, action: str, value: str, *, user: str, message_ts: str, channel: str = "C0OPS") -> Answer:
        body = block_action(action_id=action, value=value, user=user, channel=channel, message_ts=message_ts,
                            response_url=self.fake.response_url(f"a{next(self.responses)}"))
        return post(self.events, body)

    def settle(self) -> None:
        assert self.service.wait_idle(30), "background work did not finish"


def settings_for(fake: FakeSlack, sim: KubeSim, **extra: object) -> Settings:
    values: dict[str, object] = {
        "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET, "SLACK_APP_TOKEN": None,
        "SLACK_API_URL": fake.api_url, "KUBECONFIG": str(sim.kubeconfig), "UPGRADEBOT_CONFIG": None,
        "UPGRADEBOT_WORKERS": 4, "UPGRADEBOT_HTTP_THREADS": 8, **extra,
    }
    return Settings(**values)  # type: ignore[arg-type]


