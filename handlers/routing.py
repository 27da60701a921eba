"""``/upgrade <verb> [target] [key=value ...]``: from a line of text to a handler's reply.

The router decodes Slack's encodings, splits the words, applies the channel rules of
the policy (allowed channels, a channel's default cluster, who may run mutating verbs)
and calls the verb's ``parse`` then ``handle``. Every path ends in a :class:`Reply`:
an unknown verb, bad arguments, a refusal or a failure get an ephemeral one with the
reason and the usage lines, and nothing is started.

A verb is registered once, with its dependencies already bound (the front end's wiring
builds the registry)::

    registry = default_registry(inventory.verb(connect=connect, policy=policy))
    router = Router(registry, policy, directory)
    routed = router.route("inventory cluster=prod", Caller(user="U1", channel="C1"))
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from handlers import messages as msg
from handlers.access import Directory, DirectoryUnavailable, StaticDirectory, requester
from handlers.arguments import UsageError, split_pairs
from handlers.decoding import words as split_words
from handlers.replies import SUMMARY_SEPARATOR, Reply
from runbooks.engine.approving import may_request
from runbooks.engine.refusals import Refused
from runbooks.engine.store import StoreUnavailable
from runbooks.errors import ClusterError
from runbooks.policy import Policy

log = logging.getLogger("upgradebot.routing")

Outcome = Literal["ok", "usage", "unknown", "denied", "refused", "failed", "error"]
UNKNOWN = "unknown"
"""The verb label of commands whose verb is not registered (metrics stay bounded)."""


@dataclass(frozen=True)
class Caller:
    """Who sent the command, and where from; ``channel`` None: no channel rules (shell)."""

    user: str
    channel: str | None = None
    surface: str = "slack"


@dataclass(frozen=True)
class Verb:
    """One command: its usage line, how to parse its words and how to handle the request.

    ``parse`` raises :class:`UsageError` for bad words; ``handle`` gets the parsed request
    and the caller and returns a :class:`Reply`. ``mutating`` verbs are limited to the
    policy's requesters; ``takes_cluster`` verbs get a channel's default ``cluster=``.
    """

    name: str
    usage: str
    summary: str
    parse: Callable[[Sequence[str]], Any]
    handle: Callable[[Any, Caller], Reply]
    mutating: bool = False
    takes_cluster: bool = True


def presented(
    name: str, *, usage: str, summary: str, parse: Callable[[Sequence[str]], Any],
    handle: Callable[[Any, Caller], Any], present: Callable[[Any], Reply],
    mutating: bool = False, takes_cluster: bool = True,
) -> Verb:
    """A verb from a handler that returns a model (``Inventory``, the engine's ``Outcome``)
    and a presenter that turns the model into a :class:`Reply` (``inventory.summarize``)."""
    return Verb(name=name, usage=usage, summary=summary, parse=parse,
                handle=lambda request, caller: present(handle(request, caller)),
                mutating=mutating, takes_cluster=takes_cluster)


class Registry:
    """Verbs by name, in the order they were registered (the order of ``help``)."""

    def __init__(self, verbs: Sequence[Verb] = ()) -> None:
        self._verbs: dict[str, Verb] = {}
        for verb in verbs:
            self.register(verb)

    def register(self, verb: Verb) -> Verb:
        if verb.name in self._verbs:
            raise ValueError(f"verb {verb.name!r} is registered twice")
        if not verb.name or verb.name != verb.name.lower() or verb.name == UNKNOWN:
            raise ValueError(f"verb {verb.name!r}: use a lower-case word other than {UNKNOWN!r}")
        self._verbs[verb.name] = verb
        return verb

    def get(self, name: str) -> Verb | None:
        return self._verbs.get(name)

    def __iter__(self) -> Iterator[Verb]:
        return iter(self._verbs.values())

    def __contains__(self, name: object) -> bool:
        return name in self._verbs

    @property
    def usages(self) -> list[str]:
        return [verb.usage for verb in self]


HELP_USAGE = "help [verb]"


def help_verb(registry: Registry) -> Verb:
    """``help [verb]``: every verb's usage line and summary, or one verb's."""

    def parse(words: Sequence[str]) -> str | None:
        positional, _ = split_pairs(words, allowed=(), usage=HELP_USAGE, max_positional=1)
        return positional[0].lower() if positional else None

    def handle(only: str | None, caller: Caller) -> Reply:
        verbs = [v for v in registry if only is None or v.name == only]
        if not verbs:
            return Reply.error(msg.unknown_verb(only or ""), usage=registry.usages)
        lines = [f"{v.usage}{SUMMARY_SEPARATOR}{v.summary}" for v in verbs]
        return Reply(title=msg.help_title(), text=msg.help_text(), usage=lines, ephemeral=True)

    return Verb(name="help", usage=HELP_USAGE, summary="this list", parse=parse, handle=handle, takes_cluster=False)


def default_registry(*verbs: Verb) -> Registry:
    """A registry with ``help`` first, then ``verbs``."""
    registry = Registry()
    registry.register(help_verb(registry))
    for verb in verbs:
        registry.register(verb)
    return registry


@dataclass(frozen=True)
class Routed:
    """The reply, and for metrics and logs which verb it was and how it went."""

    verb: str
    outcome: Outcome
    reply: Reply


class Router:
    def __init__(self, registry: Registry, policy: Policy, directory: Directory | None = None) -> None:
        self.registry = registry
        self.policy = policy
        self.directory = directory or StaticDirectory()

    def route(self, text: str, caller: Caller) -> Routed:
        """The reply to one command line; never raises."""
        words = split_words(text) or ["help"]
        name = words[0].lower()
        channels = self.policy.channels
        if channels and caller.channel is not None and caller.channel not in channels:
            label = name if name in self.registry else UNKNOWN
            return Routed(label, "denied", Reply.error(msg.channel_not_allowed(caller.channel, channels)))
        verb = self.registry.get(name)
        if verb is None:
            return Routed(UNKNOWN, "unknown", Reply.error(msg.unknown_verb(words[0]), usage=self.registry.usages))
        try:
            if verb.mutating and not may_request(self.policy, requester(caller.user, self.policy, self.directory)):
                return Routed(verb.name, "denied", Reply.error(msg.not_a_requester(verb.name), usage=[verb.usage]))
            request = verb.parse(self._with_default_cluster(verb, words[1:], caller))
            return Routed(verb.name, "ok", verb.handle(request, caller))
        except UsageError as exc:
            return Routed(verb.name, "usage", Reply.error(exc.reason, usage=[exc.usage]))
        except Refused as exc:
            return Routed(verb.name, "refused", Reply.error(msg.refused(str(exc)), usage=[verb.usage]))
        except DirectoryUnavailable as exc:
            reason = msg.directory_unavailable(verb.name, str(exc))
            return Routed(verb.name, "failed", Reply.error(reason, usage=[verb.usage]))
        except ClusterError as exc:
            reason = msg.cluster_failed(" ".join(str(exc).split()))
            return Routed(verb.name, "failed", Reply.error(reason, usage=[verb.usage]))
        except StoreUnavailable as exc:
            return Routed(verb.name, "failed", Reply.error(msg.store_unavailable(str(exc)), usage=[verb.usage]))
        except Exception:
            reference = secrets.token_hex(4)
            log.exception("verb %s failed (reference %s, user %s)", verb.name, reference, caller.user)
            return Routed(verb.name, "error", Reply.error(msg.internal_error(verb.name, reference)))

    def _with_default_cluster(self, verb: Verb, words: list[str], caller: Caller) -> list[str]:
        if not verb.takes_cluster or caller.channel is None or any(w.startswith("cluster=") for w in words):
            return words
        channel = self.policy.channels.get(caller.channel)
        if channel is None or not channel.cluster:
            return words
        return [*words, f"cluster={channel.cluster}"]
