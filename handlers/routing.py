"""``/upgrade <verb> [target] [key=value ...]``: from a line of text to a handler's reply.

A verb is one :class:`Command`, a row of the table in :mod:`handlers.verbs`: its name,
usage line, summary, how to parse its words, how to handle the request (a model: the
engine's ``Outcome``, an ``Inventory``, a verify result…), how to present that model as a
:class:`Reply`, and what the shell makes of it (exit code, ``--json``). The chat router
binds each row to a surface's :class:`Deps` as a :class:`Verb`; the shell's argparse is
built from the same rows.

The router decodes Slack's encodings, splits the words, applies the channel rules of
the policy (allowed channels, a channel's default cluster, who may run mutating verbs)
and calls the verb's ``parse`` then ``handle``. Every path ends in a :class:`Reply`:
an unknown verb, bad arguments, a refusal or a failure get an ephemeral one with the
reason and the usage lines, and nothing is started.

A verb is registered once, with its dependencies already bound (the front end's wiring
builds the registry)::

    registry = default_registry(*chat_verbs(deps))   # handlers.verbs: the whole table
    router = Router(registry, policy, directory)
    routed = router.route("inventory cluster=prod", Caller(user="U1", channel="C1"))
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from pydantic import BaseModel

from handlers import messages as msg
from handlers.access import Directory, DirectoryUnavailable, StaticDirectory, actor, requester
from handlers.argument_help import described
from handlers.arguments import UsageError, split_pairs
from handlers.decoding import words as split_words
from handlers.replies import SUMMARY_SEPARATOR, Reply
from runbooks.engine import refusals
from runbooks.engine.actors import Actor
from runbooks.engine.clocks import Cancelled
from runbooks.engine.refusals import Refused
from runbooks.engine.store import StoreUnavailable
from runbooks.errors import ClusterError

if TYPE_CHECKING:  # types only: `upgradebot --help` builds the verb table without the client and the engine (issue 39)
    from handlers.verbs import Entry
    from runbooks.cluster import Cluster
    from runbooks.cluster.informing import Watches
    from runbooks.engine.commands import Engine
    from runbooks.engine.reading import Runs
    from runbooks.engine.steps import Clock
    from runbooks.policy import Policy
    from runbooks.stability.tallying import Tally

log = logging.getLogger("upgradebot.routing")

Outcome = Literal["ok", "usage", "unknown", "denied", "refused", "failed", "error"]
Lane = Literal["ack", "decision", "long", "short"]
"""Which workers a command runs on: ``ack`` (none: answered in the acknowledgement by the process
that received it, because its answer needs only the words and the policy: ``help``), ``decision``
(approve, reject, rollback, close: their own workers, never queued behind reads), ``long`` (reads
that take seconds to minutes: limited per user and channel), ``short`` (the rest)."""
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
"""The shell's exit codes: all checks passed (or waiting at a gate); a check or the run
failed; bad usage, a refusal or an unreachable dependency."""
ReadTally = Callable[[str], tuple["Tally | None", dict[str, str]]]
"""A run's collected events as the store keeps them (the Redis store's ``read_tally``)."""
UNKNOWN = "unknown"
"""The verb label of commands whose verb is not registered (metrics stay bounded)."""


@dataclass(frozen=True)
class Caller:
    """Who sent the command, and where from; ``channel`` None: no channel rules (shell).

    ``user`` is who the surface vouches for: Slack's user id, or from the shell the
    identity the policy maps the OS account (or CI token) to; ``account`` is that OS
    account or CI identity (``alice``, ``ci:release``), for the audit trail."""

    user: str
    channel: str | None = None
    surface: str = "slack"
    account: str = ""
    asked_at: float | None = None
    """When the command was asked (seconds since the epoch: the front end's clock when it queued
    it); None: now. A read that began after it, or was still running then, answers it as well as
    one begun for it."""


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
    lane: Lane = "short"


T = TypeVar("T")


KEEP_FOR = 120.0
"""Seconds :meth:`InFlight.since` keeps a result after its read ended (as the watch cache lingers)."""


class InFlight:
    """Identical reads in flight done once: callers asking for ``key`` while another caller's read
    of it runs wait for that read and get its result (or its exception). Nothing is cached after
    it finishes for :meth:`do`: the next caller reads anew. :meth:`since` also keeps the last
    result of each key with the moments its read began and ended, and answers with it whoever
    asked before it ended: one asked before it began gets a read begun after they asked, as
    fresh as one begun for them; one asked while it ran would have joined it had a thread taken
    them at once, and gets what joining gives, however long they waited on a queue. A kept
    result is let go ``keep_for`` seconds after its read ended (an inventory of 5,000 nodes is
    about 34 MiB): by then whoever waited in a burst before it has been answered."""

    def __init__(self, clock: Callable[[], float] = time.time, *, keep_for: float = KEEP_FOR) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, _Flight] = {}
        self._last: dict[Hashable, tuple[float, Any, float]] = {}
        """Per key: when its last read began, its result, when it ended."""
        self._clock, self.keep_for = clock, keep_for
        self._sweep: threading.Timer | None = None
        self.shared = 0
        """Callers that got another's result (for tests and metrics)."""

    def do(self, key: Hashable, read: Callable[[], T]) -> T:
        return self._do(key, read, keep=False)

    def since(self, key: Hashable, asked_at: float | None, read: Callable[[], T]) -> T:
        """``read()``'s result for a caller who asked at ``asked_at`` (None: now): the last one
        kept under ``key`` if its read began at or after then or was still running then, else the
        one in flight, else a new one, kept (one per key: ``key`` must come from a bounded set, a
        cluster's name)."""
        if asked_at is not None:
            with self._lock:
                last = self._last.get(key)
                if last is not None and (last[0] >= asked_at or asked_at < last[2]) \
                        and self._clock() - last[2] < self.keep_for:
                    self.shared += 1
                    return cast("T", last[1])
        return self._do(key, read, keep=True)

    def _do(self, key: Hashable, read: Callable[[], T], *, keep: bool) -> T:
        with self._lock:
            flight = self._running.get(key)
            leader = flight is None
            if flight is None:
                flight = self._running[key] = _Flight()
            else:
                self.shared += 1
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return cast("T", flight.value)
        began = self._clock()
        try:
            flight.value = read()
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                self._running.pop(key, None)
                if keep and flight.error is None:
                    self._last[key] = (began, flight.value, self._clock())
                    self._sweep_later()
            flight.done.set()
        return cast("T", flight.value)

    def expire(self) -> None:
        """Let go of the results kept ``keep_for`` seconds or more (a timer calls it while any is kept)."""
        with self._lock:
            self._sweep = None
            now = self._clock()
            for key in [k for k, (_, _, ended) in self._last.items() if now - ended >= self.keep_for]:
                del self._last[key]
            self._sweep_later()

    def _sweep_later(self) -> None:
        if self._sweep is None and self._last:  # one timer at a time, while anything is kept
            self._sweep = threading.Timer(self.keep_for, self.expire)
            self._sweep.daemon = True
            self._sweep.start()


