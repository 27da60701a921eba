"""The command router: verbs, help, usage replies, channel rules, requesters."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from handlers.access import DirectoryUnavailable, StaticDirectory
from handlers.arguments import UsageError, split_pairs
from handlers.decoding import words
from handlers.replies import Reply
from handlers.routing import UNKNOWN, Caller, Registry, Router, Verb, default_registry
from runbooks.errors import ClusterUnreachable
from runbooks.policy import Policy


class Recorder:
    """Verbs that remember what they were asked; each returns a public reply."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], Caller]] = []

    def verb(self, name: str, *, mutating: bool = False, fail: Exception | None = None) -> Verb:
        usage = f"{name} [target] [cluster=<context>] [image=<ref>]"

        def parse(words: Sequence[str]) -> dict[str, str]:
            positional, pairs = split_pairs(words, allowed=("cluster", "image"), usage=usage, max_positional=1)
            return {"target": positional[0] if positional else "", **pairs}

        def handle(request: dict[str, str], caller: Caller) -> Reply:
            self.calls.append((name, request, caller))
            if fail is not None:
                raise fail
            return Reply(text=f"{name} done")

        return Verb(name=name, usage=usage, summary=f"{name} things", parse=parse, handle=handle, mutating=mutating)


POLICY = Policy.model_validate({
    "channels": {"C0OPS": {"cluster": "prod-east"}, "C0LAB": {}},
    "requesters": {"users": ["U0ANA"], "usergroups": ["S0PLAT"]},
})
ANA = Caller(user="U0ANA", channel="C0OPS")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def router_for(recorder: Recorder, policy: Policy = POLICY, directory: object = None) -> Router:
    registry = default_registry(recorder.verb("look"), recorder.verb("change", mutating=True))
    return Router(registry, policy, directory or StaticDirectory({"S0PLAT": ["U0BEN"]}))  # type: ignore[arg-type]


def test_help_lists_every_verb(recorder: Recorder) -> None:
    """help (and an empty command) answers every verb's usage line, ephemeral."""
    router = router_for(recorder)
    for text in ("help", "", "  HELP  "):
        routed = router.route(text, ANA)
        assert (routed.verb, routed.outcome) == ("help", "ok")
        assert routed.reply.ephemeral
        assert [u.split(" — ")[0] for u in routed.reply.usage] == router.registry.usages


def test_channel_default_cluster_fills_in(recorder: Recorder) -> None:
    """A channel's default cluster is used when cluster= is absent, never over it."""
    router = router_for(recorder)
    router.route("look ns/ds", ANA)
    router.route("look ns/ds cluster=lab", ANA)
    router.route("look", Caller(user="U0ANA", channel="C0LAB"))
    assert [c[1].get("cluster") for c in recorder.calls] == ["prod-east", "lab", None]


def test_decoded_before_parsing(recorder: Recorder) -> None:
    """Slack's link and entity encodings do not reach the parser."""
    routed = router_for(recorder).route("look ns/ds image=<http://reg.io/a:1|reg.io/a:1>", ANA)
    assert routed.outcome == "ok"
    assert recorder.calls[0][1]["image"] == "reg.io/a:1"


def test_bad_argument_gets_reason_and_usage(recorder: Recorder) -> None:
    """A bad argument: the reason and that verb's usage line; the handler never runs."""
    routed = router_for(recorder).route("look ns/ds colour=blue", ANA)
    assert (routed.verb, routed.outcome) == ("look", "usage")
    assert "colour=" in routed.reply.text and routed.reply.ephemeral
    assert routed.reply.usage == ["look [target] [cluster=<context>] [image=<ref>]"]
    assert recorder.calls == []


def test_channels_outside_the_policy_are_refused(recorder: Recorder) -> None:
    """A command in a channel the policy does not list is refused, even help."""
    for text in ("look", "help", "nonsense"):
        routed = router_for(recorder).route(text, Caller(user="U0ANA", channel="C0RANDOM"))
        assert routed.outcome == "denied" and routed.reply.ephemeral
        assert "<#C0RANDOM>" in routed.reply.text and "<#C0OPS>" in routed.reply.text
    assert recorder.calls == []


