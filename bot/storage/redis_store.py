"""The Redis implementation of :class:`runbooks.engine.store.RunStore`: the only module that imports ``redis``.

The keys and the Lua scripts are declared in :mod:`bot.storage.layout`. Creating a run
(with its lock) and saving one (compare-and-set on ``version``, lease fencing, lock
release when it ends, audit entries) are each one script, so they are atomic: no other
client sees half of one. Every call that cannot reach Redis raises
:class:`~runbooks.engine.store.StoreUnavailable` with the URL, its password left out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.backoff
import redis.cluster
import redis.retry
import redis.sentinel

from bot.storage.layout import (
    ACQUIRE,
    ACQUIRE_LEADER,
    CLAIM_EFFECT,
    CLAIM_REPORT_POST,
    CREATE,
    GLOBAL_AUDIT_MAXLEN,
    OLD_PREFIX,
    PREFIX,
    RELEASE,
    RELEASE_REPORT_POST,
    RENEW_SLOT,
    SAVE,
    SAVE_COLLECTION,
    TAKE_OVER,
    TAKE_SLOT,
    Keys,
)
from bot.storage.parts import (
    PART,
    KnownParts,
    digests_of,
    join_parts,
    part_args,
    split_parts,
)
from runbooks.engine.runs import REOPENABLE, TERMINAL, Run
from runbooks.engine.store import LeaseLost, LockHeld, StaleRun, StoreUnavailable
from runbooks.errors import redact_url, scrub

if TYPE_CHECKING:  # the stability reports' models, loaded by their methods: `status` reads runs only (issue 39)
    from runbooks.stability.collecting import Collected
    from runbooks.stability.tallying import Tally

log = logging.getLogger("upgradebot.store")
EFFECT_TTL = dt.timedelta(minutes=10)
"""How long a claim on a run thread's Slack effect, never recorded (its holder died or stopped
between the claim and the record), keeps another process from doing it again (a holder
provably dead is taken over at once: ``bot.slack.claims``)."""

def _flatten(entries: Sequence[dict[str, Any]]) -> list[str]:
    """Audit entries as the scripts read them: count, then (field count, fields...) each."""
    out = [str(len(entries))]
    for entry in entries:
        fields: list[str] = []
        for key, value in entry.items():
            if value is None:
                continue
            fields += [key, json.dumps(value) if key == "evidence" else str(value)]
        out += [str(len(fields)), *fields]
    return out


def _ms(ttl: dt.timedelta) -> int:
    return max(1, int(ttl.total_seconds() * 1000))


class RedisRunStore:
    """Runs, target locks, leases, audit streams and idempotency claims in Redis."""

    def __init__(self, client: redis.Redis, *, url: str = "") -> None:
        self.client = client
        self.url = url
        self._create = client.register_script(CREATE)
        self._save = client.register_script(SAVE)
        self._acquire = client.register_script(ACQUIRE)
        self._take_over = client.register_script(TAKE_OVER)
        self._release = client.register_script(RELEASE)
        self._save_collection = client.register_script(SAVE_COLLECTION)
        self._acquire_leader = client.register_script(ACQUIRE_LEADER)
        self._claim_report_post = client.register_script(CLAIM_REPORT_POST)
        self._release_report_post = client.register_script(RELEASE_REPORT_POST)
        self._claim_effect = client.register_script(CLAIM_EFFECT)
        self._skipped: set[str] = set()
        """Keys holding something that is not ours, already logged (each is logged once)."""
        self._take_slot = client.register_script(TAKE_SLOT)
        self._renew_slot = client.register_script(RENEW_SLOT)
        self._known = KnownParts()
        self.last_save_bytes = 0
        """What the last :meth:`save` sent to Redis (its arguments), for the benchmarks."""
        self.on_save: Callable[[int], object] | None = None
        """Told what each :meth:`save` sent (``upgradebot_run_save_bytes``, where a Slack service
        runs the engine): a save resending a run's unchanged parts shows there."""

    @classmethod
    def from_url(cls, url: str) -> RedisRunStore:
        """Connect and check the server answers; ``StoreUnavailable`` with the reason if not.

        ``redis://``, ``rediss://`` and ``unix://`` name the server; ``redis+sentinel://``
        (``rediss+sentinel://`` for TLS) names Sentinels and the master they watch:
        ``redis+sentinel://[[user]:password@]host:26379[,host:port…]/<master>[/<db>]``;
        ``redis+cluster://[[user]:password@]host:port[,host:port…]`` a Redis Cluster (every
        key of ours is in one slot: :mod:`bot.storage.layout`)."""
        try:
            client = connect(url, decode=True)
        except REDIS_ERRORS as exc:  # a cluster client connects at once
            raise StoreUnavailable(unreachable(url, exc)) from exc
        except ValueError as exc:
            raise StoreUnavailable(
                f"{_safe(url)!r} is not a Redis URL ({_reason(exc)}): REDIS_URL takes "
                "redis://[user:password@]host:6379/0, rediss://…, unix:///path/to/redis.sock or "
                "redis+sentinel://[:password@]host:26379[,host:port]/<master>[/<db>] or redis+cluster://host:port[,host:port]"
            ) from None
        store = cls(client, url=url)
        store.ping()
        return store

    def migrate_keys(self) -> int:
        """Rename the keys of a version before the hash-tagged prefix (``upgradebot:*`` ->
        ``{upgradebot}:*``), values and expiries kept, a key of the new layout never
        overwritten; how many were moved. Safe to run twice, and from two processes."""
        moved = 0
        for old in self._do(lambda: list(self.client.scan_iter(match=OLD_PREFIX + "*", count=500))):
            new = PREFIX + old[len(OLD_PREFIX):]
            try:
                moved += int(bool(self._do(lambda old=old, new=new: self.client.renamenx(old, new))))
            except redis.ResponseError:  # another process moved it first
                continue
        return moved

    def ping(self) -> None:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            raise StoreUnavailable(unreachable(self.url, exc)) from exc

    def close(self) -> None:
        self.client.close()

    @property
    def safe_url(self) -> str:
        """The URL as it may be shown: its password masked."""
        return _safe(self.url)

    def persistence(self) -> str | None:
        """How the server keeps data across a restart (``"the append-only file"``, ``"RDB
        snapshots (save 3600 1 …)"``), or None when it keeps nothing. ``StoreUnavailable``
        when it cannot be told (``CONFIG GET`` refused, as some managed services do)."""
        try:
            aof = self._do(lambda: self.client.config_get("appendonly")).get("appendonly")
            save = self._do(lambda: self.client.config_get("save")).get("save")
        except redis.ResponseError as exc:
            raise StoreUnavailable(f"cannot tell whether Redis at {_safe(self.url)} persists its data "
                                   f"(CONFIG GET: {_reason(exc)})") from exc
        if aof == "yes":
            return "the append-only file"
        if save:
            return f"RDB snapshots (save {save})"
        return None

    # ------------------------------------------------------------------ runs
    def create(self, run: Run, *, audit: Sequence[dict[str, Any]] = ()) -> Run:
        keys = [Keys.run(run.id), Keys.lock(run.target.key), Keys.runs, Keys.active,
                Keys.run_audit(run.id), Keys.audit]
        slim, parts = split_parts(run)
        digests = digests_of(parts)
        head = [run.id, slim, run.state.value, run.created_at.timestamp(), GLOBAL_AUDIT_MAXLEN]
        status, detail, _ = self._write(self._create, keys, head=head, parts=parts, digests=digests, known={},
                                        audit=_flatten(audit))
        if status == "locked":
            raise LockHeld(run.target.key, detail)
        if status == "exists":
            raise ValueError(f"run {run.id} exists already")
        self._known.put(run.id, run.version, digests)
        return run

    def get(self, run_id: str, *, whole: bool = True) -> Run | None:
        """The run; ``whole=False``: without its large progress values (each a marker saying how
        large it is), for views whose cost must not grow with the nodes; such a run cannot be saved."""
        if not whole:
            data = self._do(lambda: self.client.hget(Keys.run(run_id), "json"))
            return Run.model_validate_json(data) if data else None
        fields = self._do(lambda: self.client.hgetall(Keys.run(run_id)))
        return self._whole(fields) if fields.get("json") else None

    def _whole(self, fields: dict[str, str]) -> Run:
        run = Run.model_validate_json(fields["json"])
        parts = {f: v for f, v in fields.items() if f.startswith(PART)}
        self._known.put(run.id, run.version, digests_of(parts))
        return join_parts(run, parts) if parts else run

    def save(
        self, run: Run, *, audit: Sequence[dict[str, Any]] = (), lease_owner: str | None = None
    ) -> Run:
        stored = run.model_copy(update={"version": run.version + 1})
        keys = [Keys.run(run.id), Keys.lock(run.target.key), Keys.active, Keys.lease(run.id),
                Keys.run_audit(run.id), Keys.audit]
        ended = "1" if run.state in TERMINAL else ("2" if run.previous_state in REOPENABLE else "0")
        slim, parts = split_parts(stored)
        digests = digests_of(parts)
        head = [run.id, slim, run.state.value, run.version, ended, lease_owner or "", GLOBAL_AUDIT_MAXLEN]
        status, detail, self.last_save_bytes = self._write(
            self._save, keys, head=head, parts=parts, digests=digests, known=self._known.get(run.id, run.version),
            audit=_flatten(audit))
        if self.on_save is not None:
            self.on_save(self.last_save_bytes)
        if status == "stale":
            raise StaleRun(run.id, run.version, int(detail))
        if status == "missing":
            raise StaleRun(run.id, run.version, None)
        if status == "lease":
            raise LeaseLost(run.id, lease_owner or "", detail or None)
        if status == "locked":
            raise LockHeld(run.target.key, detail)
        self._known.put(run.id, stored.version, digests)
        return stored

    def list_runs(self, *, active_only: bool = False, limit: int = 100, whole: bool = True) -> list[Run]:
        """Newest first; ``whole=False``: each without its large progress values (:meth:`get`)."""
        def read() -> list[Any]:
            ids: list[Any] = (
                list(self.client.smembers(Keys.active)) if active_only
                else list(self.client.zrevrange(Keys.runs, 0, limit - 1))
            )
            pipe = self.client.pipeline(transaction=False)
            for run_id in ids:
                if whole:
                    pipe.hgetall(Keys.run(str(run_id)))
                else:
                    pipe.hget(Keys.run(str(run_id)), "json")
            return list(zip(ids, pipe.execute(raise_on_error=False), strict=True))

        runs = []
        for run_id, data in self._do(read):
            if not data:
                continue
            try:
                if isinstance(data, Exception):
                    raise data
                runs.append(self._whole(data) if whole else Run.model_validate_json(data))
            except (ValueError, KeyError, redis.ResponseError) as exc:  # ValidationError is a ValueError
                self.skipped(Keys.run(str(run_id)), f"not a run ({type(exc).__name__})")
        runs.sort(key=lambda r: r.created_at, reverse=True)
        return runs[:limit]

    def lock_holder(self, target_key: str) -> str | None:
        holder: str | None = self._do(lambda: self.client.get(Keys.lock(target_key)))
        return holder

    # ----------------------------------------------------------------- audit
    def append_audit(self, run_id: str, entry: dict[str, Any]) -> str:
        fields: dict[Any, Any] = {
            k: (json.dumps(v) if k == "evidence" else str(v)) for k, v in entry.items() if v is not None
        }

        def append() -> str:
            pipe = self.client.pipeline(transaction=True)
            pipe.xadd(Keys.run_audit(run_id), fields)
            pipe.xadd(Keys.audit, fields, maxlen=GLOBAL_AUDIT_MAXLEN, approximate=True)
            return str(pipe.execute()[0])

        return self._do(append)

    def audit(self, run_id: str) -> list[dict[str, Any]]:
        entries = self._do(lambda: self.client.xrange(Keys.run_audit(run_id)))
        return [_entry(entry_id, fields) for entry_id, fields in entries]

    def global_audit(self, *, count: int = 100) -> list[dict[str, Any]]:
        """The newest ``count`` entries of every run, oldest first."""
        entries = self._do(lambda: self.client.xrevrange(Keys.audit, count=count))
        return [_entry(entry_id, fields) for entry_id, fields in reversed(entries)]

    def audit_after(self, last: str | None, *, block: float) -> tuple[str, list[str]]:
        """The runs of the audit entries written after entry ``last``, waiting up to ``block`` seconds for
        one, and the entry to read after next; ``last`` None: the newest entry now, no run, no wait
        (a console's feed: ``bot.console_feed``)."""
        def read() -> tuple[str, list[str]]:
            if last is None:
                newest = self.client.xrevrange(Keys.audit, count=1)
                return (str(newest[0][0]) if newest else "0-0"), []
            got: Any = self.client.xread({Keys.audit: last}, block=max(1, int(block * 1000)), count=500)
            entries = got[0][1] if got else []
            return (str(entries[-1][0]) if entries else last), [str(f.get("run", "")) for _, f in entries]
        return self._do(read)

    # ---------------------------------------------------------------- leases
    def acquire_lease(self, run_id: str, owner: str, ttl: dt.timedelta) -> bool:
        return bool(self._call_int(self._acquire, [Keys.lease(run_id)], [owner, _ms(ttl)]))

    def lease_owner(self, run_id: str) -> str | None:
        owner: str | None = self._do(lambda: self.client.get(Keys.lease(run_id)))
        return owner

    def take_over_lease(self, run_id: str, old_owner: str, new_owner: str, ttl: dt.timedelta) -> bool:
        return bool(self._call_int(self._take_over, [Keys.lease(run_id)], [old_owner, new_owner, _ms(ttl)]))

    def release_lease(self, run_id: str, owner: str) -> None:
        self._call_int(self._release, [Keys.lease(run_id)], [owner])

    def claim_once(self, key: str, ttl: dt.timedelta) -> bool:
        return bool(self._do(lambda: self.client.set(Keys.once(key), "1", nx=True, px=_ms(ttl))))

    # ------------------------------------------- the reports' leader, collections, reports
    def acquire_leader(self, owner: str, ttl: dt.timedelta) -> int:
        """Take (or renew) the lease of the one process that schedules reports and collects
        events: its fencing token (a number that grows with each new holder), 0 when another
        process holds it. A foreign value in the lease or its token is logged and overwritten."""
        token, note = self._do(lambda: self._acquire_leader(keys=[Keys.leader, Keys.leader_epoch],
                                                            args=[owner, _ms(ttl)]))
        for key in str(note).split():
            self.skipped(Keys.leader_epoch if key == "epoch" else Keys.leader, "not a lease of ours; replaced")
        return int(token)

    def release_leader(self, owner: str) -> None:
        self._call_int(self._release, [Keys.leader], [owner])

    def leader(self) -> str | None:
        holder: str | None = self._do(lambda: self.client.get(Keys.leader))
        return holder

    def drop_retired_schedule(self) -> int:
        """Remove APScheduler's job store of versions before 0.9 (pickled jobs, never read now):
        how many of its two keys there were."""
        return int(self._do(lambda: self.client.delete(Keys.scheduler_jobs, Keys.scheduler_times)))

    def skipped(self, key: str, why: str) -> None:
        """Log, once per key and store, an entry that is not ours (it is skipped, never run)."""
        if key not in self._skipped:
            self._skipped.add(key)
            log.warning("skipped %s in Redis: %s", key, why)

    def load_collection(self, run_id: str) -> Collected:
        from runbooks.stability.collecting import Collected
        from runbooks.stability.tallying import Tally

        def read() -> tuple[dict[str, str], dict[str, str]]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(Keys.events(run_id))
            pipe.hgetall(Keys.seen(run_id))
            events, seen = pipe.execute()
            return events, seen

        events, seen = self._do(read)
        tally = Tally.from_dict(json.loads(events.pop("tally"))) if "tally" in events else Tally()
        return Collected(rv=events.pop("rv", ""), tally=tally, seen={k: int(v) for k, v in seen.items()}, info=events)

    def read_tally(self, run_id: str) -> tuple[Tally | None, dict[str, str]]:
        """The run's tally (None: nothing was collected) and the collection's info."""
        from runbooks.stability.tallying import Tally

        events: dict[str, str] = self._do(lambda: self.client.hgetall(Keys.events(run_id)))
        events.pop("rv", None)
        tally = events.pop("tally", None)
        return (Tally.from_dict(json.loads(tally)) if tally else None), events

    def save_collection(
        self, run_id: str, *, owner: str, rv: str, tally: Tally, seen: dict[str, int], gone: Collection[str],
        info: dict[str, str],
    ) -> bool:
        args: list[Any] = [owner, rv, json.dumps(tally.to_dict(), separators=(",", ":")), len(seen)]
        for uid, count in seen.items():
            args += [uid, count]
        args += [len(gone), *gone, len(info)]
        for key, value in info.items():
            args += [key, value]
        keys = [Keys.leader, Keys.events(run_id), Keys.seen(run_id)]
        return bool(self._call_int(self._save_collection, keys, args))

    def end_collection(self, run_id: str, *, keep: dt.timedelta) -> None:
        """The run's monitoring ended: drop the dedupe state, keep the tally for ``keep``."""

        def end() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(Keys.seen(run_id))
            pipe.hdel(Keys.events(run_id), "rv", "watching")
            pipe.pexpire(Keys.events(run_id), _ms(keep))
            pipe.execute()

        self._do(end)

    def report_record(self, run_id: str, after: str) -> dict[str, str]:
        """The report's idempotency record (empty, logged once, when the key holds something else)."""
        try:
            record: dict[str, str] = self._do(lambda: self.client.hgetall(Keys.report(run_id, after)))
        except redis.ResponseError as exc:
            self.skipped(Keys.report(run_id, after), f"not a report record ({_reason(exc)})")
            return {}
        return record

    def claim_report_post(self, run_id: str, after: str, *, where: str, owner: str, token: int,
                          now: dt.datetime, grace: dt.timedelta, lease: dt.timedelta) -> str:
        """Claim posting the ``after`` report to ``where`` with the leader's fencing token, in
        the script that checks the token (:data:`~bot.storage.layout.CLAIM_REPORT_POST`):
        ``claimed``/``reclaimed`` (post it), ``posted``, ``pending``, ``stale`` or ``foreign``."""
        keys = [Keys.leader, Keys.leader_epoch, Keys.report(run_id, after)]
        args: list[str | int] = [owner, str(token), where, int(now.timestamp() * 1000), _ms(grace), _ms(lease)]
        return str(self._do(lambda: self._claim_report_post(keys=keys, args=args)))

    def release_report_post(self, run_id: str, after: str, *, where: str, owner: str, token: int) -> None:
        """Give back our claim on ``where`` (the post failed: Slack answered, nothing posted)."""
        self._call_int(self._release_report_post, [Keys.report(run_id, after)], [where, str(token), owner])

    def record_report_post(self, run_id: str, after: str, *, where: str, ts: str, verdict: str) -> None:
        """``where`` was posted (message ``ts``): a fact, recorded whoever holds the lease now."""
        self._do(lambda: self.client.hsetnx(Keys.report(run_id, after), where, ts)
                 + self.client.hsetnx(Keys.report(run_id, after), "verdict", verdict))

    def finish_report(self, run_id: str, after: str, *, posted_at: str, keep: dt.timedelta = dt.timedelta(days=90)) -> None:
        """Every post of the report is recorded: it is posted (kept ``keep``)."""
        self._do(lambda: self.client.hsetnx(Keys.report(run_id, after), "posted_at", posted_at)
                 + self.client.pexpire(Keys.report(run_id, after), _ms(keep)))

    def claim_effect(self, run_id: str, effect: str, *, owner: str, ttl: dt.timedelta = EFFECT_TTL,
                     dead: str = "") -> tuple[str, str]:
        """Claim the Slack effect recorded as ``origin[effect]`` of ``run_id`` right before doing
        it (:data:`~bot.storage.layout.CLAIM_EFFECT`): ``("claimed", "")`` (do it, then record
        it), ``("done", recorded)``, ``("held", other owner)`` or ``("gone", "")``; ``dead``: a
        holder known dead, whose claim, while still its, is taken over (``bot.slack.claims``)."""
        return self._call(self._claim_effect, [Keys.run(run_id), Keys.effect(run_id, effect)],
                          [effect, owner, _ms(ttl), dead])

    def release_effect(self, run_id: str, effect: str, *, owner: str) -> None:
        """Give back our claim on ``effect`` (Slack refused it: nothing was done; tried again later)."""
        self._call_int(self._release, [Keys.effect(run_id, effect)], [owner])

    # ------------------------------------------------------- quotas (slots with leases)
    def take_slot(self, sets: Sequence[tuple[str, str, int]], token: str, lease: float) -> int:
        """Hold one slot for ``token`` in each of ``sets`` (``(kind, id, limit)``: a user's, a
        channel's) for ``lease`` seconds, all or none: 0 when held, else the 1-based index of
        the first set already at its limit (slots whose lease ran out do not count)."""
        now = int(time.time() * 1000)
        keys = [Keys.quota(kind, name) for kind, name, _ in sets]
        return self._call_int(self._take_slot, keys, [token, now, now + int(lease * 1000), int(lease * 1000),
                                                      *(limit for _, _, limit in sets)])

    def renew_slot(self, sets: Sequence[tuple[str, str]], token: str, lease: float) -> int:
        """Extend ``token``'s slots in ``sets`` (``(kind, id)``) by ``lease`` seconds from now;
        how many it still held."""
        ms = int(lease * 1000)
        keys = [Keys.quota(kind, name) for kind, name in sets]
        return self._call_int(self._renew_slot, keys, [token, int(time.time() * 1000) + ms, ms])

    def give_slot(self, sets: Sequence[tuple[str, str]], token: str) -> None:
        """Give ``token``'s slots in ``sets`` back."""
        def give() -> None:
            pipe = self.client.pipeline(transaction=False)
            for kind, name in sets:
                pipe.zrem(Keys.quota(kind, name), token)
            pipe.execute()

        self._do(give)

    # --------------------------------------------------------------- helpers
    def _write(self, script: Any, keys: list[str], *, head: list[Any], parts: dict[str, str],
               digests: dict[str, str], known: dict[str, str] | None, audit: list[str]) -> tuple[str, str, int]:
        """Run a script that writes a run's parts (:data:`~bot.storage.layout.CREATE`,
        :data:`~bot.storage.layout.SAVE`) sending the values of the parts whose digest differs
        from ``known`` (None: not known here, so none at first). The script compares the digests
        Redis holds with those of the parts not sent and, when one differs, writes nothing and
        answers ``need`` with them: they are sent, and only they. Its status, its detail and the
        size of what was sent (every attempt)."""
        send = {f for f in parts if known is not None and known.get(f) != digests[f]}
        sent = 0
        while True:
            args = [*head, *part_args(parts, digests, send=send), *audit]
            sent += sum(len(str(a)) for a in args)
            result = self._do(lambda args=args: script(keys=keys, args=args))
            need = {str(f) for f in result[1:]} - send if str(result[0]) == "need" else set()
            if not need:  # each round sends more parts: at most one round more than there are parts
                return str(result[0]), str(result[1]) if len(result) > 1 else "", sent
            send |= need

    def _call(self, script: Any, keys: list[str], args: list[Any]) -> tuple[str, str]:
        result = self._do(lambda: script(keys=keys, args=args))
        return str(result[0]), str(result[1])

    def _call_int(self, script: Any, keys: list[str], args: list[Any]) -> int:
        return int(self._do(lambda: script(keys=keys, args=args)))

    def _do(self, fn: Any) -> Any:
        try:
            return fn()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailable(unreachable(self.url, exc)) from exc