class _Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class Deps:
    """What handlers may use, bound once per surface: the policy, the cluster factory, the
    user-group directory, the run engine, the store's event tallies and the clock the
    checks wait on (the engine's: a simulated cluster's minutes pass as fast as its runs').

    ``watches``: the process's watch cache, when it has one and no engine (the engine's otherwise).
    The engine may be given or opened on first use (``open_engine``): the shell's
    ``inventory`` and ``verify`` never start Redis. So may the policy (``load_policy``): the
    shell's ``status`` without a policy file never builds the default one (issue 39).
    """

    def __init__(self, *, policy: Policy | None = None, connect: Callable[[str | None], Cluster],
                 directory: Directory | None = None, engine: Engine | None = None,
                 open_engine: Callable[[], Engine] | None = None, read_tally: ReadTally | None = None,
                 clock: Clock | None = None, open_reader: Callable[[], Runs] | None = None,
                 load_policy: Callable[[], Policy] | None = None, watches: Watches | None = None) -> None:
        if policy is None and load_policy is None:
            raise ValueError("Deps needs a policy or a load_policy")
        self._policy, self._load_policy = policy, load_policy
        self.connect, self.clock = connect, clock
        self.in_flight = InFlight()
        """Identical reads running at once are read once (fifty ``inventory`` in a second: one)."""
        self.directory: Directory = directory or StaticDirectory()
        self._engine, self._open_engine, self._read_tally = engine, open_engine, read_tally
        self._open_reader = open_reader
        self._watches = watches

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            assert self._load_policy is not None  # checked when built
            self._policy = self._load_policy()
        return self._policy

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            if self._open_engine is None:
                raise RuntimeError("this surface was built without a run engine")
            self._engine = self._open_engine()
        return self._engine

    @property
    def watches(self) -> Watches | None:
        """The process's watch cache: the one given (a read-only front end's), else the engine's when
        it is open (a worker's); the shell keeps none for a read."""
        if self._watches is not None or self._engine is None:
            return self._watches
        return self._engine.watches

    @property
    def runs(self) -> Runs:
        """What reads runs: the engine when it is open or there is no ``open_reader``, else a reader
        of the store alone (the shell's ``status`` and ``runs`` build no engine: issue 39)."""
        if self._engine is None and self._open_reader is not None:
            return self._open_reader()
        return self.engine

    def read_tally(self, run_id: str) -> tuple[Tally | None, dict[str, str]]:
        if self._read_tally is None:
            return None, {}
        return self._read_tally(run_id)

    def actor(self, caller: Caller) -> Actor:
        """The caller as the engine sees them: their user id, every policy group they are in,
        and where they act from (the audit trail's surface and account)."""
        found = actor(caller.user, self.policy, self.directory)
        return replace(found, surface=caller.surface, account=caller.account)


