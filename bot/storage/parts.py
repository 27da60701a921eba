"""A run's large progress values kept apart from it in Redis (plain data, no I/O):
:mod:`bot.storage.redis_store` splits a run into its slim JSON and its parts on a save, joins
them on a read, and sends a part only when its digest differs from what Redis holds
(:data:`~bot.storage.layout.SAVE` compares them).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from pydantic_core import to_json

from runbooks.engine.runs import APART, Run

PART = "part:"
PART_BYTES = 2048
"""A progress value whose JSON is this long or longer (a baseline of every node, a wave plan)
is kept in a field of the run's hash of its own, ``part:<key>``, with its digest in
``digest:part:<key>``, and sent only when its digest differs from Redis's: a save of a
5,000-node run sends what changed, not 2 MB, whichever process wrote the version it replaces."""


class PartialRun(ValueError):
    """A run read without its parts (``whole=False``) was given to ``save``."""


def split_parts(run: Run) -> tuple[str, dict[str, str]]:
    """The run's JSON with each large progress value replaced by a marker (its size, its
    entries), and those values' JSON by field."""
    parts: dict[str, str] = {}
    slim: dict[str, Any] = {}
    for key, value in run.progress.items():
        if isinstance(value, dict) and APART in value:
            raise PartialRun(f"run {run.id} was read without its parts ({key}): read it whole to save it")
        text = to_json(value).decode()
        if len(text) < PART_BYTES:
            slim[key] = value
            continue
        parts[PART + key] = text
        slim[key] = {APART: len(text), "entries": len(value) if isinstance(value, (dict, list)) else 1}
    if not parts:
        return run.model_dump_json(), parts
    return run.model_copy(update={"progress": slim}).model_dump_json(), parts


def join_parts(run: Run, parts: dict[str, str]) -> Run:
    progress = dict(run.progress)
    for field, text in parts.items():
        progress[field[len(PART):]] = json.loads(text)
    return run.model_copy(update={"progress": progress})


def digests_of(parts: dict[str, str]) -> dict[str, str]:
    """Each part's digest, by field: what Redis keeps beside it (``digest:<field>``),
    :class:`KnownParts` keeps and a save compares."""
    return {field: hashlib.blake2b(text.encode(), digest_size=16).hexdigest() for field, text in parts.items()}


def part_args(parts: dict[str, str], digests: dict[str, str], *, send: Collection[str]) -> list[Any]:
    """The save script's part arguments: a count, then each part's field and digest, with
    ``1`` and its value when it is in ``send``, else ``0`` (Redis holds it, the script checks)."""
    args: list[Any] = [len(parts)]
    for field, text in parts.items():
        args += [field, digests[field], "1", text] if field in send else [field, digests[field], "0"]
    return args


class KnownParts:
    """Per run, the digests of its parts as of the newest version this store read or wrote: a
    save over that version sends the parts that differ at once (over another version, none at
    first: the save script answers which it lacks)."""

    def __init__(self, size: int = 256) -> None:
        self._runs: OrderedDict[str, tuple[int, dict[str, str]]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def put(self, run_id: str, version: int, digests: dict[str, str]) -> None:
        with self._lock:
            held = self._runs.get(run_id)
            if held is not None and held[0] > version:  # a read that ended after our newer save
                return
            self._runs[run_id] = (version, dict(digests))
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._size:
                self._runs.popitem(last=False)

    def get(self, run_id: str, version: int) -> dict[str, str] | None:
        with self._lock:
            known = self._runs.get(run_id)
        return dict(known[1]) if known is not None and known[0] == version else None
