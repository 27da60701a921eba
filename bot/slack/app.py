"""The Bolt app: the slash command and the Approve/Reject buttons, wired to the router.

Every listener calls ``ack()`` first and hands the rest on: with a job queue
(:mod:`bot.jobs`, what ``upgradebot serve`` runs) to the worker processes, which run it
with :meth:`Listeners.run_job`; without one (tests, the console) to the bounded
:class:`~bot.workers.Workers` pools of this process. Nothing slow happens before the
HTTP answer leaves. Over HTTP with a queue, the bot's command and clicks do not reach
Bolt at all: the HTTP layer offers each checked request to :meth:`Listeners.take`, which
queues them as the listeners would (Bolt's dispatch was a third of the front end's CPU).
The app runs with ``process_before_response=True`` because the listener itself only
acks and enqueues: the answer goes out as soon as it returns, without Bolt's extra
executor hop and its 10 ms polling for ``ack()``.

In a worker: the delivery is claimed once under its ``trigger_id`` (a Slack retry,
``X-Slack-Retry-Num``, finds the key taken and is dropped), the command is routed, the
reply is posted with ``chat.postMessage`` (its thread items under it) or, when
ephemeral, sent to the ``response_url`` (``chat.postEphemeral`` if that fails). A click
becomes a :class:`~handlers.decisions.Click` for the :class:`~handlers.decisions.Decisions`
the engine wiring provides; the clicked message is updated with ``chat.update``.

Bolt's own ``authorize`` is a cached :class:`BotIdentity`: no ``auth.test`` on the path
to ``ack()``; readiness refreshes it.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

from slack_bolt import Ack, App, BoltRequest, Respond
from slack_sdk.errors import SlackClientError

from bot import logs
from bot.jobs import WAIT_MAX, Jobs, JobsBusy, JobsUnavailable, queued_at, queued_for
from bot.settings import Settings
from bot.slack.blocks import Payload, escape, render_message, render_reply
from bot.slack.idempotency import Idempotency
from bot.slack.identity import BOLT_LOG, BotAuthorize, BotIdentity
from bot.slack.metrics import Metrics
from bot.slack.transport import KeptAliveResponses
from bot.slack.web import SlackWeb, error_code, make_client
from bot.workers import Quotas, Workers
from handlers import messages as msg
from handlers.clicks import Click, Decisions
from handlers.replies import Reply, channel_ref, user_ref
from handlers.routing import Caller, Router
from handlers.run_views import ACTIONS, run_of_ref
from runbooks.engine.store import StoreUnavailable
from runbooks.policy import Policy

log = logging.getLogger("upgradebot.slack")

NOT_QUEUED = frozenset({"token"})
"""Fields of a request the workers never read and Redis never keeps: Slack's deprecated
verification token, sent with every command and click."""
ACK_ANSWERS = 256
"""Answers rendered in the ack kept by their words and channel (:meth:`Listeners.answer_in_ack`)."""
DEDUPE_TTL = dt.timedelta(hours=1)
"""How long a delivery's key stays claimed; Slack retries within minutes."""


@dataclass
class SlackDeps:
    """What the listeners need; the engine wiring adds ``decisions``.

    Commands run on ``workers``; decisions (every click, and the ``decision`` lane's
    commands) on ``decision_workers``, which long reads never occupy; long commands count
    against ``quotas`` (per user and per channel) while they run."""

    router: Router
    web: SlackWeb
    idempotency: Idempotency
    workers: Workers
    metrics: Metrics
    decision_workers: Workers
    quotas: Quotas
    decisions: Decisions | None = None
    notices: Workers | None = None
    """Where "busy" and quota answers are sent from (bounded); without it, a thread each."""
    jobs: Jobs | None = None
    """With it, the listeners only queue (:mod:`bot.jobs`): worker processes run the work,
    and ``workers``/``decision_workers`` stay idle."""
    rewrite: Callable[[str, str, str, Payload], object] | None = None
    """``rewrite(button value, channel, ts, payload)``: a decided gate's message rewritten once
    (:meth:`bot.slack.threads.SlackThreads.rewrite_decided`); without it, ``chat.update``."""
    later: Callable[[str, str, dict[str, Any]], object] | None = None
    """In a worker: ``later(lane, kind, payload)`` puts a job back on its lane, taken again a
    moment later (:meth:`bot.jobs.Jobs.later`): a long read waits its turn there."""