def model_json(result: Any) -> Any:
    """What ``--json`` prints by default: the handler's model as JSON data."""
    return result.model_dump(mode="json") if isinstance(result, BaseModel) else result


@dataclass(frozen=True)
class Command:
    """One row of the verb table: what the chat router and the shell's argparse both read.

    ``handle(request, deps, caller)`` returns a model; ``present`` turns it into the
    :class:`Reply` every surface shows (Slack as Block Kit, the console and the shell as
    text). ``mutating`` verbs are limited to the policy's requesters; ``takes_cluster``
    verbs get a channel's default ``cluster=``; ``acts`` verbs need to know who acts (the
    shell's identity); ``chat`` False keeps a verb to the shell (``resume``: a serving bot
    resumes runs by itself); ``lane`` says which workers a chat surface runs it on
    (:data:`Lane`). ``exit_code`` and ``to_json`` are the shell's view of the model.
    """

    name: str
    usage: str
    summary: str
    parse: Callable[[Sequence[str]], Any]
    handle: Callable[[Any, Deps, Caller], Any]
    present: Callable[..., Reply]
    mutating: bool = False
    takes_cluster: bool = True
    acts: bool = False
    chat: bool = True
    lane: Lane = "short"
    shell_files: bool = False
    """The shell offers ``-f <file|dir>`` (kubectl's flag) and hands the paths to the request's
    ``files``; a chat surface never reads files on the machine the bot runs on."""
    exit_code: Callable[[Any], int] = lambda result: EXIT_OK
    to_json: Callable[[Any], Any] = model_json
    flags: tuple[str, ...] = ()
    """Words of the verb that look like options (``--all``): the shell's argparse takes each as a
    flag and hands it back among the words, as a chat passes it."""
    by_surface: bool = False
    """``present`` takes the surface too (``surface=``: ``slack``, ``console``, ``shell``) and words
    its reply for it: a thread and buttons in Slack, commands where there are none (issue 41)."""

    @classmethod
    def of(cls, row: Entry, parse: Callable[[Sequence[str]], Any], handle: Callable[[Any, Deps, Caller], Any],
           present: Callable[..., Reply], **shell: Any) -> Command:
        """The command of a row of :data:`handlers.verbs.VERBS` (its name, usage, summary and the
        router's and parser's data, written there only), bound to its handler's functions;
        ``shell``: ``exit_code``, ``to_json``, ``by_surface``."""
        return cls(row.name, row.usage, row.summary, parse, handle, present, mutating=row.mutating,
                   takes_cluster=row.takes_cluster, acts=row.acts, chat=row.chat, lane=row.lane,
                   shell_files=row.shell_files, flags=row.flags, **shell)

    def reply(self, result: Any, surface: str) -> Reply:
        """The :class:`Reply` to ``result`` as ``surface`` shows it."""
        return self.present(result, surface=surface) if self.by_surface else self.present(result)

    def verb(self, deps: Deps) -> Verb:
        """This row for the chat router, its handler bound to ``deps``. A result shared by several
        callers (:class:`InFlight`) is presented once per surface: the last one presented is kept
        (at 5,000 nodes, an inventory's summary was a quarter of a worker's CPU, made again for
        each of the callers one inventory answered)."""
        last: list[tuple[Callable[[], Any], str, Reply]] = []

        def handle(request: Any, caller: Caller) -> Reply:
            result = self.handle(request, deps, caller)
            kept = last[0] if last else None
            if kept is not None and kept[0]() is result and kept[1] == caller.surface:
                return kept[2]
            reply = self.reply(result, caller.surface)
            with contextlib.suppress(TypeError):  # a result that cannot be referred to weakly is not kept
                last[:] = [(weakref.ref(result), caller.surface, reply)]  # never keeps the result alive
            return reply

        return Verb(name=self.name, usage=self.usage, summary=self.summary, parse=self.parse, handle=handle,
                    mutating=self.mutating, takes_cluster=self.takes_cluster, lane=self.lane)


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

    @property
    def names(self) -> list[str]:
        return list(self._verbs)


