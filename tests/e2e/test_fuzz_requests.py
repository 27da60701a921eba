"""10,000 generated requests to a running ``serve``: none answered 5xx, none leaves a traceback
or a log line over 2 KB, and none but a valid, authorized one creates or decides a run.

The bot is ``run_bot``: what ``upgradebot serve`` wires (the engine on the real Redis, the
DaemonSet on kubesim, the Slack front end on waitress, the fake Slack). One run is requested
first, on purpose, by a requester: its approval gate is open. Then a seeded generator sends
10,000 requests from 8 threads over keep-alive connections: unsigned ones and ones whose
signature or timestamp is wrong, stale, in the future or garbage; signed slash commands with
random text (verbs, unicode, control characters, very long words, ``key=value`` junk,
``window=`` values) from random users, channels and workspaces; signed ``payload=`` bodies
with random JSON (click shapes with random actions, values, users and teams, Approve and
Reject forged on the open gate by people who are no approvers or from another workspace,
mutated shapes, JSON that is not an object, no JSON at all); random content types, methods
and routes, empty and url-encoded junk bodies, extra headers, malformed HTTP framing, and a
few bodies over 1 MiB. The generator never sends a valid request of a requester or an
approver that names the open run (:meth:`Generator.defused`), so anything that decides it
is a bug.

Afterwards: every answer is below 500 and well formed (a HEAD answer has no content), a
request that is not correctly signed gets a 4xx and nothing on Slack; no log record carries a
traceback, no thread died of an exception, and each record, formatted as ``serve`` formats it
(:class:`~bot.logs.OneLineFormatter`), is one line of at most 2048 bytes (UTF-8); the
only run in Redis is the one requested on purpose, still waiting at its gate, its audit
unchanged; nothing was posted in its thread nor rewritten, every other public message answers
a read-only verb, every answer on a ``response_url`` is ephemeral, and another workspace is
only ever refused. Malformed framing may go unanswered (waitress closes or waits).

A failure lists every problem with examples named by request number: with the same
:data:`SEED`, ``Generator(SEED, known).all(TOTAL)[n]`` is the same request again (only the
run's id, the timestamps and the signatures differ).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import random
import re
import socket
import string
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from bot.logs import OneLineFormatter
from bot.storage.layout import Keys
from bot.workers import Workers
from handlers.decoding import words
from runbooks.engine.runs import RunState
from runbooks.policy import duration_seconds
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import (
    CANARY,
    NEW,
    TARGET,
    eventually,
    posted_ts,
    roots,
)
from tests.fakeslack import SIGNING_SECRET, FakeSlack, block_action, sign, slash_command

SEED = 20_240_611
TOTAL = 10_000
THREADS = 8
MAX_LINE = 2048
OWN_TEAM, OTHER_TEAM = "T0TEST", "T0OTHER"
AUTHORIZED = ("U0ANA", "U0BEN", "U0CAT", "U0LEAD")
"""Requesters and approvers of the policy (U0BEN through S0PLATFORM, U0CAT through S0LEADS)."""
OUTSIDERS = ("U0EVE", "U0MAL", "W0GUEST", "U0BOT", "USLACKBOT", "B0BOT", "", "u0lead", "U0LEAD ", " U0ANA")
READ_VERBS = frozenset({"help", "inventory", "status", "runs", "audit", "verify", "report"})
MUTATING_WORDS = ("canary", "restart", "repair", "approve", "reject", "promote", "rollback", "close", "resume")
ACTIONS = ("approve", "reject", "request_rollback")
FOREIGN_REFUSALS = ("own workspace only", "nothing was started")
"""What another workspace may be told: the refusal, or (before its workspace is looked at) that the bot is busy."""
S = RunState


# ---------------------------------------------------------------------- the bot
def pools(bot: RunBot) -> list[Workers]:
    return [bot.service.workers, bot.service.decision_workers]


def idle(bot: RunBot) -> bool:
    """Every command and click handled, every run advanced, every paced message sent."""
    return bot.service.wait_idle(0.1) and bot.idle()


# ---------------------------------------------------------------------- requests
@dataclass
class Request:
    n: int
    kind: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    path: str = "/slack/events"
    signed: bool = False
    """Signed with the secret and a fresh timestamp: the request reaches Bolt."""
    raw: bytes | None = None
    """The whole request as bytes, sent on a socket of its own (malformed framing)."""
    foreign: bool = False
    """Built to come from another workspace: any answer must be the refusal."""

    def describe(self) -> str:
        shown = self.raw if self.raw is not None else self.body
        return (f"#{self.n} {self.kind} {self.method} {self.path} headers={self.headers!r} "
                f"body({len(shown)})={shown[:300]!r}")


@dataclass
class Result:
    request: Request
    status: int | None
    error: str | None = None
    content: bytes = b""
    """What came after the answer's header block (HEAD and malformed requests, read to the end)."""


@dataclass(frozen=True)
class Known:
    """What the generator may aim at: the run requested on purpose and its gate."""

    fake_url: str
    """The fake Slack: ``response_url`` values point at it."""
    run_id: str
    gate: str
    gate_ts: str
    root_ts: str


UNICODE = ["é", "ß", "Ω", "中文", "🚀", "\u202e", "\u200b", "\u00a0", "\ufeff", "\U0010ffff", "\u0661\u0662\u0663", "İ", "ﬁ"]
CONTROL = [chr(c) for c in range(32)] + ["\x7f", "\x85", "\u2028", "\u2029", "\r\n"]
MENTIONS = ["<@U0LEAD>", "<@U0EVE|eve>", "<#C0OPS|ops>", "<!subteam^S0LEADS|@leads>", "<!here>", "<http://x|y>",
            "&amp;lt;", "&lt;@U0LEAD&gt;", "<", ">", "<<>>", "<@>", "<|>", "&", "&amp;"]
KEYS = ["image", "node", "window", "cluster", "container", "reason", "limit", "state", "", "=", "IMAGE", "x" * 300]
WINDOWS = ["1s", "0s", "0.5s", "-1s", "1e9d", "99999999999999999999d", "1.5h", "abc", "", "∞", "NaN", "1", "1.",
           ".5s", "0.0000001s", "1ms", "\u0661s", "2d", "30m", "1s1s", " 1s", "1 s"]
TARGETS = [TARGET, "kube-system/nope", "a/b", "../..", "ns/", "/", "kube-system/" + "d" * 300, "KUBE-SYSTEM/X",
           "kube-system/nvidia-device-plugin-daemonset/extra"]
NODES = ["gpu-node1", "gpu-node9", "cpu-node1", "", "GPU-NODE1", "node with space", "n" * 300]
IMAGES = [NEW, "nvcr.io/nvidia/k8s-device-plugin:", "::::", "a" * 500, "nvcr.io/x@sha256:zz", "\uff4e\uff56\uff43\uff52.io/x:1"]
VERBS = [*sorted(READ_VERBS), *MUTATING_WORDS, "HELP", "Canary", "aprove", "ask", "hold", "delete", "sudo", "", "💥"]
HEADER_CHARS = string.ascii_letters + string.digits + string.punctuation + " \t"
CONTENT_TYPES = [
    "application/x-www-form-urlencoded", "application/json", "text/plain", "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded; charset=utf-16", "", "garbage", "application/json; charset=latin-1",
    "application/x-www-form-urlencoded; charset=\x01", "*/*",
]