def test_shell_has_no_channel_rules(recorder: Recorder) -> None:
    """A caller without a channel (the shell) is not held to channel rules."""
    assert router_for(recorder).route("look", Caller(user="U0ANA", channel=None, surface="shell")).outcome == "ok"


def test_mutating_verbs_need_a_requester(recorder: Recorder) -> None:
    """Requesters by user id or usergroup membership; anyone else is refused."""
    router = router_for(recorder)
    assert router.route("change ns/ds", ANA).outcome == "ok"
    assert router.route("change ns/ds", Caller(user="U0BEN", channel="C0OPS")).outcome == "ok"
    refused = router.route("change ns/ds", Caller(user="U0EVE", channel="C0OPS"))
    assert refused.outcome == "denied" and refused.reply.ephemeral
    assert router.route("look ns/ds", Caller(user="U0EVE", channel="C0OPS")).outcome == "ok"
    assert [c[2].user for c in recorder.calls] == ["U0ANA", "U0BEN", "U0EVE"]


def test_unreadable_usergroups_refuse(recorder: Recorder) -> None:
    """When group membership cannot be read, a mutating verb is refused, not allowed."""

    class Down:
        def members(self, usergroup: str) -> frozenset[str]:
            raise DirectoryUnavailable("usergroups.users.list S0PLAT: ratelimited")

    routed = router_for(recorder, directory=Down()).route("change x/y", Caller(user="U0BEN", channel="C0OPS"))
    assert routed.outcome == "failed" and "ratelimited" in routed.reply.text
    assert recorder.calls == []


def test_handler_failures_become_replies(recorder: Recorder) -> None:
    """A cluster error, a usage error from the handler, or a bug: an ephemeral reply each."""
    registry = default_registry(
        recorder.verb("down", fail=ClusterUnreachable("cannot reach https://x: connection refused")),
        recorder.verb("picky", fail=UsageError("no such target", "picky <target>")),
        recorder.verb("buggy", fail=RuntimeError("boom")),
    )
    router = Router(registry, Policy())
    down, picky, buggy = (router.route(v, ANA) for v in ("down", "picky", "buggy"))
    assert down.outcome == "failed" and "connection refused" in down.reply.text and down.reply.usage
    assert picky.outcome == "usage" and picky.reply.usage == ["picky <target>"]
    assert buggy.outcome == "error" and "reference" in buggy.reply.text and "boom" not in buggy.reply.text
    assert all(r.reply.ephemeral for r in (down, picky, buggy))


def test_registry_refuses_duplicates() -> None:
    """A verb name is registered once, in lower case, and 'unknown' is reserved."""
    recorder = Recorder()
    registry = Registry([recorder.verb("look")])
    with pytest.raises(ValueError):
        registry.register(recorder.verb("look"))
    with pytest.raises(ValueError):
        registry.register(recorder.verb(UNKNOWN))


@given(st.text())
def test_unknown_verbs_never_dispatch(text: str) -> None:
    """Any first word that is not a verb: an ephemeral usage reply; no handler runs."""
    recorder = Recorder()
    router = router_for(recorder, policy=Policy())
    decoded = words(text)
    assume(decoded and decoded[0].lower() not in router.registry)
    routed = router.route(text, ANA)
    assert routed.verb == UNKNOWN and routed.outcome == "unknown"
    assert routed.reply.ephemeral and routed.reply.usage == router.registry.usages
    assert recorder.calls == []


@given(st.sampled_from(["look", "LOOK", "change"]), st.lists(st.text(), max_size=4))
def test_known_verbs_always_answer(verb: str, rest: list[str]) -> None:
    """A known verb with any words: a reply, never an exception, and at most one handler call."""
    recorder = Recorder()
    routed = router_for(recorder).route(" ".join([verb, *rest]), ANA)
    assert routed.verb == verb.lower()
    assert routed.outcome in ("ok", "usage")
    assert len(recorder.calls) == (1 if routed.outcome == "ok" else 0)
