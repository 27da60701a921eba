"""A run in Slack: one root message updated in place, and a thread of steps and requests.

:class:`SlackThreads` is a :class:`runbooks.engine.transitioning.Observer` for runs requested
from Slack (``origin`` ``{"surface": "slack", "channel": …}``). At the run's first event
it posts the root message (target, image, node, requester, state) and records its ``ts``
in the run with the engine's compare-and-set (``Engine.set_origin``), so a restarted
bot, or another replica, updates the same message with ``chat.update``. Each step of the
run (pre-checks, canary, verify, promotion, rollback) is one thread message, a checklist
posted at its first entry and edited in place as its checks come in
(:func:`handlers.run_views.phase_message`); its ``ts`` is kept with the run too
(``origin["step|<step>"]``), and a process that did not post it reads the step's entries
from the audit once before it edits it. Each gate is a thread message with Approve /
Reject, rewritten without buttons once the gate closes (by a click, the shell or expiry).
A gate message's ``ts`` is stored with the run too (``origin["gate|<ref>"]``), so a bot
that did not post it still rewrites it; at start and after every sweep,
:meth:`SlackThreads.reconcile` posts the gate messages that never went out (a stopped
bot, a failed post: so they are sent with retry) and rewrites the closed ones.

Each post that must be unique (the root, a step's message, a gate's message, an on-call
notice) and each gate's closing rewrite is claimed right before its Slack call (``claim``,
in ``serve`` :meth:`~bot.storage.redis_store.RedisRunStore.claim_effect`: one script that
checks the run's ``origin`` does not record it yet and nobody holds its claim), then
recorded in ``origin``: a process stopped past its lease with a post queued, or two
replicas' sweeps, post it once (docs/architecture.md, "Each thread message once"). The
click's rewrite of a decided gate (:meth:`SlackThreads.rewrite_decided`) is the same effect
as the thread's closing rewrite.

:class:`SlackOutlet` posts a run's stability reports in its thread (and to the on-call
channel); the report poster calls it.

Every call goes through the :class:`~bot.slack.pacing.Pacer` of the channel: in order, about
one a second, the root message's updates coalesced. The engine is never slowed or
stopped by Slack: the observer only queues, and a failed call is logged.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, TypeVar

from bot.slack.blocks import Payload, render_message
from bot.slack.pacing import Pacer
from bot.slack.web import SlackWeb
from handlers.replies import Message, Reply
from handlers.run_views import (
    GATE_KEY,
    closed_gate_message,
    gate_message,
    gate_ref,
    oncall_notice,
    phase_message,
    phase_of,
    root_message,
    run_of_ref,
)
from runbooks.engine.runs import Gate, Run, Step
from runbooks.policy import Policy

log = logging.getLogger("upgradebot.slack.threads")
T = TypeVar("T")
SURFACE = "slack"
ONCALL_KEY = "oncall|"
"""``run.origin[ONCALL_KEY + what]`` is the ts of what on-call was told (a halt, a rollback by itself)."""
CLOSED = "|closed"
"""``origin[GATE_KEY + ref + CLOSED]``: that gate's message no longer shows buttons."""
STEP_KEY = "step|"
"""``run.origin[STEP_KEY + step]`` is the ts of that step's message (``step|verify_canary``)."""
Claim = Callable[[str, str], tuple[str, str]]
"""``claim(run_id, effect)``, right before the Slack call of an effect that ``run.origin[effect]``
records once done: ``("claimed", "")`` (do it now, then record it), ``("done", recorded)``,
``("held", owner)`` (claimed by another process, or thread, which may be doing it now) or ``("gone", "")``
(:meth:`bot.storage.redis_store.RedisRunStore.claim_effect`)."""


def _unclaimed(run_id: str, effect: str) -> tuple[str, str]:
    """Without a shared store (one process): every effect is ours to do."""
    return ("claimed", "")