class Generator:
    """Seeded: request ``n`` is the same on every run of the same code."""

    def __init__(self, seed: int, known: Known) -> None:
        self.rng = random.Random(seed)
        self.known = known
        self.n = 0

    # ------------------------------------------------------------------ atoms
    def word(self) -> str:
        r = self.rng
        pick = r.random()
        if pick < 0.25:
            return r.choice(VERBS)
        if pick < 0.35:
            return "".join(r.choice(UNICODE) for _ in range(r.randint(1, 8)))
        if pick < 0.42:
            return "".join(r.choice(CONTROL + list("ab")) for _ in range(r.randint(1, 6)))
        if pick < 0.47:
            return r.choice(string.ascii_letters) * r.choice([1000, 3000, 20_000])
        if pick < 0.62:
            key = r.choice(KEYS)
            values = {"window": WINDOWS, "node": NODES, "image": IMAGES}.get(key, [self.word_plain()])
            value = r.choice(WINDOWS if r.random() < 0.2 else values)
            return f"{key}={value}"
        if pick < 0.72:
            return r.choice(MENTIONS)
        if pick < 0.8:
            return r.choice(TARGETS)
        if pick < 0.86:
            return self.run_ref()
        return self.word_plain()

    def word_plain(self) -> str:
        r = self.rng
        alphabet = string.ascii_letters + string.digits + string.punctuation
        return "".join(r.choice(alphabet) for _ in range(r.randint(0, 24)))

    def run_ref(self) -> str:
        """A run id or a gate reference: the real ones, near misses, junk."""
        r, k = self.rng, self.known
        choices = [
            k.run_id, k.gate, k.run_id.upper(), k.run_id + "x", k.run_id[:-1],
            "r-" + "".join(r.choice(string.ascii_lowercase + string.digits) for _ in range(8)),
            k.gate.replace("|", "||", 1), k.gate + "|", k.gate.rsplit("|", 1)[0] + "|20200101T000000000000",
            k.run_id + "|promotion|" + k.gate.rsplit("|", 1)[1], "|".join(["r-"] * 3), "||", "r-",
            k.gate.replace(k.run_id, "r-00000000"), k.gate + "\n", " " + k.gate,
        ]
        return r.choice(choices)

    def text(self) -> str:
        r = self.rng
        if r.random() < 0.05:
            return ""
        first = r.choice(VERBS) if r.random() < 0.8 else self.word()
        parts = [first] + [self.word() for _ in range(r.randint(0, 6))]
        seps = [" ", " ", " ", "\n", "\t", "\u00a0", "  ", "\r\n", "\u3000"]
        return "".join(p + r.choice(seps) for p in parts).rstrip(" ") if r.random() < 0.5 else " ".join(parts)

    def user(self) -> str:
        r = self.rng
        pick = r.random()
        if pick < 0.35:
            return r.choice(AUTHORIZED)
        if pick < 0.75:
            return r.choice(OUTSIDERS)
        if pick < 0.85:
            return "U" + "".join(r.choice(string.ascii_uppercase + string.digits) for _ in range(r.randint(2, 12)))
        if pick < 0.9:
            return "".join(r.choice(UNICODE) for _ in range(r.choice([3, 900])))
        if pick < 0.95:
            return "U0LEAD\nINFO upgradebot: approved by U0LEAD"
        return "U" * r.choice([300, 3000])

    def team(self) -> str:
        r = self.rng
        return r.choice([OWN_TEAM] * 6 + [OTHER_TEAM, "", "t0test", "T0TEST ", "中文" * 400, "T" * 3000, "E0ENT"])

    def channel(self) -> str:
        r = self.rng
        return r.choice(["C0OPS"] * 6 + ["C0LAB", "C0NOPE", "", "D0DM", "G0PRIV", "C" * 2000, "ç"])

    def response_url(self, n: int) -> str | None:
        pick = self.rng.random()
        if pick < 0.8:
            return f"{self.known.fake_url}/response/f{n}"
        if pick < 0.9:
            return ""
        if pick < 0.998:
            return None  # left out
        return "http://127.0.0.1:1/unreachable"  # refused at once, then retried with backoff: a few only

    def rjson(self, depth: int = 0) -> Any:
        r = self.rng
        pick = r.random()
        if depth >= 3 or pick < 0.45:
            return r.choice([None, True, False, 0, -1, 10**30, -(10**30), 1.5, float("nan"), float("inf"),
                             "", self.word(), self.word_plain(), [], {}, self.run_ref(), OTHER_TEAM])
        if pick < 0.7:
            return [self.rjson(depth + 1) for _ in range(r.randint(0, 4))]
        keys = ["type", "user", "team", "actions", "channel", "container", "message", "response_url", "trigger_id",
                "view", "event", "token", "api_app_id", "enterprise", "is_enterprise_install", "id", "value",
                "action_id", "team_id", "user_id", "state", "callback_id"]
        return {r.choice(keys) if r.random() < 0.8 else self.word_plain(): self.rjson(depth + 1)
                for _ in range(r.randint(0, 5))}

    # ------------------------------------------------------------------ signing
    def headers(self, body: bytes, *, good: bool) -> tuple[dict[str, str], str]:
        """Valid signature headers, or one of the ways they are wrong (and its name)."""
        if good:
            return sign(body), "signed"
        r, now = self.rng, int(time.time())
        pick = r.randrange(13)
        if pick == 0:
            return {}, "no signature"
        if pick == 1:
            return sign(body + b"x"), "signature of another body"
        if pick == 2:
            return sign(body, secret=SIGNING_SECRET + "x"), "wrong secret"
        if pick == 3:
            return sign(body, timestamp=now - r.choice([301, 600, 86_400, 10**6])), "stale timestamp"
        if pick == 4:
            return sign(body, timestamp=now + r.choice([900, 3600, 10**8])), "future timestamp"  # stays future
        if pick == 5:
            return sign(body, timestamp=r.choice([0, 1, -1, -now])), "odd timestamp"
        if pick == 6:
            ts = r.choice(["", "soon", "-5", "1e9", "0x10", "\u0661\u0662\u0663\u0664", "9" * 40, "+1700000000", "1700000000.5", "None",
                           "¹²³", f"{now}.0", f"0x{now:x}", f"{now},{now}", f"{now} {now}"])
            good_sig = sign(body, timestamp=now)["X-Slack-Signature"]
            return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": good_sig}, "garbage timestamp"
        if pick == 7:
            sig = r.choice(["", "v0=", "v1=" + "0" * 64, "v0=" + "0" * 64, "v0=" + "z" * 64, "v0=" + "0" * 63,
                            "v0=" + "0" * 6000, "v0=" + "é" * 10, "=", "v0=\t"])
            return {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": sig}, "garbage signature"
        if pick == 8:
            good_headers = sign(body)
            return {"X-Slack-Request-Timestamp": good_headers["X-Slack-Request-Timestamp"]}, "timestamp only"
        if pick == 9:
            good_headers = sign(body)
            return {"X-Slack-Signature": good_headers["X-Slack-Signature"]}, "signature only"
        if pick == 10:
            good_headers = sign(body)
            swapped = good_headers["X-Slack-Signature"][:-1] + ("0" if good_headers["X-Slack-Signature"][-1] != "0" else "1")
            return {**good_headers, "X-Slack-Signature": swapped}, "one hex digit off"
        if pick == 11:
            good_headers = sign(body)
            upper = "v0=" + good_headers["X-Slack-Signature"][3:].upper()
            return {**good_headers, "X-Slack-Signature": upper + "0"}, "signature too long"
        good_headers = sign(body, timestamp=now - 1)
        return {**good_headers, "X-Slack-Request-Timestamp": str(now)}, "timestamp changed after signing"

    # ------------------------------------------------------------------ bodies
    def command_body(self, *, user: str, team: str, text: str, n: int) -> bytes:
        r = self.rng
        url = self.response_url(n)
        body = slash_command(text, user=user, channel=self.channel(),
                             command=r.choice(["/upgrade"] * 8 + ["/other", "", "/UPGRADE", "/upgrade "]),
                             response_url=url or "")
        fields = urllib.parse.parse_qsl(body.decode(), keep_blank_values=True)
        fields = [(k, team if k == "team_id" else v) for k, v in fields if not (k == "response_url" and url is None)]
        pick = r.random()
        if pick < 0.08:
            fields = [f for f in fields if f[0] != r.choice(["user_id", "team_id", "channel_id", "command", "text"])]
        elif pick < 0.14:
            fields.append((r.choice(["user_id", "team_id", "text", "command"]), self.word()))
        elif pick < 0.2:
            fields.append((self.word_plain(), self.word()))
        elif pick < 0.24:
            fields.append(("enterprise_id", self.word_plain()))
        return urllib.parse.urlencode(fields).encode()

    def click_payload(self, *, user: str, team: str, n: int) -> dict[str, Any]:
        r = self.rng
        url = self.response_url(n)
        action = r.choice([*ACTIONS, *ACTIONS, "", "APPROVE", "ask", self.word_plain()])
        value = self.run_ref() if r.random() < 0.8 else self.word()
        ts = r.choice([self.known.gate_ts, self.known.root_ts, "1.000100", "", "x"])
        body = block_action(action_id=action, value=value, user=user, channel=self.channel(), message_ts=ts,
                            thread_ts=r.choice([self.known.root_ts, None, ""]), response_url=url or "")
        payload: dict[str, Any] = json.loads(urllib.parse.parse_qs(body.decode())["payload"][0])
        if url is None:
            del payload["response_url"]
        payload["team"]["id"] = team
        payload["user"]["team_id"] = r.choice([team, team, OWN_TEAM, OTHER_TEAM, ""])
        if r.random() < 0.1:
            payload["actions"].append(dict(payload["actions"][0], action_id=r.choice(ACTIONS)))
        return payload

    def mutate(self, value: Any) -> Any:
        """``value`` with one random part replaced by random JSON (or removed)."""
        r = self.rng
        if isinstance(value, dict) and value and r.random() < 0.8:
            key = r.choice(list(value))
            copy = dict(value)
            if r.random() < 0.25:
                del copy[key]
            else:
                copy[key] = self.mutate(copy[key])
            return copy
        if isinstance(value, list) and value and r.random() < 0.8:
            i = r.randrange(len(value))
            return [*value[:i], self.mutate(value[i]), *value[i + 1:]]
        return self.rjson(1)

    def payload_body(self, payload: Any) -> bytes:
        r = self.rng
        text = json.dumps(payload, ensure_ascii=r.random() < 0.5)
        fields = [("payload", text)]
        if r.random() < 0.05:
            fields.append(("payload", json.dumps(self.rjson())))
        return urllib.parse.urlencode(fields).encode()

    def junk_body(self) -> tuple[bytes, str]:
        r = self.rng
        pick = r.randrange(12)
        if pick == 0:
            return b"", "empty"
        if pick == 1:
            return urllib.parse.urlencode([(self.word_plain(), self.word()) for _ in range(r.randint(1, 8))]).encode(), "form junk"
        if pick == 2:
            return bytes(r.randrange(256) for _ in range(r.randint(1, 400))), "random bytes"
        if pick == 3:
            return r.choice([b"payload=", b"payload", b"payload={", b"payload=notjson", b"payload=%ZZ", b"%",
                             b"payload=%7B%22type%22", b"=&=&&=", b"payload=" + b"%00" * 100,
                             b"payload=" + b"%5B" * 50_000 + b"%5D" * 50_000]), "broken payload"  # finding 12
        if pick == 4:
            return b"payload=" + urllib.parse.quote(json.dumps(r.choice([[], "x", 1, None, True, [{}], 1.5]))).encode(), "payload not an object"
        if pick == 5:
            return json.dumps(self.rjson()).encode(), "json body"
        if pick == 6:
            event = {"type": r.choice(["url_verification", "event_callback", "app_rate_limited", "x"]),
                     "challenge": self.word(), "token": "t", "team_id": self.team(), "event": self.rjson(1)}
            return json.dumps(event).encode(), "events api"
        if pick == 7:
            return b"ssl_check=1&token=x", "ssl check"
        if pick == 8:
            return b"text=" + "é".encode("latin-1") * 50, "latin-1 bytes"
        if pick == 9:
            kind = r.choice(["view_submission", "shortcut", "message_action", "block_suggestion", "interactive_message",
                             "dialog_submission", "view_closed", "workflow_step_edit", "block_actions"])
            payload = {"type": kind, "team": {"id": self.team()}, "user": {"id": self.user()}, "view": self.rjson(1),
                       "callback_id": self.word_plain(), "action_id": r.choice(ACTIONS), "value": self.run_ref(),
                       "actions": self.rjson(1), "trigger_id": self.word_plain()}
            return self.payload_body(payload), f"{kind} payload"
        if pick == 10:
            return ("text=" + "x" * r.randint(10_000, 200_000)).encode(), "long form"
        return b"&".join(b"k%d=v" % i for i in range(r.randint(100, 3000))), "many fields"

    # ------------------------------------------------------------------ safety
    def authorized_and_live(self, body: bytes) -> bool:
        """Whether a validly signed body could be a real request of a requester or approver on the
        open run: a request that may legitimately decide; the fuzzer never sends one."""
        text = urllib.parse.unquote_plus(body.decode("utf-8", "replace"))
        with contextlib.suppress(ValueError, IndexError, RecursionError):  # ids written as \u escapes in the JSON: undone
            text += json.dumps(json.loads(text.split("payload=", 1)[1].split("&payload=")[0]), ensure_ascii=False)
        live = self.known.run_id.lower() in text.lower()
        # as a value, whole: "U0LEAD" in JSON, user_id=U0LEAD in a form (not " U0LEAD", not <@U0LEAD> in a text)
        return live and any(re.search(rf'"{user}"|={user}(?:&|$)', text) is not None for user in AUTHORIZED)

    def safe_command(self, text: str) -> bool:
        """No verify/report of the live target with a long window (it would hold a worker that long)."""
        said = words(text)
        if not said or said[0].lower() not in ("verify", "report"):
            return True
        for w in said:
            if w.lower().startswith("window="):
                try:
                    if duration_seconds(w.split("=", 1)[1]) > 1:
                        return False
                except ValueError:
                    pass
        return True

    # ------------------------------------------------------------------ requests
    def next(self) -> Request:
        n, r = self.n, self.rng
        self.n += 1
        pick = r.random()
        if pick < 0.30:
            body, kind = self.any_body(n)
            headers, how = self.headers(body, good=False)
            return Request(n, f"{kind}, {how}", body, {**headers, **self.content_type()})
        if pick < 0.62:
            return self.signed_command(n)
        if pick < 0.86:
            return self.signed_click(n)
        if pick < 0.95:
            body, kind = self.junk_body()
            return self.signed(Request(n, f"signed {kind}", body, self.content_type()))
        if pick < 0.97:
            return self.other_route(n)
        if pick < 0.99:
            return self.extra_headers(n)
        return self.malformed(n)

    def defused(self, request: Request) -> None:
        """A body to be signed that could be a requester's or an approver's real request on the open run
        gets U0EVE in their place: the fuzzer sends no valid, authorized request."""
        if not request.foreign and self.authorized_and_live(request.body):
            for user in AUTHORIZED:
                request.body = re.sub(rb"(%22|=)" + user.encode() + rb"(%22|&|$)", rb"\1U0EVE\2", request.body)
            request.kind += " (authorized ids replaced)"

    def signed(self, request: Request) -> Request:
        self.defused(request)
        request.headers = {**request.headers, **sign(request.body)}
        request.signed = True
        if self.rng.random() < 0.05:
            request.headers["X-Slack-Retry-Num"] = self.rng.choice(["1", "2", "x", "-1", "99999999999"])
            request.headers["X-Slack-Retry-Reason"] = self.rng.choice(["http_timeout", "", "é"])
        return request

    def content_type(self) -> dict[str, str]:
        r = self.rng
        if r.random() < 0.85:
            return {"Content-Type": "application/x-www-form-urlencoded"}
        value = r.choice(CONTENT_TYPES)
        return {"Content-Type": value} if value else {}

    def any_body(self, n: int) -> tuple[bytes, str]:
        """What an attacker would send unsigned: real-looking commands and clicks, aimed at the run."""
        r = self.rng
        pick = r.random()
        if pick < 0.35:
            text = r.choice([f"approve {self.known.run_id}", f"reject {self.known.run_id}", CANARY,
                             f"rollback {self.known.run_id}", f"close {self.known.run_id}", self.text()])
            return self.command_body(user=r.choice(AUTHORIZED), team=OWN_TEAM, text=text, n=n), "command"
        if pick < 0.7:
            payload = self.click_payload(user=r.choice(AUTHORIZED), team=OWN_TEAM, n=n)
            payload["actions"][0]["value"] = r.choice([self.known.gate, self.known.run_id])
            return self.payload_body(payload), "click on the gate"
        return self.junk_body()

    def signed_command(self, n: int) -> Request:
        r = self.rng
        foreign = r.random() < 0.2
        user = r.choice(AUTHORIZED) if foreign and r.random() < 0.7 else self.user()
        team = r.choice([OTHER_TEAM, "E0ENT", "", "t0test"]) if foreign else r.choice([OWN_TEAM] * 9 + [self.team()])
        for _ in range(100):
            if foreign or r.random() < 0.3:
                text = r.choice([f"approve {self.known.run_id}", f"reject {self.known.run_id}",
                                 f"rollback {self.known.run_id} reason=x", CANARY.replace("node1", "node2"),
                                 f"close {self.known.run_id}", f"promote {self.known.run_id}", self.text()])
            else:
                text = self.text()
            if self.safe_command(text):
                break
        else:
            text = "help"
        if not foreign and user in AUTHORIZED and self.known.run_id.lower() in text.lower():
            user = r.choice(OUTSIDERS)  # a requester or an approver naming the live run: could be valid
        body = self.command_body(user=user, team=team, text=text, n=n)
        what = "foreign command" if foreign else "command"
        return self.signed(Request(n, f"signed {what} by {user[:40]!r}: {text[:80]!r}", body, self.content_type(),
                                   foreign=foreign))

    def signed_click(self, n: int) -> Request:
        r = self.rng
        payload: Any
        if r.random() < 0.2:  # from another workspace: may name an approver and the open gate
            payload = self.click_payload(user=r.choice([*AUTHORIZED, "U0EVE"]), team=OTHER_TEAM, n=n)
            payload["user"]["team_id"] = OTHER_TEAM
            payload["actions"][0]["value"] = r.choice([self.known.gate, self.known.run_id, self.run_ref()])
            return self.signed(Request(n, "signed foreign click", self.payload_body(payload), self.content_type(),
                                       foreign=True))
        user = self.user()
        payload = self.click_payload(user=user, team=self.team(), n=n)
        kind = f"signed click by {user[:40]!r}"
        if r.random() < 0.3:
            payload = self.mutate(payload)
            kind += " (mutated)"
        if r.random() < 0.05:
            not_objects: list[Any] = [[payload], json.dumps(payload), None, 1]
            payload = r.choice(not_objects)
            kind += " (not an object)"
        return self.signed(Request(n, kind, self.payload_body(payload), self.content_type()))

    def other_route(self, n: int) -> Request:
        r = self.rng
        method = r.choice(["GET", "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"])
        path = r.choice(["/healthz", "/metrics", "/readyz", "/nope", "/slack/events/", "/slack/events?x=1",
                         "/slack/../slack/events", "/" + "a" * 8000, "/slack/events%00", "/%ff", "//slack/events",
                         "/slack/EVENTS", "/slack/events#x"])
        if path == "/readyz" and r.random() < 0.7:
            path = "/healthz"  # readiness calls the fake Slack's auth.test: a few are enough
        body, kind = (b"", "empty") if method in ("GET", "HEAD") else self.junk_body()
        request = Request(n, f"{method} {kind} on another route", body, method=method, path=path)
        if r.random() < 0.5:  # "/slack/events?x=1" and "/slack/events#x" are the Slack endpoint: defused too
            self.defused(request)
            request.headers = sign(request.body)
        return request

    def extra_headers(self, n: int) -> Request:
        r = self.rng
        request = self.signed_command(n) if r.random() < 0.5 else Request(n, "unsigned", *self.junk_body()[:1])
        extra = {
            "X-Slack-Retry-Num": "1" * 500, "X-Forwarded-For": ", ".join(["1.2.3.4"] * 200),
            "Host": r.choice(["", "evil.example", "x" * 1000]), "Accept-Encoding": "gzip, deflate, br",
            "Content-Encoding": r.choice(["gzip", "br", "identity"]), "Connection": r.choice(["close", "keep-alive", "x"]),
            "X-Junk": "".join(r.choice(HEADER_CHARS) for _ in range(r.randint(1, 4000))),
            "Cookie": "a=" + "b" * 3000, "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        }
        chosen = dict(r.sample(sorted(extra.items()), r.randint(1, 4)))
        request.headers = {**request.headers, **chosen}
        if "Content-Encoding" in chosen and chosen["Content-Encoding"] != "identity":
            request.kind += f" (Content-Encoding {chosen['Content-Encoding']} on a plain body)"
        request.kind += f" with extra headers {sorted(chosen)}"
        return request

    def malformed(self, n: int) -> Request:
        """Framing that http.client would not send: raw bytes on a socket of their own."""
        r = self.rng
        body = slash_command("help", response_url=f"{self.known.fake_url}/response/f{n}")
        signature = sign(body)
        head = (f"X-Slack-Request-Timestamp: {signature['X-Slack-Request-Timestamp']}\r\n"
                f"X-Slack-Signature: {signature['X-Slack-Signature']}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n").encode()
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        variants = {
            "content-length not a number": b"Content-Length: abc\r\n\r\n" + body,
            "negative content-length": b"Content-Length: -5\r\n\r\n" + body,
            "content-length too short": b"Content-Length: 10\r\n\r\n" + body,
            "two content-lengths": b"Content-Length: %d\r\nContent-Length: 3\r\n\r\n%s" % (len(body), body),
            "chunked, signed": b"Transfer-Encoding: chunked\r\n\r\n" + chunked,
            "chunked, broken": b"Transfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n0\r\n\r\n",
            "chunked and content-length": b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + chunked,
            "huge content-length": b"Content-Length: 99999999999999999999\r\n\r\n" + body,
            "header without colon": b"Garbage header line\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
            "header folding": b"X-Slack-Signature:\r\n v0=00\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
            "expect 100-continue": b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
            "expect 100-continue, no body": b"Expect: 100-continue\r\nContent-Length: 0\r\n\r\n",
        }
        name = r.choice(sorted(variants))
        version = r.choice([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.1", b"HTTP/9.9"])
        raw = b"POST /slack/events " + version + b"\r\nHost: x\r\n" + head + variants[name]
        return Request(n, f"malformed: {name} ({version.decode()})", raw=raw, signed=False)

    def large(self, n: int, *, signed: bool) -> Request:
        body = slash_command("help " + "L" * (1024 * 1024 + self.rng.randint(1, 5000)))
        return Request(n, f"over 1 MiB, {'signed' if signed else 'unsigned'}", body,
                       {**(sign(body) if signed else {}), "Content-Type": "application/x-www-form-urlencoded"})

    def all(self, total: int) -> list[Request]:
        requests = [self.next() for _ in range(total - 4)]
        for i, signed in enumerate((True, False, True, False)):
            requests.append(self.large(total - 4 + i, signed=signed))
            self.n += 1
        return requests


# ---------------------------------------------------------------------- sending
class Sender:
    """One thread's keep-alive connection; a new one whenever the server closed it."""

    def __init__(self, base: str, throttle: Callable[[], None]) -> None:
        parts = urllib.parse.urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.conn: http.client.HTTPConnection | None = None
        self.throttle = throttle

    def send(self, request: Request) -> Result:
        if request.signed:
            self.throttle()
        if request.raw is not None:
            return self._raw(request, request.raw)
        if request.method == "HEAD":  # read to the end on a socket of its own: a HEAD answer has no content
            head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "x", **request.headers}.items())
            raw = f"HEAD {request.path} HTTP/1.1\r\n{head}Connection: close\r\n\r\n".encode()
            return self._raw(request, raw)
        if len(request.body) > 1024 * 1024:
            self.close()  # the server answers 413 and closes: a connection of its own
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self.conn.putrequest(request.method, request.path, skip_host="Host" in request.headers,
                                     skip_accept_encoding="Accept-Encoding" in request.headers)
                for name, value in request.headers.items():
                    self.conn.putheader(name, value.encode("utf-8"))
                if request.body or request.method not in ("GET", "HEAD"):
                    self.conn.putheader("Content-Length", str(len(request.body)))
                self.conn.endheaders(request.body or None)
                response = self.conn.getresponse()
                response.read()
                if response.will_close:
                    self.close()
                return Result(request, response.status)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if attempt == 2 or len(request.body) > 1024 * 1024:
                    return Result(request, None, f"{type(exc).__name__}: {exc}")
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                return Result(request, None, f"{type(exc).__name__}: {exc}")
        raise AssertionError("unreachable")

    def _raw(self, request: Request, raw: bytes) -> Result:
        data = b""
        try:
            with socket.create_connection((self.host, self.port), timeout=2) as sock:
                sock.sendall(raw)
                with contextlib.suppress(OSError):  # the server may close first
                    sock.shutdown(socket.SHUT_WR)
                while chunk := sock.recv(65536):
                    data += chunk
        except OSError as exc:
            if not data:
                return Result(request, None, f"{type(exc).__name__}: {exc}")
        statuses = [int(m) for m in re.findall(rb"^HTTP/1\.[01] (\d{3})", data, re.M) if m != b"100"]
        if not statuses:
            return Result(request, None, f"no answer: {data[:200]!r}")
        return Result(request, max(statuses), content=data.split(b"\r\n\r\n", 1)[-1] if b"\r\n\r\n" in data else b"")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def send_all(requests: list[Request], base: str, throttle: Callable[[], None]) -> list[Result]:
    results: list[Result | None] = [None] * len(requests)
    failures: list[BaseException] = []

    def work(shard: int) -> None:
        sender = Sender(base, throttle)
        try:
            for i in range(shard, len(requests), THREADS):
                results[i] = sender.send(requests[i])
        except BaseException as exc:  # a bug of the test itself: say so, do not hang
            failures.append(exc)
        finally:
            sender.close()

    threads = [threading.Thread(target=work, args=(s,), name=f"fuzz-{s}") for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not failures, failures
    done = [r for r in results if r is not None]
    assert len(done) == len(requests), f"{len(requests) - len(done)} requests never sent"
    return done


# ---------------------------------------------------------------------- logs
class Lines(logging.Handler):
    """Every record, and its line formatted as ``serve`` formats it (``configure_logging``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []
        self.records: list[logging.LogRecord] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        with self._guard:
            self.lines.append(line)
            self.records.append(record)


# ---------------------------------------------------------------------- the test
def requested(bot: RunBot) -> Known:
    """U0ANA's canary, on purpose: the one run there may be, waiting at its gate."""
    body = slash_command(CANARY, user="U0ANA", response_url=bot.fake.response_url("canary"))
    assert bot.slack.command("", body=body).status == 200
    found = eventually(lambda: roots(bot.fake), "the root message")
    assert isinstance(found, list) and len(found) == 1, found
    root_ts = posted_ts(found[0])
    gate_ts, gate = bot.slack.gate(root_ts)
    eventually(lambda: idle(bot), "everything sent")
    (run,) = bot.runtime.engine.runs()
    assert run.state is S.AWAITING_APPROVAL and run.gate is not None and run.gate.is_open
    return Known(bot.fake.url, run.id, gate, gate_ts, root_ts)


def quiet(fake: FakeSlack, *, still: float = 0.3, timeout: float = 30.0) -> None:
    """Once the fake Slack got no call for ``still`` seconds (answers sent from threads of their own)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = len(fake.calls)
        time.sleep(still)
        if len(fake.calls) == seen:
            return
    raise AssertionError(f"the fake Slack still called after {timeout}s")


def verb_of(call_text: str) -> str | None:
    """The verb of the command a public reply names in its context (``<@U> ran `/upgrade <verb> …```)."""
    found = re.search(r"ran `/\S*(.*)`", call_text, re.S)
    if found is None:
        return None
    said = words(found.group(1))
    return said[0].lower() if said else "help"


def context_of(body: dict[str, Any]) -> str:
    texts = [str(e.get("text", "")) for b in body.get("blocks", []) if isinstance(b, dict) and b.get("type") == "context"
             for e in b.get("elements", []) if isinstance(e, dict)]
    return "\n".join(texts)


def family(request: Request) -> str:
    """The generator's kind without the particulars (who, what text): for counting."""
    return re.split(r" by | on | with |: | \(", request.kind, maxsplit=1)[0]


def where_raised(record: logging.LogRecord) -> str:
    """``Type at file:line`` of a logged exception (the innermost frame), or the line's head."""
    if record.exc_info and record.exc_info[1] is not None:
        exc, tb = record.exc_info[1], record.exc_info[2]
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        at = f"{tb.tb_frame.f_code.co_filename.split('site-packages/')[-1]}:{tb.tb_lineno}" if tb else "?"
        return f"{type(exc).__name__} at {at} ({record.name}: {record.getMessage()[:60]})"
    return f"{record.name}: {record.getMessage()[:120]}"


def uncaught_in(args: threading.ExceptHookArgs) -> str:
    """``Type at file:line in <thread's target>: message`` of an exception no one caught in a thread."""
    tb = args.exc_traceback
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    at = f"{tb.tb_frame.f_code.co_filename.split('site-packages/')[-1]}:{tb.tb_lineno}" if tb else "?"
    thread = (args.thread.name if args.thread else "?").split(" ", 1)[-1]
    return f"{args.exc_type.__name__} at {at} in {thread}: {str(args.exc_value)[:160]!r}"


def exception_of(record: logging.LogRecord) -> str:
    if record.exc_info and record.exc_info[1] is not None:
        return f"{type(record.exc_info[1]).__name__}: {str(record.exc_info[1])[:300]!r}"
    return record.getMessage()[-300:]


def counted(items: list[str], limit: int = 12) -> str:
    tally: dict[str, int] = {}
    for item in items:
        tally[item] = tally.get(item, 0) + 1
    return "; ".join(f"{n} x {item}" for item, n in sorted(tally.items(), key=lambda kv: -kv[1])[:limit])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ten_thousand_generated_requests(run_bot: RunBot, redis_url: str, capfd: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bot = run_bot
    lines = Lines()
    root_logger = logging.getLogger()
    # as `serve` does (configure_logging): its handler alone on the root logger, here at DEBUG; pytest's own
    # capturing handlers would format every record twice more, for nothing the check needs
    monkeypatch.setattr(root_logger, "handlers", [lines])
    monkeypatch.setattr(root_logger, "level", logging.DEBUG)
    uncaught: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: uncaught.append(uncaught_in(args)))
    try:
        known = requested(bot)
        run_before = bot.runtime.engine.get(known.run_id)
        audit_before = bot.runtime.engine.audit(known.run_id)
        calls_before = len(bot.fake.calls)
        requests = Generator(SEED, known).all(TOTAL)
        assert len(requests) == TOTAL and len({r.n for r in requests}) == TOTAL
        waited: list[float] = []

        def throttle() -> None:  # keep the signed ones for the workers, not the "busy" answer
            start = time.monotonic()
            while (any(p.pending >= p.size + p.backlog - THREADS for p in pools(bot))
                   and time.monotonic() < start + 10):
                time.sleep(0.002)
            waited.append(time.monotonic() - start)

        started = time.monotonic()
        results = send_all(requests, bot.slack.url, throttle)
        sent = time.monotonic() - started
        eventually(lambda: idle(bot), "the background work of the fuzz", timeout=120)
        quiet(bot.fake)
        settled = time.monotonic() - started
    finally:
        monkeypatch.undo()
    where = (f"seed {SEED}; {TOTAL} requests sent in {sent:.1f}s, settled in {settled:.1f}s, "
             f"{sum(waited):.1f}s waited for the workers")
    problems: list[str] = []

    def check(ok: object, what: str, examples: list[str]) -> None:
        if not ok:
            problems.append(what + "\n    " + "\n    ".join(e[:700] for e in examples[:6]))

    # 1. no 5xx, everything answered; what is not correctly signed is refused, never handled
    fivexx = [r for r in results if r.status is not None and r.status >= 500]
    check(not fivexx, f"{len(fivexx)} answered 5xx; by kind: {counted([family(r.request) for r in fivexx])}",
          [f"{r.status} {r.request.describe()}" for r in fivexx])
    unanswered = [r for r in results if r.status is None and not r.request.kind.startswith(("over 1 MiB", "malformed"))]
    check(not unanswered, f"{len(unanswered)} unanswered", [f"{r.error} {r.request.describe()}" for r in unanswered])
    forged = [r for r in results if r.request.path == "/slack/events" and not r.request.signed and r.request.raw is None
              and r.request.method == "POST" and not (r.status is not None and 400 <= r.status < 500)
              and not (r.status is None and r.request.kind.startswith("over 1 MiB"))]  # closed while still sending
    check(not forged, f"{len(forged)} unsigned or badly signed requests not refused with a 4xx; by answer and kind: "
          f"{counted([f'{r.status} {family(r.request)}' for r in forged])}", [f"{r.status} {r.request.describe()}" for r in forged])
    heads = [r for r in results if r.request.method == "HEAD" and r.content]
    check(not heads, f"{len(heads)} HEAD requests answered with content (on a keep-alive connection it is read "
          "as the next answer)", [f"{r.status} {r.content[:40]!r} to {r.request.describe()}" for r in heads])
    large = [r for r in results if r.request.kind.startswith("over 1 MiB")]
    check(all(r.status in (413, None) for r in large), "a body over 1 MiB not refused 413",
          [f"{r.status} {r.error} {r.request.kind}" for r in large])

    # 2. no traceback, every line one line of at most 2 KB
    tracebacks = [r for r in lines.records if r.exc_info or r.exc_text or "Traceback" in r.getMessage()]
    sites = {where_raised(r): r for r in tracebacks}
    check(not tracebacks, f"{len(tracebacks)} log records with a traceback; raised: "
          f"{counted([where_raised(r) for r in tracebacks], limit=30)}",
          [f"{site}: {exception_of(r)}" for site, r in sites.items()])
    check(not uncaught, f"{len(uncaught)} uncaught exceptions in threads: {counted(uncaught)}", uncaught)
    out, err = capfd.readouterr()
    check("Traceback" not in out + err, "a traceback printed", [(out + err)[:3000]])
    long_lines = sorted((line for line in lines.lines if len(line.encode()) > MAX_LINE), key=lambda x: -len(x.encode()))
    check(not long_lines, f"{len(long_lines)} log lines over {MAX_LINE} bytes (UTF-8)",
          [f"{len(line)} characters, {len(line.encode())} bytes: {line[:300]!r}" for line in long_lines[:3]]
          + [f"{len(line)} characters, {len(line.encode())} bytes: {line[:300]!r}" for line in long_lines[-3:]])
    multi = [line for line in lines.lines if "\n" in line or "\r" in line]
    check(not multi, f"{len(multi)} log lines of several lines", [repr(line) for line in multi])
    assert lines.lines, "the serve-formatted lines were captured"

    # 3. the one run requested on purpose: still waiting at its gate, undecided, alone in Redis
    runs = bot.runtime.engine.runs(limit=100_000)
    check([r.id for r in runs] == [known.run_id], "runs created by the fuzz",
          [f"{r.id} {r.state.value} requested by {r.requester!r} for {r.target.ref} image {r.image!r} node {r.node!r} origin {r.origin}" for r in runs if r.id != known.run_id])
    client = redis.Redis.from_url(redis_url)
    try:
        stored = sorted(k.decode() for k in client.scan_iter(Keys.run("*")))
        check(stored == [Keys.run(known.run_id)], "run records in Redis", stored)
        check(client.zcard(Keys.runs) == 1 and client.scard(Keys.active) == 1, "the run indexes changed", [])
    finally:
        client.close()
    after = bot.runtime.engine.get(known.run_id)
    check(after.state is S.AWAITING_APPROVAL and after.gate is not None and after.gate.is_open,
          f"the run moved: {after.state.value}", [repr(after.gate)])
    before_gate = run_before.gate.model_dump() if run_before.gate else None
    check(after.gate is not None and after.gate.model_dump() == before_gate, "the gate changed", [repr(after.gate)])
    audit_after = bot.runtime.engine.audit(known.run_id)
    check(audit_after == audit_before, "the run's audit grew", [repr(e) for e in audit_after[len(audit_before):]])

    # 4. on Slack: nothing in the run's thread, no rewrite, public replies to reads only, ephemeral refusals
    fuzz_calls = bot.fake.calls[calls_before:]
    in_thread = [c for c in fuzz_calls if c.method == "chat.postMessage" and c.body.get("thread_ts") == known.root_ts]
    check(not in_thread, "posted in the run's thread", [str(c.body.get("text", "")) for c in in_thread])
    rewritten = [c for c in fuzz_calls if c.method == "chat.update"]
    check(not rewritten, "messages rewritten", [f"{c.body.get('ts')}: {c.body.get('text', '')}" for c in rewritten])
    public = [c for c in fuzz_calls if c.method == "chat.postMessage" and not c.body.get("thread_ts")]
    not_reads = [f"{verb_of(context_of(c.body))}: {c.body.get('text', '')[:200]}" for c in public
                 if verb_of(context_of(c.body)) not in READ_VERBS]
    check(not not_reads, "public messages that answer no read-only verb", not_reads)
    answers = {posted_ts(c) for c in public if c.answer.get("ts")}
    elsewhere = [f"in {c.body.get('thread_ts')}: {c.body.get('text', '')[:200]}" for c in fuzz_calls
                 if c.method == "chat.postMessage" and c.body.get("thread_ts") and c.body["thread_ts"] not in answers]
    check(not elsewhere, "posted in a thread that is no answer to the fuzz", elsewhere)
    by_request = {r.request.n: r.request for r in results}
    not_ephemeral, to_unsigned, foreign_answered = [], [], []
    for call in (c for c in fuzz_calls if c.method == "response_url"):
        if call.body.get("response_type") != "ephemeral" or call.body.get("replace_original") is not False:
            not_ephemeral.append(repr(call.body)[:300])
        tag = re.fullmatch(r"/response/f(\d+)", call.path)
        if tag is None:
            continue
        request = by_request[int(tag.group(1))]
        if not (request.signed or request.raw is not None):
            to_unsigned.append(request.describe())
        elif request.foreign and not any(refused in str(call.body.get("text", "")) for refused in FOREIGN_REFUSALS):
            foreign_answered.append(f"{call.body.get('text', '')[:200]!r} to {request.describe()}")
    check(not not_ephemeral, "answers on a response_url that are not ephemeral", not_ephemeral)
    check(not to_unsigned, "answers to unsigned requests", to_unsigned)
    check(not foreign_answered, "another workspace's requests answered other than refused", foreign_answered)

    statuses = counted([str(r.status) for r in results])
    silent = [r for r in results if r.status is None]  # tolerated: malformed framing, bodies over 1 MiB
    statuses += f"; no answer to: {counted([r.request.kind for r in silent])}" if silent else ""
    assert not problems, f"{len(problems)} problem(s) ({where}; statuses: {statuses}):\n" + "\n".join(problems)
    print(f"fuzz ({where}): statuses {statuses}; {len(lines.lines)} log lines, {len(fuzz_calls)} Slack calls")


def test_long_reads_leave_threads_for_short_commands_and_requests(run_bot: RunBot) -> None:
    """Starvation by legal commands (finding 3 of the security review), in one process: four users
    ask for two ``verify … window=10m`` each, within their quotas; while the ones that run watch
    their window, another user's ``help``, ``runs`` and ``status`` are answered and a requester's
    canary posts its request. The verifies held every command thread (4 here) and nothing else
    was answered before a window ended."""
    bot = run_bot
    for user in ("U0W1", "U0W2", "U0W3", "U0W4"):
        for number in range(2):
            body = slash_command(f"verify {TARGET} window=10m", user=user,
                                 response_url=bot.fake.response_url(f"starve-{user}-{number}"))
            assert bot.slack.command("", body=body).status == 200
    for text in ("runs", "status"):
        body = slash_command(text, user="U0EVE", response_url=bot.fake.response_url(f"short-{text}"))
        assert bot.slack.command("", body=body).status == 200
    body = slash_command("help", user="U0EVE", response_url=bot.fake.response_url("short-help"))
    assert "What I can do" in bot.slack.command("", body=body).message["text"]  # in the ack itself
    assert bot.slack.command(CANARY, user="U0ANA").status == 200

    def answered(text: str) -> bool:  # ephemeral on its response_url, or posted in the channel
        return any(c.path.endswith(f"/short-{text}") for c in bot.fake.of("response_url")) or any(
            f"<@U0EVE> ran `/upgrade {text}`" in json.dumps(c.body) for c in bot.fake.of("chat.postMessage"))

    for text in ("runs", "status"):
        eventually(lambda text=text: answered(text), f"{text} answered while the verifies run", timeout=20)
    (root,) = eventually(lambda: roots(bot.fake), "the canary's run posted", timeout=20)  # type: ignore[misc]
    bot.slack.gate(posted_ts(root))
    verified = [c for c in bot.fake.of("chat.postMessage") if str(c.body.get("text", "")).startswith("Verify of")]
    assert not verified, "the verifies were still watching their window"
    eventually(lambda: bot.service.workers.pending == 2,  # the verifies that run: all but the 2 threads kept
               "only the two verifies left running (UPGRADEBOT_WORKERS=4)", timeout=10)


def _poisoned_entry(r: random.Random, good: bytes) -> bytes | None:
    """One generated entry a worker cannot take as a job (finding 5): random bytes, JSON that is
    not a message, a good message mutated (a field dropped, added or of another type, another
    actor or lane, options such as a delay), over the size limit, or an id without data (None)."""
    shape = r.randrange(8)
    if shape == 0:
        return bytes(r.randrange(256) for _ in range(r.randrange(1, 200)))
    if shape == 1:
        return json.dumps(r.choice([None, 1, -1.5, "x", [], [1, "a"], {}, {"args": []}, True])).encode()
    if shape == 2:
        return None
    if shape == 3:
        return good[: r.randrange(1, len(good))]  # cut short
    message = json.loads(good)
    if shape == 4:
        del message[r.choice(sorted(message))]
    elif shape == 5:
        message[r.choice(sorted(message))] = r.choice([None, [None], float("inf"), 7.5, {"a": 1}])  # each wrong
    elif shape == 6:
        message[r.choice(["actor_name", "queue_name"])] = r.choice(["os.system", "upgradebot_runs", "", "commands.DQ"])
        message.setdefault("options", {})
    else:
        message["options"] = r.choice([{"eta": int(time.time() * 1000) + 3_600_000}, {"eta": "soon"}, {"retries": 9},
                                       {"pipe_target": {}}, {"eta": 1e308}])
    data = json.dumps(message).encode()
    return data + b" " * (1024 * 1024) if r.random() < 0.03 else data


@pytest.mark.timeout(120)
def test_generated_undecodable_queue_entries_among_good_jobs(redis_url: str) -> None:
    """Finding 5 of the security review, fuzzed: 300 generated undecodable entries written
    straight into Redis between 120 good jobs on two lanes, consumed by one worker of 4
    threads. Every good job runs exactly once, every bad entry is in the dead-letter list and
    counted once, nothing stays in an acks set or a lane's hash, and every consumer is alive."""
    from bot.jobs import DEAD_LETTERS, NAMESPACE, Jobs

    r = random.Random(SEED + 5)
    store = redis.Redis.from_url(redis_url)
    store.flushdb()
    front, worker = Jobs.from_url(redis_url), Jobs.from_url(redis_url)
    dead: list[tuple[str, str]] = []
    worker.on_dead_letter = lambda lane, reason: dead.append((lane, reason))
    bad = 0
    for n in range(120):
        lane = r.choice(["commands", "decisions"])
        assert front.submit(lane, "command", {"n": n})
        for _ in range(r.choice([0, 2, 3, 5])):
            if bad == 300:
                break
            good = next(v for k, v in store.hgetall(f"{NAMESPACE}:{lane}.msgs").items() if not k.startswith(b"fuzz-"))
            data = _poisoned_entry(r, good)
            message_id = f"fuzz-{bad}"
            if data is not None:
                store.hset(f"{NAMESPACE}:{lane}.msgs", message_id, data)
            store.rpush(f"{NAMESPACE}:{lane}", message_id)
            bad += 1
    seen: list[int] = []
    lock = threading.Lock()

    def handle(lane: str, kind: str, payload: dict[str, Any]) -> None:
        with lock:
            seen.append(int(payload["n"]))

    worker.consume(handle, lanes={"commands", "decisions"}, threads=4)
    try:
        eventually(lambda: len(seen) >= 120 and store.llen(DEAD_LETTERS) >= bad,
                   "every good job run and every bad one dead-lettered", timeout=60)
        eventually(lambda: all(store.hlen(f"{NAMESPACE}:{lane}.msgs") == 0 for lane in ("commands", "decisions"))
                   and sum(store.scard(k) for k in store.scan_iter(f"{NAMESPACE}:__acks__.*")) == 0,
                   "nothing left in a lane's hash or an acks set")
        assert sorted(seen) == list(range(120)), "each good job exactly once"
        assert store.llen(DEAD_LETTERS) == len(dead) == bad, (store.llen(DEAD_LETTERS), len(dead), bad)
        assert worker.dead_lanes() == []
    finally:
        worker.stop(timeout=5)
        store.close()


@pytest.mark.timeout(120)
def test_submissions_while_redis_hangs_at_random_are_answered_in_time_and_as_told() -> None:
    """Finding 10 of the security review, fuzzed: 6 threads submit to the front end's queue
    (deadline 2 s) while a dedicated Redis is stopped (SIGSTOP) and resumed at generated
    moments for generated lengths. Every submission returns within Slack's 3 s, and the
    queue holds exactly the submissions that were told they were queued: none told busy is
    stored late when Redis resumes, none told queued is missing."""
    import os
    import signal

    from bot.jobs import ACK_DEADLINE, NAMESPACE, Jobs, JobsBusy
    from bot.storage.embedded import EmbeddedRedis

    r = random.Random(SEED + 10)
    with EmbeddedRedis() as server:
        jobs = Jobs.from_url(server.url, deadline=ACK_DEADLINE)
        pid = server._proc.pid  # type: ignore[union-attr]
        told: dict[str, str] = {}
        slow: list[str] = []
        stop = threading.Event()
        lock = threading.Lock()

        def submitter(t: int) -> None:
            n = 0
            while not stop.is_set():
                name = f"{t}-{n}"
                n += 1
                started = time.monotonic()
                try:
                    outcome = "queued" if jobs.submit("commands", "command", {"name": name}) else "full"
                except JobsBusy:
                    outcome = "busy"
                took = time.monotonic() - started
                with lock:
                    told[name] = outcome
                    if took >= 3.0:
                        slow.append(f"{name} {outcome} in {took:.2f} s")
                time.sleep(r.random() * 0.05)

        threads = [threading.Thread(target=submitter, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        try:
            for _ in range(3):
                time.sleep(0.2 + r.random() * 0.6)
                os.kill(pid, signal.SIGSTOP)
                try:
                    time.sleep(0.5 + r.random() * 2.5)
                finally:
                    os.kill(pid, signal.SIGCONT)
            time.sleep(0.5)
        finally:
            stop.set()
            os.kill(pid, signal.SIGCONT)
            for t in threads:
                t.join(timeout=30)
        store = redis.Redis.from_url(server.url)
        assert store.ping()
        stored = {json.loads(m)["args"][1]["name"] for m in store.hvals(f"{NAMESPACE}:commands.msgs")}
        queued = {name for name, outcome in told.items() if outcome == "queued"}
        busy = {name for name, outcome in told.items() if outcome == "busy"}
        assert not slow, slow
        assert busy and queued, counted(list(told.values()))
        assert stored == queued, (sorted(stored - queued)[:10], sorted(queued - stored)[:10])
        assert store.llen(f"{NAMESPACE}:commands") == len(queued)
        store.close()
        jobs.stop(timeout=1)