def _entry(entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": entry_id, **fields}
    if "evidence" in entry:
        with contextlib.suppress(ValueError):
            entry["evidence"] = json.loads(entry["evidence"])
    return entry


SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
TIMEOUTS: dict[str, Any] = {"socket_timeout": 10, "socket_connect_timeout": 5}
DECODE: dict[str, Any] = {"encoding_errors": "replace"}
"""A decoding client reads bytes that are not UTF-8 (not ours) as U+FFFD: the entry then fails to
parse and is skipped, instead of failing the whole read."""


REDIS_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, redis.exceptions.RedisClusterException)
NoScriptError = redis.exceptions.NoScriptError
"""A script Redis does not have (it restarted): for the job queue's own pipelines."""
"""What a Redis client raises when the server cannot do what it was asked (for the job queue's callers)."""


REDIS_TIMEOUT = redis.TimeoutError
"""What a client with a ``timeout`` raises when Redis did not answer in time."""


def raw_client(url: str, *, timeout: float | None = None) -> redis.Redis:
    """A client for ``url`` answering bytes, not text (the job queue's broker decodes its own
    messages); ``StoreUnavailable`` with the reason, the password left out, if it is not a URL we take.
    With ``timeout``: each connect and each answer waited for at most that long, never retried."""
    try:
        return connect(url, decode=False, timeout=timeout)
    except ValueError as exc:
        raise StoreUnavailable(f"{_safe(url)!r} is not a Redis URL ({_reason(exc)})") from None