HELP_USAGE = "help [verb]"


def help_verb(registry: Registry) -> Verb:
    """``help [verb]``: every verb's usage line and summary, or one verb's."""

    def parse(words: Sequence[str]) -> str | None:
        positional, _ = split_pairs(words, allowed=(), usage=HELP_USAGE, max_positional=1)
        return positional[0].lower() if positional else None

    def handle(only: str | None, caller: Caller) -> Reply:
        verbs = [v for v in registry if only is None or v.name == only]
        if not verbs:
            return Reply.error(msg.unknown_verb(only or "", registry.names), usage=registry.usages)
        lines = [f"{v.usage}{SUMMARY_SEPARATOR}{v.summary}" for v in verbs]
        text = msg.HELP_TEXT if only is None else "\n".join(
            msg.argument_line(name, meaning) for name, meaning in described(verbs[0].name, verbs[0].usage))
        return Reply(title=msg.HELP_TITLE, text=text, usage=lines, ephemeral=True)

    return Verb(name="help", usage=HELP_USAGE, summary="this list", parse=parse, handle=handle, takes_cluster=False,
                lane="ack")


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
    def __init__(self, registry: Registry, policy: Policy, directory: Directory | None = None, *,
                 disabled: Mapping[str, str] | None = None) -> None:
        """``disabled``: verbs this surface leaves out on purpose (a read-only ``serve``), each
        with the reason said instead of "unknown verb" when it is asked for."""
        self.registry = registry
        self.policy = policy
        self.directory = directory or StaticDirectory()
        self.disabled = dict(disabled or {})

    def lane(self, text: str) -> tuple[str, Lane]:
        """The verb ``text`` names (``help`` when it names none, as :meth:`route` answers it) and its
        lane (:data:`UNKNOWN` and ``short`` for anything else)."""
        words = split_words(text) or ["help"]
        verb = self.registry.get(words[0].lower())
        return (verb.name, verb.lane) if verb is not None else (UNKNOWN, "short")

    def verbs_in(self, lane: Lane) -> list[str]:
        return [verb.name for verb in self.registry if verb.lane == lane]

    def route(self, text: str, caller: Caller) -> Routed:
        """The reply to one command line; never raises."""
        words = split_words(text) or ["help"]
        name = words[0].lower()
        channels = self.policy.channels
        if channels and caller.channel is not None and caller.channel not in channels:
            label = name if name in self.registry else UNKNOWN
            return Routed(label, "denied", Reply.error(msg.channel_not_allowed(caller.channel, channels)))
        verb = self.registry.get(name)
        if verb is None and name in self.disabled:
            return Routed(name, "denied", Reply.error(self.disabled[name], usage=self.registry.usages))
        if verb is None:
            return Routed(UNKNOWN, "unknown", Reply.error(msg.unknown_verb(words[0], self.registry.names),
                                                          usage=self.registry.usages))
        try:
            if verb.mutating and not _may_request(self.policy, requester(caller.user, self.policy, self.directory)):
                return Routed(verb.name, "denied", Reply.error(refusals.not_a_requester(caller.user), usage=[verb.usage]))
            request = verb.parse(self._with_default_cluster(verb, words[1:], caller))
            return Routed(verb.name, "ok", verb.handle(request, caller))
        except UsageError as exc:
            return Routed(verb.name, "usage", Reply.error(exc.reason, usage=[exc.usage]))
        except Refused as exc:
            return Routed(verb.name, "refused", Reply.error(str(exc), usage=[verb.usage]))
        except DirectoryUnavailable as exc:
            reason = msg.directory_unavailable(verb.name, str(exc))
            return Routed(verb.name, "failed", Reply.error(reason, usage=[verb.usage]))
        except ClusterError as exc:
            reason = msg.cluster_failed(" ".join(str(exc).split()))
            return Routed(verb.name, "failed", Reply.error(reason, usage=[verb.usage]))
        except StoreUnavailable as exc:
            return Routed(verb.name, "failed", Reply.error(msg.store_unavailable(str(exc)), usage=[verb.usage]))
        except Cancelled:
            return Routed(verb.name, "failed", Reply.error(msg.cancelled(verb.name)))
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


def _may_request(policy: Policy, actor: Actor) -> bool:
    """The engine's rule (:func:`runbooks.engine.approving.may_request`), loaded by the router that
    routes a mutating verb: the shell's reading verbs load no policy model (issue 39)."""
    from runbooks.engine.approving import may_request

    return may_request(policy, actor)