class SlackThreads:
    def __init__(self, *, web: SlackWeb, pacer: Pacer, set_origin: Callable[..., Run],
                 self_approval: bool = False, oncall: str = "", mention: str = "",
                 audit: Callable[[str], list[dict[str, Any]]] | None = None, claim: Claim = _unclaimed,
                 release: Callable[[str, str], None] = lambda run_id, effect: None) -> None:
        """``set_origin(run_id, ts=…)`` stores the root message's ts in the run (first wins);
        ``oncall`` (a channel) hears of halted runs and of the rollbacks the bot starts by itself;
        ``audit(run_id)`` the run's entries (a step's message another process posted is redrawn
        from them); ``claim`` takes each post (and a gate's rewrite) before its Slack call,
        ``release(run_id, effect)`` gives a claim back when Slack refused the call."""
        self.web, self.pacer, self.set_origin, self.self_approval = web, pacer, set_origin, self_approval
        self.claim, self.release = claim, release
        self.audit = audit
        self._phases: dict[tuple[str, str], list[Step]] = {}
        """Each step's entries seen so far, by (run id, step): what its message shows."""
        self._phase_ts: dict[tuple[str, str], str] = {}
        self.oncall, self.mention = oncall, mention
        self._told: set[tuple[str, str]] = set()
        self._pending: set[str] = set()
        self._closed_refs: set[str] = set()
        """Gate messages queued on the pacer and not yet posted (a sweep must not queue them twice)."""
        self._latest: dict[str, Run] = {}
        self._roots: dict[str, str] = {}
        self._gates: dict[str, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ Observer
    def on_state(self, run: Run) -> None:
        self._tell_oncall(run)
        channel = self._remember(run)
        if channel is None:
            return
        self.pacer.submit(channel, lambda: self._sync_root(run.id, channel), key=f"root:{run.id}")
        if not run.active:  # after its steps' last redraws (queued before): forget their entries
            self.pacer.submit(channel, lambda: self._forget(run.id), key=f"forget:{run.id}")
        gate = run.gate
        if gate is not None and not gate.is_open and self._gate_ts(run, gate) and not self._closed(run, gate):
            self.pacer.submit(channel, lambda: self._close_gate(run, gate), key=f"gate:{gate_ref(run, gate)}")

    def on_progress(self, run: Run) -> None:
        """A wave moved on: the root message is redrawn (coalesced with any update still queued)."""
        channel = self._remember(run)
        if channel is not None and run.progress.get("waves"):
            self.pacer.submit(channel, lambda: self._sync_root(run.id, channel), key=f"root:{run.id}")

    def reconcile(self, runs: Iterable[Run], *, min_age: float = 0.0) -> int:
        """Every open gate of a Slack run whose message was never posted (the bot stopped
        between storing the gate and posting it, or the post failed) is posted, with its
        buttons, whatever became of the root: a root never recorded (the bot stopped before,
        or Slack refused it) is posted first, recorded as the first event's is, and the gate
        goes in its thread (a root refused again: the next reconcile tries both again).
        Every closed gate whose message still shows them is rewritten. ``min_age``: leave
        gates opened less than that many seconds ago (another replica may be posting them
        right now). How many were queued."""
        queued = 0
        recent = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=min_age)
        for run in runs:
            channel, gate = self._remember(run), run.gate
            if channel is None or gate is None:
                continue
            with self._lock:
                pending = gate_ref(run, gate) in self._pending
            if gate.is_open and not pending and not self._gate_ts(run, gate) and gate.opened_at <= recent:
                if not self.root_ts(run.id):  # queued before the gate: the gate goes in its thread
                    self._queue_root(run.id, channel)
                self.on_gate(run, gate)
                queued += 1
            elif not gate.is_open and self._gate_ts(run, gate) and not self._closed(run, gate):
                self.on_state(run)
                queued += 1
        return queued

    def on_step(self, run: Run, step: Step) -> None:
        """The entry goes into its step's checklist, redrawn (coalesced with a redraw still queued)."""
        channel = self._remember(run)
        phase = phase_of(run, step) if channel is not None else None
        if channel is None or phase is None:
            return  # requests and decisions have their own message, transitions the root's
        key = (run.id, phase)
        with self._lock:
            known = self._phases.get(key)
            if known is None:  # the audit, when another process posted it, holds this entry already
                earlier = self._earlier(run, phase, step)
                known = self._phases[key] = earlier if any(s.at == step.at and s.name == step.name
                                                           for s in earlier) else [*earlier, step]
            else:
                known.append(step)
        self.pacer.submit(channel, lambda: self._sync_phase(run.id, channel, phase), key=f"step:{run.id}:{phase}")

    def on_gate(self, run: Run, gate: Gate) -> None:
        channel = self._remember(run)
        if channel is not None:
            message, ref = gate_message(run, gate, self_approval=self.self_approval), gate_ref(run, gate)
            with self._lock:
                self._pending.add(ref)
            self.pacer.submit(channel, lambda: self._post_gate(run.id, channel, message, ref))
            # the root names the open request (a rollback request opens with no change of state)
            self.pacer.submit(channel, lambda: self._sync_root(run.id, channel), key=f"root:{run.id}")

    # ------------------------------------------------------------- helpers
    def _remember(self, run: Run) -> str | None:
        """The run's Slack channel (None: not a Slack run); keeps the newest version seen."""
        if run.origin.get("surface") != SURFACE or not run.origin.get("channel"):
            return None
        with self._lock:
            known = self._latest.get(run.id)
            if known is None or run.version >= known.version:
                self._latest[run.id] = run
        return run.origin["channel"]

    def _queue_root(self, run_id: str, channel: str) -> None:
        """The root message posted (or updated) in turn, coalesced with one still queued."""
        self.pacer.submit(channel, lambda: self._sync_root(run_id, channel), key=f"root:{run_id}")

    def root_ts(self, run_id: str) -> str | None:
        with self._lock:
            known = self._latest.get(run_id)
            return self._roots.get(run_id) or (known.origin.get("ts") if known else None)

    def _sync_root(self, run_id: str, channel: str) -> None:
        with self._lock:
            run = self._latest[run_id]
        payload = render_message(root_message(run, self_approval=self.self_approval))[0]
        ts = self.root_ts(run_id)
        if ts:
            self.web.update(channel, ts, payload)
            return
        mine, done = self._claim(run_id, "ts")
        if not mine:  # another process posted it (or is posting it now: the next redraw updates it)
            if done:
                with self._lock:
                    self._roots[run_id] = done
                self.web.update(channel, done, payload)
            return
        posted = self._claimed(run_id, "ts", lambda: self.web.post(channel, payload))
        kept = self.set_origin(run_id, ts=posted).origin.get("ts", posted)
        with self._lock:
            self._roots[run_id] = kept
        if kept != posted:  # another replica posted the root first: keep theirs up to date
            log.warning("run %s already had a root message (%s); updating that one", run_id, kept)
            self.web.update(channel, kept, payload)

    def _post_gate(self, run_id: str, channel: str, message: Message, gate: str) -> None:
        try:
            ts = self.root_ts(run_id)
            if ts is None:
                log.warning("run %s has no root message in %s; a request's message was dropped", run_id, channel)
                return
            mine, done = self._claim(run_id, GATE_KEY + gate)
            if not mine:  # posted by another process (or being posted: the sweep finds it recorded)
                if done:
                    with self._lock:
                        self._gates[gate] = done
                return
            payloads = render_message(message)
            for i, payload in enumerate(payloads):
                posted = self._claimed(run_id, GATE_KEY + gate, partial(self.web.post, channel, payload, thread_ts=ts))
                if i == len(payloads) - 1:  # the part with the buttons: the one a click is checked against
                    with self._lock:
                        self._gates[gate] = posted
                    self.set_origin(run_id, **{GATE_KEY + gate: posted})  # kept in Redis: a restart finds it
        finally:  # posted, or failed: the next sweep's reconcile tries again
            with self._lock:
                self._pending.discard(gate)

    def _earlier(self, run: Run, phase: str, step: Step) -> list[Step]:
        """The step's entries before this one, when its message was posted by another process
        (or before a restart): read from the audit, so the message is redrawn whole."""
        if self.audit is None or not run.origin.get(STEP_KEY + phase):
            return []
        try:
            entries = [Step.model_validate(e) for e in self.audit(run.id)]
        except Exception as exc:  # the store is down: draw what comes from now on
            log.warning("could not read the entries of run %s: %s", run.id, type(exc).__name__)
            return []
        return [e for e in entries if phase_of(run, e) == phase and e.at <= step.at]

    def _forget(self, run_id: str) -> None:
        with self._lock:
            for key in [k for k in self._phases if k[0] == run_id]:
                self._phases.pop(key, None)
                self._phase_ts.pop(key, None)

    def _sync_phase(self, run_id: str, channel: str, phase: str) -> None:
        """Post the step's message (the first time), else edit it, with every entry seen so far."""
        with self._lock:
            run, steps = self._latest[run_id], list(self._phases.get((run_id, phase), []))
            ts = self._phase_ts.get((run_id, phase)) or run.origin.get(STEP_KEY + phase)
        payload = render_message(phase_message(run, phase, steps))[0]
        if ts:
            self.web.update(channel, ts, payload)
            return
        root = self.root_ts(run_id)
        if root is None:
            log.warning("run %s has no root message in %s; its %s message was dropped", run_id, channel, phase)
            return
        mine, done = self._claim(run_id, STEP_KEY + phase)
        if not mine:  # another process posted the step's message (or is posting it: a later redraw edits it)
            if done:
                with self._lock:
                    self._phase_ts[(run_id, phase)] = done
                self.web.update(channel, done, payload)
            return
        posted = self._claimed(run_id, STEP_KEY + phase, lambda: self.web.post(channel, payload, thread_ts=root))
        with self._lock:
            self._phase_ts[(run_id, phase)] = posted
        self.set_origin(run_id, **{STEP_KEY + phase: posted})

    def _tell_oncall(self, run: Run) -> None:
        """A halted run, or a rollback the bot started by itself, to the on-call channel: once
        (the message's ts is kept with the run, so another replica or a restart does not repeat it)."""
        notice = oncall_notice(run, self.mention or None) if self.oncall else None
        if notice is None:
            return
        key, message = ONCALL_KEY + notice[0], notice[1]
        with self._lock:
            if key in run.origin or (run.id, key) in self._told:
                return
            self._told.add((run.id, key))

        def post() -> None:
            if self._claim(run.id, key)[0]:
                ts = self._claimed(run.id, key, lambda: self.web.post(self.oncall, render_message(message)[0]))
                self.set_origin(run.id, **{key: ts})

        self.pacer.submit(self.oncall, post)

    def _gate_ts(self, run: Run, gate: Gate) -> str | None:
        """The ts of the gate's message: posted by this process, else as stored with the run."""
        ref = gate_ref(run, gate)
        with self._lock:
            known = self._gates.get(ref)
        return known or run.origin.get(GATE_KEY + ref)

    def _closed(self, run: Run, gate: Gate) -> bool:
        """Whether the gate's message was already rewritten without its buttons."""
        ref = gate_ref(run, gate)
        with self._lock:
            if ref in self._closed_refs:
                return True
        return GATE_KEY + ref + CLOSED in run.origin

    def _close_gate(self, run: Run, gate: Gate) -> None:
        ts, ref = self._gate_ts(run, gate), gate_ref(run, gate)
        if ts is None or self._closed(run, gate):
            return
        mine, done = self._claim(run.id, GATE_KEY + ref + CLOSED)
        if not mine and not done:  # being rewritten elsewhere: the next sweep finds it recorded
            return
        if mine:
            payload = render_message(closed_gate_message(run, gate))[0]
            self._claimed(run.id, GATE_KEY + ref + CLOSED, lambda: self.web.update(run.origin["channel"], ts, payload))
        with self._lock:
            self._gates.pop(ref, None)
            self._closed_refs.add(ref)
        if mine:
            self.set_origin(run.id, **{GATE_KEY + ref + CLOSED: ts})

    def rewrite_decided(self, ref: str, channel: str, ts: str, payload: Payload) -> bool:
        """The clicked gate message ``ts`` rewritten with its decision (who, when), at most once:
        claimed as the gate's closing rewrite, which :meth:`_close_gate` (here, or in another
        replica's sweep) then finds done, and the other way round. Whether it was rewritten here."""
        run_id = run_of_ref(ref)
        if run_id is None:  # not a gate's button: nothing of a run's thread to claim
            self.web.update(channel, ts, payload)
            return True
        effect = GATE_KEY + ref + CLOSED
        mine, done = self._claim(run_id, effect)
        if not mine and not done:  # being rewritten elsewhere (the thread's closing rewrite)
            return False
        if mine:
            self._claimed(run_id, effect, lambda: self.web.update(channel, ts, payload))
        with self._lock:
            self._gates.pop(ref, None)
            self._closed_refs.add(ref)
        if mine:
            self.set_origin(run_id, **{effect: ts})
        return mine

    def _claim(self, run_id: str, effect: str) -> tuple[bool, str]:
        """Whether this process does ``effect`` now (claimed, atomically with the check that it
        is not recorded); else what is recorded (empty while another process holds it)."""
        outcome, value = self.claim(run_id, effect)
        if outcome == "claimed":
            return True, ""
        if outcome == "held":
            log.info("run %s: %s is being done by %s; left to it", run_id, effect, value)
        return False, value if outcome == "done" else ""

    def _claimed(self, run_id: str, effect: str, call: Callable[[], T]) -> T:
        """The Slack call of a claimed effect; its claim given back when the call fails (Slack
        refused it, or it never got there: the next sweep tries again)."""
        try:
            return call()
        except BaseException:
            self.release(run_id, effect)
            raise


class SlackOutlet:
    """The run's Slack thread (``origin`` channel and root ``ts``, else the channel) and ``oncall.channel``."""

    def __init__(self, web: SlackWeb, policy: Policy) -> None:
        self.web, self.policy = web, policy

    def to_thread(self, run: Run, reply: Reply) -> str | None:
        channel = run.origin.get("channel") if run.origin.get("surface", "slack") == "slack" else None
        if not channel:
            return None
        return self.web.post_reply(channel, reply, prefix=self.policy.slash_command, thread_ts=run.origin.get("ts"))

    def to_oncall(self, run: Run, reply: Reply) -> str | None:
        channel = self.policy.oncall.channel
        return self.web.post_reply(channel, reply, prefix=self.policy.slash_command) if channel else None
