"""``upgradebot console``: a chat in the terminal on the same router, handlers and run engine.

Like Hubot's shell adapter: what you type is a command (``inventory``, or
``/upgrade inventory`` as in Slack), the bot's messages are printed as text
(:mod:`bot.text`), a run shows as its root message (printed once, then one line
per update) and a thread whose lines carry the run id. Buttons become numbered choices:
typing the number clicks it. Every console on a Redis shows every run: a run changed by another
console, a shell command or ``serve`` is redrawn from its stored state (:mod:`bot.console_feed`),
its open request numbered in this console, a request closed elsewhere without its buttons; so
two people, each at a console as themselves, ask and approve. ``/quit`` (or end of input) leaves. You are who the shell
says you are (:mod:`bot.shell.identity`: your OS account through the policy's
``identities``), and approving needs ``shell.approvals: true`` as in the shell; only the
demo's chat, on its own simulated cluster, lets ``/as <user>`` switch who types. Runs advance in this process, after the reply to the command or click
that let them move (the chat is the engine's ``wake``), so the transcript reads in order.
Stability reports and their "Request rollback" button show in the chat like any reply.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO

from bot.console_feed import Feed
from bot.runtime import Runtime, build_runtime, connector
from bot.settings import Settings
from bot.shell.identity import resolve
from bot.text import render_files, render_message
from handlers import messages
from handlers.access import Directory, StaticDirectory
from handlers.clicks import Click, Decisions, EngineDecisions
from handlers.replies import Message, Reply
from handlers.routing import Caller, Router, default_registry
from handlers.run_views import (
    ACTIONS,
    closed_gate_message,
    gate_message,
    gate_ref,
    phase_heading,
    phase_message,
    phase_of,
    phase_rows,
    root_message,
    step_message,
    wave_now,
)
from handlers.verbs import chat_verbs
from runbooks.engine.driving import StepPaused
from runbooks.engine.runs import Gate, Run, Step
from runbooks.policy import Policy

log = logging.getLogger("upgradebot.console")
BOT = "upgradebot"
SURFACE = "console"


@dataclass(frozen=True)
class Choice:
    action: str
    value: str
    label: str


class Chat:
    """One console conversation: who types, the numbered buttons, the runs to move on."""

    def __init__(self, *, router: Router | None = None, decisions: Decisions | None = None, out: TextIO,
                 user: str, advance_now: Callable[[str], Run] | None = None, prefix: str = "/upgrade",
                 self_approval: bool = False, surface: str = SURFACE, account: str = "",
                 switch_users: bool = False) -> None:
        self.router, self.decisions, self.out, self.user = router, decisions, out, user
        self.advance_now, self.prefix, self.self_approval = advance_now, prefix, self_approval
        self.surface, self.account, self.switch_users = surface, account, switch_users
        self.choices: dict[int, Choice] = {}
        self._next_choice = 1
        self._pending: list[str] = []
        self._seen: set[str] = set()
        self._phases: set[tuple[str, str]] = set()
        self._reasons: dict[str, str] = {}
        self._states: dict[str, tuple[str, bool, str]] = {}
        self._gates: dict[str, tuple[str, Gate]] = {}
        """The open requests numbered here: gate reference -> (run id, gate)."""
        self._deciding: set[str] = set()
        """The requests a click here is deciding: the feed leaves their buttons to the click's answer."""
        self.feed: Feed | None = None
        self._progress: dict[str, str] = {}
        self._lock = threading.RLock()

    # ---------------------------------------------------------------- output
    def print(self, text: str) -> None:
        with self._lock:
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()

    def _numbered(self, message: Message, indent: str) -> str:
        with self._lock:
            first = self._next_choice
            for offset, button in enumerate(message.buttons):
                self.choices[first + offset] = Choice(button.action_id, button.value, button.label)
            self._next_choice += len(message.buttons)
        return render_message(message, indent=indent, first_choice=first)

    def show(self, reply: Reply) -> None:
        """A reply: to everyone, or (ephemeral) to the one who typed."""
        head = f"{BOT} (only {self.user} sees this):" if reply.ephemeral else f"{BOT}:"
        text = self._numbered(reply, "  ")
        text += "".join(f"    {self.prefix} {line}\n" for line in reply.usage)
        for item in reply.thread:
            text += self._numbered(item, "  | ")
        text += "".join(f"  {line}\n" for line in render_files(reply).splitlines())
        self.print(head + "\n" + text)

    # ------------------------------------------------------------- observer
    def on_state(self, run: Run) -> None:
        """The run's message: posted whole the first time, then a line when its state changed."""
        with self._lock:
            first = run.id not in self._seen
            self._seen.add(run.id)
            shown = (run.state.value, run.halted, run.reason)
            if self._states.get(run.id) == shown:  # heard from the engine and from the feed: once
                return
            self._states[run.id] = shown
        if first:
            self.print(f"{BOT} posted run {run.id}:\n" + render_message(root_message(run, surface=self.surface), indent="  "))
            return
        with self._lock:
            fresh = run.reason and self._reasons.get(run.id) != run.reason
            self._reasons[run.id] = run.reason
        reason = f": {run.reason}" if fresh else ""
        self.print(f"{BOT} updated the message of {run.id}: state {run.state.value}{reason}")

    def on_step(self, run: Run, step: Step) -> None:
        """As in Slack's thread: each step of the run under its heading, one row per entry, and
        the step's verdict when it ends; a decision as one line (the request was printed whole)."""
        indent = f"  {run.id} | "
        phase = phase_of(run, step)
        if phase is None:
            if not (step.kind == "gate" and step.name.endswith(" opened")):
                self.print(render_message(step_message(run, step), indent=indent))
            return
        with self._lock:
            first = (run.id, phase) not in self._phases
            self._phases.add((run.id, phase))
        if first:
            self.print(f"{indent}{phase_heading(run, phase)}")
        if step.kind == "step" and step.name == phase:
            self.print(f"{indent}{phase_message(run, phase, [step]).title}")
        else:
            self.print("".join(f"{indent}  {row}\n" for row in phase_rows(phase, [step])).rstrip("\n"))

    def on_progress(self, run: Run) -> None:
        """A promotion in waves moved on: the root message's progress line, when it changed."""
        now = wave_now(run)
        with self._lock:
            fresh = bool(now) and self._progress.get(run.id) != now
            self._progress[run.id] = now
        if fresh:
            self.print(f"{BOT} updated the message of {run.id}: {now}")

    def on_gate(self, run: Run, gate: Gate) -> None:
        """An open request with its buttons, numbered here (once per request)."""
        ref = gate_ref(run, gate)
        with self._lock:
            if ref in self._gates or ref in self._deciding:
                return
            self._gates[ref] = (run.id, gate)
        self.print(self._numbered(gate_message(run, gate, self_approval=self.self_approval), f"  {run.id} | "))

    def redraw(self, run: Run) -> None:
        """``run`` as stored now (another console, a shell or ``serve`` changed it: :mod:`bot.console_feed`):
        its message, its state, its progress; a request closed since loses its buttons here, an open
        one is numbered here. What this chat printed already is not printed again."""
        self.on_state(run)
        self.on_progress(run)
        now = gate_ref(run, run.gate) if run.gate is not None and run.gate.is_open else None
        with self._lock:
            closed = [(ref, gate) for ref, (run_id, gate) in self._gates.items()
                      if run_id == run.id and ref != now and ref not in self._deciding]
            for ref, _ in closed:
                self._forget(ref)
        for ref, gate in closed:
            if run.gate is not None and gate_ref(run, run.gate) == ref:
                self.print(f"{BOT} replaced the request's buttons:\n"
                           + render_message(closed_gate_message(run, run.gate), indent=f"  {run.id} | "))
            else:  # a newer request took its place before this console read the run
                self.print(f"{BOT}: " + messages.console_request_gone(gate.kind.value, run.id))
        if run.gate is not None and now is not None:
            self.on_gate(run, run.gate)

    def _forget(self, ref: str) -> None:
        """A request closed: its numbers no longer click anything here (under the lock)."""
        self._gates.pop(ref, None)
        for number in [n for n, c in self.choices.items() if c.value == ref]:
            del self.choices[number]

    # ---------------------------------------------------------------- input
    def advance(self, run_id: str) -> None:  # the engine's ``wake``: queued, so no run to return
        """Move ``run_id`` on once the current reply is printed."""
        with self._lock:
            if run_id not in self._pending:
                self._pending.append(run_id)

    def say(self, line: str) -> bool:
        """Handle one typed line; False when the user leaves."""
        text = line.strip()
        if not text:
            return True
        if text in ("/quit", "/exit"):
            return False
        if text.startswith("/as"):
            who = text[3:].strip()
            if not self.switch_users:
                self.print(messages.CONSOLE_NO_SWITCH.format(user=self.user))
            elif who:
                self.user = who
                self.print(f"(you are now {who})")
            else:
                self.print("usage: /as <user>")
            return True
        if text.isdigit():
            self.click(int(text))
        elif text.startswith(self.prefix + " ") or text == self.prefix:
            self.command(text[len(self.prefix):])
        elif text.startswith("/"):
            self.print(messages.CONSOLE_HELP)
        else:
            self.command(text)
        self._drain()
        return True

    def command(self, text: str) -> None:
        assert self.router is not None
        routed = self.router.route(text, Caller(user=self.user, channel=None, surface=self.surface,
                                               account=self.account))
        self.show(routed.reply)

    def click(self, number: int) -> None:
        choice = self.choices.get(number)
        if choice is None or self.decisions is None:
            self.print(f"there is no choice [{number}]")
            return
        if choice.action not in ACTIONS:
            self.print(f"[{number}] {choice.label} does nothing in the console")
            return
        self.print(f"({self.user} clicked [{number}] {choice.label})")
        with self._lock:  # decided here: the feed neither prints the request closed nor numbers it again
            self._deciding.add(choice.value)
        try:
            decided = self.decisions.decide(Click(action=choice.action, value=choice.value, user=self.user))
        finally:
            with self._lock:
                self._deciding.discard(choice.value)
        if decided.replace is not None:
            with self._lock:
                self._forget(choice.value)
        if decided.replace is not None:
            self.print(f"{BOT} replaced the request's buttons:\n" + render_message(decided.replace, indent="  "))
        if decided.reply is not None:
            self.show(decided.reply)

    def _drain(self) -> None:
        while self.advance_now is not None:
            with self._lock:
                if not self._pending:
                    return
                run_id = self._pending.pop(0)
            try:
                self.advance_now(run_id)
            except StepPaused as exc:
                self.print(f"{BOT}: {exc}")

    def loop(self, lines: Iterable[str] | None = None, *, prompt: bool = True) -> None:
        """Read lines until ``/quit`` or the end of input; a prompt when reading a terminal."""
        source = lines if lines is not None else sys.stdin
        self.print(messages.CONSOLE_HELP)
        if self.feed is not None:
            self.feed.start()
        if prompt:
            self.out.write(f"{self.user}> ")
            self.out.flush()
        for line in source:
            if not prompt:
                self.print(f"{self.user}> {line.rstrip()}")
            if not self.say(line):
                return
            if prompt:
                self.out.write(f"{self.user}> ")
                self.out.flush()