def connect(url: str, *, decode: bool, timeout: float | None = None) -> redis.Redis:
    """A client for ``url`` (not yet connected); ``ValueError`` when it is not one we take."""
    scheme, _, rest = url.partition("://")
    timeouts = TIMEOUTS if timeout is None else {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                                                 "retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0)}
    if scheme.lower() not in (*SENTINEL_SCHEMES, *CLUSTER_SCHEMES):
        return redis.Redis.from_url(url, decode_responses=decode, **(DECODE if decode else {}), **timeouts)
    creds, at, location = rest.rpartition("@")
    hosts, _, path = location.partition("/")
    user, _, password = creds.partition(":") if at else ("", "", "")
    auth: dict[str, Any] = {"username": urllib.parse.unquote(user) or None, "password": urllib.parse.unquote(password) or None,
            "ssl": scheme.lower().startswith("rediss")}
    if scheme.lower() in CLUSTER_SCHEMES:
        if path.strip("/"):
            raise ValueError("a Redis Cluster has database 0 only: redis+cluster://host:port[,host:port]")
        nodes = [redis.cluster.ClusterNode(name, port) for name, port in _hosts(hosts, default_port=6379)]
        return _ClusterClient(startup_nodes=nodes, decode_responses=decode, **(DECODE if decode else {}),  # type: ignore[return-value]
                              **auth, **timeouts)
    names = [part for part in path.split("/") if part]
    if not names:
        raise ValueError("name the master the Sentinels watch: redis+sentinel://host:26379/<master>[/<db>]")
    if len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        raise ValueError("after the master comes the database number only: …/<master>/0")
    sentinel = redis.sentinel.Sentinel(_hosts(hosts, default_port=26379), **TIMEOUTS)
    return sentinel.master_for(names[0], db=int(names[1]) if len(names) == 2 else 0, decode_responses=decode,
                               **(DECODE if decode else {}), **auth, **timeouts)


def _hosts(text: str, *, default_port: int) -> list[tuple[str, int]]:
    hosts = []
    for host in text.split(","):
        name, _, port = host.rpartition(":") if ":" in host else (host, "", str(default_port))
        if not name or not port.isdigit():
            raise ValueError(f"{host!r} is not host:port")
        hosts.append((name, int(port)))
    return hosts


class _ClusterClient(redis.cluster.RedisCluster):
    """RedisCluster as a plain client's users expect it: its pipelines are transactions
    (every key of ours is in one slot) and it has a ``connection_pool`` to disconnect."""

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        return super().pipeline(transaction=True if transaction is None else transaction, shard_hint=shard_hint)

    @property
    def connection_pool(self) -> Any:
        client = self

        class _Pool:
            def disconnect(self) -> None:  # as a plain client's pool: connections dropped, reopened on use
                client.disconnect_connection_pools()

        return _Pool()


def unreachable(url: str, exc: Exception) -> str:
    """Why Redis at ``url`` did not do what it was asked, as it may be shown: its password masked."""
    return f"cannot reach Redis at {_safe(url)}: {_reason(exc)}"


def _safe(url: str) -> str:
    """The URL as it may be shown: its password (userinfo or ``?password=``) masked."""
    return redact_url(url) if url else "(no URL)"


def _reason(exc: Exception) -> str:
    return scrub(" ".join(str(exc).split())) or type(exc).__name__