def respond_of(body: dict[str, Any], responses: KeptAliveResponses | None = None) -> Respond:
    """Bolt's ``respond`` for a request outside Bolt's dispatch: to its ``response_url`` (over
    ``responses``' kept-alive connections when given)."""
    url = body.get("response_url")
    url = url if isinstance(url, str) else None
    return Respond(response_url=url) if responses is None else responses.respond(url)  # type: ignore[return-value]


def delivery_key(kind: str, body: dict[str, Any]) -> str:
    """What a retried delivery has in common with the first: its ``trigger_id``."""
    trigger = body.get("trigger_id")
    if trigger:
        return f"slack:{kind}:{trigger}"
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
    return f"slack:{kind}:{digest[:32]}"


def retry_of(request: BoltRequest) -> str | None:
    values = request.headers.get("x-slack-retry-num")
    return values[0] if values else None


class Listeners:
    def __init__(self, deps: SlackDeps, prefix: str, *, teams: list[str], identity: BotIdentity) -> None:
        self.deps = deps
        self.prefix = prefix
        self.teams, self.identity = teams, identity
        self._in_ack = functools.lru_cache(maxsize=ACK_ANSWERS)(self._answer_of)
        """What :meth:`answer_in_ack` answers to a command's words in a channel, rendered once."""
        self._refusals = functools.lru_cache(maxsize=8)(self._refusal_of)
        """A refusal's ack (:meth:`_refusal_of`), rendered once: a few fixed texts."""
        self.responses = KeptAliveResponses()
        """Where the queued requests' ``response_url`` s are answered: over kept-alive connections."""

    def _foreign(self, body: dict[str, Any], respond: Respond) -> bool:
        """Whether the request comes from a workspace the policy does not list (by default: any
        but the bot's own); such a request is answered and nothing else is done."""
        team = self._foreign_team(body)
        if team is not None:
            self._say(respond, body, msg.foreign_team(team))
        return team is not None

    def _foreign_team(self, body: dict[str, Any]) -> str | None:
        """The workspace of a request from one the policy does not list (``unknown`` when it names
        none), logged; None when it may be answered."""
        user = body.get("user") if isinstance(body.get("user"), dict) else {}
        team = str((user or {}).get("team_id") or (body.get("team") or {}).get("id") or body.get("team_id") or "")
        enterprise = str(body.get("enterprise_id") or (body.get("enterprise") or {}).get("id") or "")
        allowed = list(self.teams)
        if enterprise and enterprise in allowed:  # an Enterprise Grid organisation the policy lists
            return None
        if not allowed:
            if self.identity.team_id is None:
                try:
                    self.identity.refresh(self.deps.web)
                except (SlackClientError, OSError) as exc:
                    log.warning("cannot tell the bot's own workspace (auth.test: %s)", error_code(exc))
            allowed = [self.identity.team_id] if self.identity.team_id else []
        if team and team in allowed:
            return None
        log.warning("refused a request from workspace %s (allowed: %s)", team or "-", ", ".join(allowed) or "-")
        return team or "unknown"

    # ------------------------------------------------------------------ requests
    def on_command(self, ack: Ack, body: dict[str, Any], request: BoltRequest, respond: Respond) -> None:
        answer = self.answer_in_ack(body)
        if answer is not None:
            ack(**answer)
            return
        if self.deps.jobs is not None:  # the workers run it, in other processes; a refusal is said in the ack
            refused = self._queue_command(body, retry_of(request))  # (the ack leaves when this returns anyway)
            if refused is None:
                ack()
            else:
                ack(**self._refusals(refused)[0])
            return
        ack()
        _, lane = self.deps.router.lane(str(body.get("text", "")))
        if lane == "decision":
            self._enqueue(self.deps.decision_workers, self.run_command, body, retry_of(request), respond)
        elif lane == "long":
            self._enqueue_long(body, retry_of(request), respond)
        else:
            self._enqueue(self.deps.workers, self.run_command, body, retry_of(request), respond)

    def on_action(self, ack: Ack, body: dict[str, Any], request: BoltRequest, respond: Respond) -> None:
        ack()
        if self.deps.jobs is not None:
            self._queue_click(body, retry_of(request), respond)
        else:
            self._enqueue(self.deps.decision_workers, self.run_click, body, retry_of(request), respond)

    def take(self, body: dict[str, Any], retry: str | None) -> bytes | None:
        """A request the HTTP front end offers before Bolt sees it (:class:`~bot.slack.http.WebApp`,
        once it has checked the signature and the shape): with a job queue, the bot's slash
        command and a click of its buttons are queued here as their listeners would queue them
        (``b""``: the answer is the empty 200 that ``ack()`` gives), and Bolt's dispatch, its second
        parse and its listener matching are spared on the path every command takes; a command of
        the ``ack`` lane is answered in the 200 itself (its JSON: :meth:`answer_in_ack`), and so is a
        command the queue refuses (its lane full, Redis not answering: :meth:`_queue`). Anything
        else (an ``ssl_check``, another command, another payload), or no queue: None, for Bolt."""
        if self.deps.jobs is None or body.get("ssl_check"):
            return None
        if body.get("command") == self.prefix:
            encoded = self.answer_in_ack(body, encoded=True)
            if encoded is not None:
                return encoded
            refused = self._queue_command(body, retry)
            return b"" if refused is None else self._refusals(refused)[1]
        actions = body.get("actions")
        if body.get("type") == "block_actions" and isinstance(actions, list) and actions \
                and isinstance(actions[0], dict) and actions[0].get("action_id") in ACTIONS:
            self._queue_click(body, retry, respond_of(body, self.responses))
            return b""
        return None

    @overload
    def answer_in_ack(self, body: dict[str, Any], *, encoded: Literal[False] = ...) -> dict[str, Any] | None: ...

    @overload
    def answer_in_ack(self, body: dict[str, Any], *, encoded: Literal[True]) -> bytes | None: ...

    def answer_in_ack(self, body: dict[str, Any], *, encoded: bool = False) -> dict[str, Any] | bytes | None:
        """The answer of a command of the ``ack`` lane (``help``: it needs only its words and the
        policy), as the acknowledgement's own body (an ephemeral message: Slack shows it to the
        caller as it would the ``response_url``'s; ``encoded``: its JSON), rendered by the process
        that received the command: no queue, no worker, no Redis on its way (issue 39: queued,
        ``help`` waited its turn behind the store's writes and the workers' answers). The same
        words in the same channel get the same answer, so it is rendered once (:data:`ACK_ANSWERS`
        kept), each command still counted and logged. A workspace the policy does not list is
        refused in it the same way. No delivery is claimed: Slack retries a command whose
        acknowledgement it did not get, and that retry is answered again. None for any other
        command: it is acknowledged empty, then queued or run."""
        text = str(body.get("text", ""))
        verb, lane = self.deps.router.lane(text)
        if lane != "ack":
            return None
        user, channel = str(body.get("user_id", "")), body.get("channel_id")
        with logs.bound(user=user, channel=str(channel or ""), verb=verb):
            team = self._foreign_team(body)
            if team is not None:
                answer = _ephemeral_ack(render_reply(Reply.error(msg.foreign_team(team)), prefix=self.prefix).main)
                return _encoded(answer) if encoded else answer
            routed_verb, outcome, answer, body_bytes = self._in_ack(text, channel if isinstance(channel, str) else None)
            self.deps.metrics.commands.labels(verb=routed_verb, outcome=outcome, surface="slack").inc()
            log.info("command %s from %s in %s: %s (answered in the ack)", routed_verb, user, channel, outcome)
        return body_bytes if encoded else dict(answer)

    def _answer_of(self, text: str, channel: str | None) -> tuple[str, str, dict[str, Any], bytes]:
        """``text`` in ``channel`` routed and rendered (the verb, the outcome, the ack's message and
        its JSON): a command of the ``ack`` lane reads nothing of its caller but the channel."""
        routed = self.deps.router.route(text, Caller(user="", channel=channel))
        answer = _ephemeral_ack(render_reply(routed.reply.files_inline(), prefix=self.prefix).main)
        return routed.verb, routed.outcome, answer, _encoded(answer)

    def _queue_command(self, body: dict[str, Any], retry: str | None) -> str | None:
        """The command handed to the workers on its lane; None, or what to tell its caller when it
        was not queued (said in the ack: the refusal is known before the ack leaves)."""
        _, lane = self.deps.router.lane(str(body.get("text", "")))
        kind = "long" if lane == "long" else "command"
        return self._queue("decisions" if lane == "decision" else "commands", kind, body, retry)

    def _queue_click(self, body: dict[str, Any], retry: str | None, respond: Respond) -> None:
        """A click handed to the decision workers; one not queued is told so at its ``response_url``
        (a click's ack shows nothing), from the notice pool."""
        refused = self._queue("decisions", "click", body, retry)
        if refused is not None:
            self._later(respond, body, refused)

    def _queue(self, lane: str, kind: str, body: dict[str, Any], retry: str | None) -> str | None:
        """Hand the request to the workers (:mod:`bot.jobs`); None once queued, else what to tell
        the user (counted and logged here): the lane is full, or Redis did not store it in time
        or does not answer."""
        assert self.deps.jobs is not None
        kept = {k: v for k, v in body.items() if k not in NOT_QUEUED}
        try:
            queued = self.deps.jobs.submit(lane, kind, {"body": kept, "retry": retry})
        except JobsBusy as exc:  # Redis slow or hung: answered within Slack's 3 s, nothing queued
            log.warning("%s not queued: %s", kind, exc)
            self.deps.metrics.commands.labels(verb="-", outcome="busy", surface="slack").inc()
            return msg.BUSY
        except JobsUnavailable as exc:
            log.warning("%s not queued: %s", kind, exc)
            self.deps.metrics.commands.labels(verb="-", outcome="store_unavailable", surface="slack").inc()
            return msg.STORE_DOWN
        if not queued:  # one a request in a burst: the metric counts them, the log would hold every thread
            log.debug("the %s lane is full: a %s was refused", lane, kind)
            self.deps.metrics.commands.labels(verb="-", outcome="busy", surface="slack").inc()
            return msg.BUSY
        return None

    def _refusal_of(self, text: str) -> tuple[dict[str, Any], bytes]:
        """``text`` (why nothing was done) as the ack's ephemeral message, and its JSON."""
        answer = _ephemeral_ack(render_reply(Reply.error(text), prefix=self.prefix).main)
        return answer, _encoded(answer)

    def run_job(self, lane: str, kind: str, payload: dict[str, Any]) -> None:
        """One queued request, in a worker: a command, a long command (counted against the
        quotas while it runs) or a click, answered as if it had come here directly."""
        body = payload.get("body") or {}
        retry = payload.get("retry")
        if "waits" not in payload:  # taken for the first time (a long read waiting its turn comes back)
            self.deps.metrics.job_wait_seconds.labels(lane=lane).observe(queued_for(payload))
        respond = respond_of(body, self.responses)
        if kind == "click":
            self.run_click(body, retry, respond)
        elif kind == "long":
            self._run_queued_long(lane, payload, respond)
        elif kind == "command":
            self.run_command(body, retry, respond, asked_at=queued_at(payload))
        else:
            log.warning("a job of an unknown kind %r was dropped", kind)

    def _enqueue(self, pool: Workers, job: Any, body: dict[str, Any], retry: str | None, respond: Respond) -> bool:
        if pool.submit(job, body, retry, respond):
            return True
        self._later(respond, body, msg.BUSY)
        return False

    def _over_quota(self, body: dict[str, Any], respond: Respond, *,
                    wait: Callable[[], bool] | None = None) -> bool:
        """Whether a long command's user or channel has its quota of long commands running
        (said to the user from the notice pool, :meth:`_later`, and logged at DEBUG: a burst
        of refusals is counted by the metric, issue 63); if not, the command is counted in
        until :meth:`_quota_done`.
        A long read that finds this process's long reads all running is refused too, unless
        ``wait()`` put it back to wait its turn (True: nothing said)."""
        user, channel = str(body.get("user_id", "")), body.get("channel_id") or None
        full = self.deps.quotas.take(user, channel, read=self._long_read(body))
        if full is None:
            return False
        if full == "busy" and wait is not None and wait():
            return True
        quotas = self.deps.quotas
        verb, _ = self.deps.router.lane(str(body.get("text", "")))
        if full == "busy":
            log.debug("%s refused: %s long reads are running in this process", verb, quotas.reads)
            self.deps.metrics.commands.labels(verb=verb, outcome="busy", surface="slack").inc()
            text = msg.too_many_long_reads(quotas.reads or 0, ", ".join(self._long_reads()))
        else:
            who, limit = (user_ref(user), quotas.per_user) if full == "user" else (channel_ref(channel or ""),
                                                                                    quotas.per_channel)
            log.debug("%s refused: the %s quota of %s is full", verb, full, user if full == "user" else channel)
            self.deps.metrics.commands.labels(verb=verb, outcome="limited", surface="slack").inc()
            text = msg.too_many_long(who, limit, ", ".join(self.deps.router.verbs_in("long")))
        self._later(respond, body, text)
        return True

    def _quota_done(self, body: dict[str, Any]) -> None:
        self.deps.quotas.give(str(body.get("user_id", "")), body.get("channel_id") or None,
                              read=self._long_read(body))

    def _long_reads(self) -> list[str]:
        """The long commands that request nothing: they share :attr:`Quotas.reads`."""
        return [verb.name for verb in self.deps.router.registry if verb.lane == "long" and not verb.mutating]

    def _long_read(self, body: dict[str, Any]) -> bool:
        """Whether the command is a long read (``verify`` and its window, ``inventory``, ``report`` …):
        counted against the threads long reads may hold; a request (``canary``) is not, so it is
        answered while long reads hold all they may."""
        name, lane = self.deps.router.lane(str(body.get("text", "")))
        verb = self.deps.router.registry.get(name)
        return lane == "long" and verb is not None and not verb.mutating

    def _run_counted(self, body: dict[str, Any], retry: str | None, respond: Respond, *,
                     asked_at: float | None = None) -> None:
        """A long command counted in by :meth:`_over_quota`: run, and counted out as soon as its
        answer is known, before it is delivered (the slots count its work: the next long read
        runs while this one's message and thread are posted)."""
        counted = True

        def done() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._quota_done(body)

        try:
            self.run_command(body, retry, respond, asked_at=asked_at, answered=done)
        finally:
            done()

    def run_long(self, body: dict[str, Any], retry: str | None, respond: Respond, *,
                 wait: Callable[[], bool] | None = None, asked_at: float | None = None) -> None:
        """A long command taken off the queue: refused when its quota is full (said from the notice
        pool, so this thread takes the next message at once; from this thread when the pool is
        full, so no refusal is dropped), else run and counted out. ``wait``: see :meth:`_over_quota`."""
        if not self._over_quota(body, respond, wait=wait):
            self._run_counted(body, retry, respond, asked_at=asked_at)

    def _run_queued_long(self, lane: str, payload: dict[str, Any], respond: Respond) -> None:
        """A long command off the job queue (issue 39). A long read that finds every long-read slot
        of this process taken is not refused: it waits its turn, put back on its lane (``later``)
        to be taken again a moment later (:data:`~bot.jobs.WAIT_RATE`), its ``queued_at`` kept and
        nothing said (the ack told the user it was taken), while the threads reserved from long
        reads answer the rest. One that has waited :data:`~bot.jobs.WAIT_MAX` since it was queued
        is answered that it expired instead of running. The per-user and per-channel quotas
        still refuse at once, and the front end's lane still takes only what the workers answer."""
        body = payload.get("body") or {}
        retry = payload.get("retry")
        if queued_for(payload) > WAIT_MAX:
            verb, _ = self.deps.router.lane(str(body.get("text", "")))
            log.info("%s not started: it waited %.0f s, beyond Slack's answer", verb, queued_for(payload))
            self.deps.metrics.commands.labels(verb=verb, outcome="expired", surface="slack").inc()
            self._say(respond, body, msg.long_read_expired(verb, int(WAIT_MAX // 60)))
            return
        waits = payload.get("waits")
        waits = waits if isinstance(waits, int) and not isinstance(waits, bool) and waits >= 0 else 0
        later = self.deps.later

        def wait() -> bool:
            if later is None:
                return False
            try:
                later(lane, "long", {**payload, "waits": waits + 1})
            except JobsUnavailable as exc:  # cannot wait: refused as before
                log.warning("a long read could not be put back to wait its turn: %s", exc)
                return False
            return True

        self.run_long(body, retry, respond, wait=wait, asked_at=queued_at(payload))

    def _enqueue_long(self, body: dict[str, Any], retry: str | None, respond: Respond) -> None:
        """A long command, counted against its user's and channel's quotas while it runs."""
        if not self._over_quota(body, respond) and not self._enqueue(self.deps.workers, self._run_counted, body,
                                                                         retry, respond):
            self._quota_done(body)

    def _later(self, respond: Respond, body: dict[str, Any], text: str) -> None:
        """Say ``text`` from the notice pool, so the ack is not held up; when the pool is full,
        on this thread (the request's own: its ack waits for it), so no answer is ever dropped
        (issue 40, item 5: a burst of busy answers in read-only ``serve`` overflowed the pool)."""
        notices = self.deps.notices
        if notices is None:
            threading.Thread(target=self._say, args=(respond, body, text), daemon=True).start()
        elif not notices.submit(self._say, respond, body, text):
            self._say(respond, body, text)

    def _claimed(self, kind: str, body: dict[str, Any], retry: str | None, respond: Respond) -> bool:
        """Whether this delivery is the first; a Redis that does not answer is said, never silent."""
        try:
            first = self.deps.idempotency.claim_once(delivery_key(kind, body), DEDUPE_TTL)
        except StoreUnavailable as exc:
            log.warning("%s not handled: %s", kind, exc)
            self.deps.metrics.commands.labels(verb="-", outcome="store_unavailable", surface="slack").inc()
            self._say(respond, body, msg.STORE_DOWN)
            return False
        if first:
            return True
        self.deps.metrics.slack_duplicates.labels(kind=kind).inc()
        log.info("dropped a repeated %s delivery (X-Slack-Retry-Num %s)", kind, retry or "-")
        return False

    # ------------------------------------------------------------------- workers
    def run_command(self, body: dict[str, Any], retry: str | None, respond: Respond, *,
                    asked_at: float | None = None, answered: Callable[[], None] | None = None) -> None:
        """``asked_at``: when the front end queued it (its reads may share a read that ended since);
        ``answered()`` is called once its answer is known, before it is delivered."""
        verb, _ = self.deps.router.lane(str(body.get("text", "")))
        with logs.bound(user=str(body.get("user_id", "")), channel=str(body.get("channel_id") or ""), verb=verb):
            self._run_command(body, retry, respond, asked_at, answered)

    def _run_command(self, body: dict[str, Any], retry: str | None, respond: Respond, asked_at: float | None,
                     answered: Callable[[], None] | None) -> None:
        if self._foreign(body, respond) or not self._claimed("command", body, retry, respond):
            return
        user, channel = str(body.get("user_id", "")), body.get("channel_id")
        routed = self.deps.router.route(str(body.get("text", "")), Caller(user=user, channel=channel, asked_at=asked_at))
        if answered is not None:
            answered()
        self.deps.metrics.commands.labels(verb=routed.verb, outcome=routed.outcome, surface="slack").inc()
        log.info("command %s from %s in %s: %s", routed.verb, user, channel, routed.outcome)
        reply = routed.reply
        if reply.ephemeral or not channel:
            self._ephemeral(respond, body, render_reply(reply.files_inline(), prefix=self.prefix).main)
            return
        command = escape(f"{body.get('command') or self.prefix} {body.get('text', '')}".strip())
        try:
            self.deps.web.post_reply(channel, reply, prefix=self.prefix, context=msg.requested_by(user_ref(user), command))
        except (SlackClientError, OSError) as exc:
            code = error_code(exc)
            log.warning("posting the reply to %s in %s failed: %s", routed.verb, channel, code)
            missing = code in ("not_in_channel", "channel_not_found", "is_archived")
            self._say(respond, body, msg.not_in_channel(channel_ref(channel)) if missing else msg.delivery_failed(code))

    def run_click(self, body: dict[str, Any], retry: str | None, respond: Respond) -> None:
        action = (body.get("actions") or [{}])[0]
        value = str(action.get("value", ""))
        with logs.bound(user=str((body.get("user") or {}).get("id", "")), verb=str(action.get("action_id", "")),
                        channel=str((body.get("channel") or {}).get("id", "")), run=run_of_ref(value) or value[:16]):
            self._run_click(body, retry, respond)

    def _run_click(self, body: dict[str, Any], retry: str | None, respond: Respond) -> None:
        if self._foreign(body, respond) or not self._claimed("action", body, retry, respond):
            return
        actions = body.get("actions") or [{}]
        action_id = str(actions[0].get("action_id", ""))
        if self.deps.decisions is None:
            self.deps.metrics.approvals.labels(action=action_id, outcome="disabled").inc()
            self._say(respond, body, msg.NO_DECISIONS)
            return
        message = body.get("message") or {}
        try:
            click = Click(
                action=action_id, value=str(actions[0].get("value", "")), user=str((body.get("user") or {}).get("id", "")),
                channel=(body.get("channel") or {}).get("id") or "",  # checked against the gate's message
                message_ts=(body.get("container") or {}).get("message_ts") or message.get("ts"),
                thread_ts=message.get("thread_ts"),
            )
            decided = self.deps.decisions.decide(click)
        except Exception:  # a malformed click or a failing engine: say so, decide nothing
            reference = secrets.token_hex(4)
            log.exception("click %s failed (reference %s)", action_id, reference)
            self.deps.metrics.approvals.labels(action=action_id, outcome="error").inc()
            self._say(respond, body, msg.click_failed(reference))
            return
        self.deps.metrics.approvals.labels(action=click.action, outcome="accepted" if decided.accepted else "refused").inc()
        log.info("%s by %s on %s: %s", click.action, click.user, click.value, "accepted" if decided.accepted else "refused")
        if decided.replace is not None and click.channel and click.message_ts:
            payload = render_message(decided.replace)[0]
            if self.deps.rewrite is not None:  # once, whichever process closes the gate's message first
                self.deps.rewrite(click.value, click.channel, click.message_ts, payload)
            else:
                self.deps.web.update(click.channel, click.message_ts, payload)
        if decided.reply is None:
            return
        if decided.reply.ephemeral or not click.channel:
            self._ephemeral(respond, body, render_reply(decided.reply, prefix=self.prefix).main)
        else:
            self.deps.web.post_reply(click.channel, decided.reply, prefix=self.prefix,
                                     thread_ts=click.thread_ts or click.message_ts)

    # ------------------------------------------------------------------- replies
    def _say(self, respond: Respond, body: dict[str, Any], text: str) -> None:
        self._ephemeral(respond, body, render_reply(Reply.error(text), prefix=self.prefix).main)

    def _ephemeral(self, respond: Respond, body: dict[str, Any], payload: Payload) -> None:
        """To the ``response_url`` (works where the bot is not a member), else ``chat.postEphemeral``."""
        try:
            url = respond.response_url
            if isinstance(url, str) and url.startswith(("https://", "http://")):
                answer = respond(text=payload["text"], blocks=payload["blocks"], response_type="ephemeral",
                                 replace_original=False)
                if answer.status_code == 200:
                    return
                log.warning("response_url answered %s", answer.status_code)
        except (OSError, ValueError) as exc:
            log.warning("response_url failed: %s", type(exc).__name__)
        user = body.get("user_id") or (body.get("user") or {}).get("id")
        channel = body.get("channel_id") or (body.get("channel") or {}).get("id")
        if not (isinstance(user, str) and user and isinstance(channel, str) and channel):
            return
        try:
            self.deps.web.post_ephemeral(channel, user, payload)
        except (SlackClientError, OSError) as exc:  # not in the channel, archived, Slack down: nothing else to try
            log.warning("could not answer %s in %s: %s", user, channel, error_code(exc))


def _ephemeral_ack(payload: Payload) -> dict[str, Any]:
    return {"response_type": "ephemeral", "text": payload["text"], "blocks": payload["blocks"]}


def _encoded(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode()


def build_app(settings: Settings, policy: Policy, deps: SlackDeps, *, identity: BotIdentity) -> tuple[App, Listeners]:
    """The Bolt app for ``policy.slash_command`` and the Approve/Reject actions, and its
    listeners (a worker process runs queued requests with :meth:`Listeners.run_job`).

    Request signatures are verified with ``SLACK_SIGNING_SECRET`` (required over HTTP;
    Socket Mode deliveries are not signed and need none).
    """
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None

    app = App(
        client=make_client(settings, metrics=deps.metrics, with_token=False),
        signing_secret=secret or "",
        request_verification_enabled=bool(secret),
        authorize=BotAuthorize(identity),
        process_before_response=True,
        logger=BOLT_LOG,
        name="upgradebot",  # without it Bolt names the app from inspect.stack(): 47 ms of CPU each process start
    )
    listeners = Listeners(deps, policy.slash_command, teams=list(policy.slack.teams), identity=identity)
    app.command(policy.slash_command)(listeners.on_command)
    for action in ACTIONS:
        app.action(action)(listeners.on_action)
    return app, listeners