class ChatOutlet:
    """Stability reports in the console chat: a report as a reply under the run (buttons
    numbered as every other), and a copy for the on-call channel."""

    def __init__(self, chat: Chat, policy: Policy) -> None:
        self.chat, self.policy = chat, policy

    def to_thread(self, run: Run, reply: Reply) -> str | None:
        self.chat.print(f"{BOT} posted in the thread of {run.id}:")
        self.chat.show(reply)
        return f"console:{run.id}"

    def to_oncall(self, run: Run, reply: Reply) -> str | None:
        channel = self.policy.oncall.channel
        if not channel:
            return None
        self.chat.print(f"{BOT} posted in the on-call channel {channel}:")
        self.chat.show(reply.model_copy(update={"thread": [Message(text=f"(details in the thread of {run.id})")]}))
        return f"console:{channel}"


def build_chat(runtime: Runtime, *, out: TextIO, user: str, directory: Directory | None = None,
               surface: str = SURFACE, account: str = "", switch_users: bool = False, watch: bool = False) -> Chat:
    """A console chat on ``runtime``: the router with every chat verb, clicks decided by the
    engine, runs advanced in this process after each reply, reports shown in the chat.
    ``switch_users``: ``/as`` may change who types (the demo only); ``watch``: the chat also
    shows what other processes on the Redis do to runs (:mod:`bot.console_feed`), from its loop's start."""
    policy, engine = runtime.policy, runtime.engine
    directory = directory or StaticDirectory()
    chat = Chat(out=out, user=user, advance_now=engine.advance, prefix=policy.slash_command,
                self_approval=policy.approvers.allow_self_approval, surface=surface, account=account,
                switch_users=switch_users)
    chat.router = Router(default_registry(*chat_verbs(runtime.deps(directory))), policy, directory)
    chat.decisions = EngineDecisions(engine=engine, policy=policy, directory=directory, surface=surface)
    engine.wake = chat.advance
    runtime.observers.add(chat)
    if watch:
        chat.feed = Feed(chat, runtime.store)
        runtime.on_stop(chat.feed.stop)
    if runtime.reports is not None:
        runtime.reports.outlets.add(ChatOutlet(chat, policy))
    return chat


def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """``upgradebot console``: the engine on ``REDIS_URL`` (else this user's local Redis) and the cluster
    of ``KUBECONFIG``, the chat on stdin/stdout."""
    policy = settings.policy()
    token = settings.identity_token
    me = resolve(policy, token=token.get_secret_value() if token else None)
    runtime = build_runtime(settings, policy, connect=connector(settings, args.kubeconfig))
    try:
        chat = build_chat(runtime, out=out, user=me.user, account=me.account, watch=True)
        runtime.start(sweep=False)
        chat.loop(prompt=sys.stdin.isatty())
    finally:
        runtime.stop(timeout=10)
    return 0
