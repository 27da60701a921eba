"""The transition table and the Redis run store: CAS, locks, leases, key layout (real Redis)."""

from __future__ import annotations

import datetime as dt
import itertools
import secrets
import threading

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.storage.redis_store import Keys, RedisRunStore
from runbooks.engine.runs import (
    ACTIVE,
    MIGRATION_TRANSITIONS,
    REOPENABLE,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    Run,
    RunKind,
    RunState,
    Target,
    allowed,
    new_run_id,
)
from runbooks.engine.store import LeaseLost, LockHeld, StaleRun, StoreUnavailable
from runbooks.engine.transitioning import SilentObserver, Writer
from tests.engine_support import FakeClock

S = RunState
NOW = dt.datetime(2025, 1, 6, 9, 0, tzinfo=dt.UTC)


def new_run(target: str = "team/plugin") -> Run:
    namespace, name = target.split("/")
    return Run(id=new_run_id(), target=Target(cluster="prod", namespace=namespace, name=name),
               image="repo/plugin:v2", container="plugin", node="gpu-node1", requester="U0ALICE",
               created_at=NOW, updated_at=NOW)


@given(st.sampled_from(list(RunState)), st.sampled_from(list(RunState)))
def test_table_is_the_only_judge(current: RunState, wanted: RunState) -> None:
    """allowed() says yes exactly for the table's pairs, plus failed from any active state; an
    ended run goes nowhere, but a failed one may be reopened (resumed or rolled back)."""
    expected = wanted in TRANSITIONS[current] or (wanted is S.FAILED and current in ACTIVE)
    assert allowed(current, wanted) is expected
    if current in TERMINAL - REOPENABLE:
        assert not allowed(current, wanted)


@given(st.sampled_from(list(RunState)), st.sampled_from(list(RunState)))
def test_a_migration_has_its_own_table(current: RunState, wanted: RunState) -> None:
    """A migration run follows MIGRATION_TRANSITIONS: never a promotion or monitoring state; its
    canary states only with ``canary=`` (issue 38 item 1), whose switch request leads to
    ``applying`` or a rollback; an upgrade never enters ``applying``."""
    table = MIGRATION_TRANSITIONS
    expected = current in table and (wanted in table[current] or (wanted is S.FAILED and current in ACTIVE))
    assert allowed(current, wanted, RunKind.MIGRATION) is expected
    never = {S.PROMOTING, S.MONITORING}
    if wanted in never:
        assert not allowed(current, wanted, RunKind.MIGRATION)
    if wanted is S.APPLYING:
        assert not allowed(current, wanted, RunKind.UPGRADE)
    if current is S.AWAITING_PROMOTION and allowed(current, wanted, RunKind.MIGRATION):
        assert wanted in (S.APPLYING, S.ROLLING_BACK, S.FAILED)
    if current is S.VERIFYING and wanted is S.DONE:
        assert allowed(current, wanted, RunKind.MIGRATION) and not allowed(current, wanted, RunKind.UPGRADE)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(list(RunState)), max_size=25))
def test_random_transition_sequences_never_reach_a_forbidden_state(redis_url: str, wanted: list[RunState]) -> None:
    """Through the one writer and the store's CAS, only the table's transitions are ever stored."""
    store = RedisRunStore.from_url(redis_url)
    writer = Writer(store=store, clock=FakeClock(), observer=SilentObserver())
    run = store.create(new_run(f"t{secrets.token_hex(4)}/plugin"))
    path = [run.state]
    for state in wanted:
        before = store.get(run.id)
        assert before is not None
        try:
            run = writer.transition(before, state)
        except IllegalTransition:
            assert not allowed(before.state, state)
            assert store.get(run.id) == before  # nothing changed
            continue
        assert allowed(path[-1], state)
        path.append(state)
    stored = store.get(run.id)
    assert stored is not None and stored.state is path[-1]
    transitions = [e["name"] for e in store.audit(run.id) if e["kind"] == "transition"]
    assert transitions == [f"{a.value} -> {b.value}" for a, b in itertools.pairwise(path)]
    if stored.state in TERMINAL:
        assert store.lock_holder(stored.target.key) is None
    if stored.state in TERMINAL - REOPENABLE:
        for state in RunState:
            with pytest.raises(IllegalTransition, match="nothing, the run has ended"):
                writer.transition(stored, state)


def test_compare_and_set_lets_one_of_two_concurrent_writers_win(redis_url: str) -> None:
    """Two threads saving the same version: exactly one succeeds, the other gets StaleRun."""
    store = RedisRunStore.from_url(redis_url)
    for i in range(20):
        run = store.create(new_run(f"cas{i}/plugin"))
        barrier, outcomes = threading.Barrier(2), list[str]()

        def save(reason: str, run: Run = run, barrier: threading.Barrier = barrier, outcomes: list[str] = outcomes) -> None:
            barrier.wait()
            try:
                store.save(run.model_copy(update={"reason": reason}))
                outcomes.append("saved")
            except StaleRun:
                outcomes.append("stale")

        threads = [threading.Thread(target=save, args=(r,)) for r in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["saved", "stale"]
        assert store.get(run.id).version == 1  # type: ignore[union-attr]


def test_lock_is_taken_with_the_run_and_released_when_it_ends(redis_url: str) -> None:
    """create() takes the target lock atomically; a terminal save releases it and leaves the active set."""
    store = RedisRunStore.from_url(redis_url)
    run = store.create(new_run())
    with pytest.raises(LockHeld) as held:
        store.create(new_run())
    assert held.value.holder == run.id
    assert [r.id for r in store.list_runs(active_only=True)] == [run.id]
    store.save(run.model_copy(update={"state": S.FAILED}))
    assert store.lock_holder(run.target.key) is None
    assert store.list_runs(active_only=True) == []
    assert [r.id for r in store.list_runs()] == [run.id]


def test_leases_exclude_other_owners_and_fence_their_writes(redis_url: str) -> None:
    """Only the holder renews a lease; a write fenced by a lost lease is refused; take-over needs the old owner."""
    store = RedisRunStore.from_url(redis_url)
    run = store.create(new_run())
    ttl = dt.timedelta(seconds=30)
    assert store.acquire_lease(run.id, "a", ttl) and store.acquire_lease(run.id, "a", ttl)
    assert not store.acquire_lease(run.id, "b", ttl)
    run = store.save(run, lease_owner="a")
    with pytest.raises(LeaseLost):
        store.save(run, lease_owner="b")
    assert not store.take_over_lease(run.id, "c", "b", ttl)
    assert store.take_over_lease(run.id, "a", "b", ttl) and store.lease_owner(run.id) == "b"
    store.release_lease(run.id, "a")  # not a's any more: no effect
    assert store.lease_owner(run.id) == "b"
    store.release_lease(run.id, "b")
    assert store.lease_owner(run.id) is None
    assert store.claim_once("evt-1", ttl) and not store.claim_once("evt-1", ttl)


def test_every_key_lives_under_one_prefix(redis_url: str) -> None:
    """Runs, locks, leases, audit streams and claims are all upgradebot:… keys of the documented types."""
    store = RedisRunStore.from_url(redis_url)
    run = store.create(new_run(), audit=[{"run": "x", "kind": "transition", "name": "requested"}])
    store.acquire_lease(run.id, "a", dt.timedelta(seconds=30))
    store.claim_once("k", dt.timedelta(seconds=30))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    types = {str(key): client.type(key) for key in client.keys("*")}
    assert types == {
        Keys.run(run.id): "hash", Keys.runs: "zset", Keys.active: "set", Keys.lock("prod/team/plugin"): "string",
        Keys.lease(run.id): "string", Keys.run_audit(run.id): "stream", Keys.audit: "stream",
        Keys.once("k"): "string",
    }
    assert all(key.startswith("{upgradebot}:") for key in types)


def test_every_key_hashes_to_one_cluster_slot(redis_url: str) -> None:
    """The prefix is a Redis Cluster hash tag: every key of the bot is in one slot, so each Lua
    script and transaction touches one node, and a managed Redis Cluster can hold them."""
    from redis.crc import key_slot

    keys = [Keys.runs, Keys.active, Keys.audit, Keys.leader, Keys.scheduler_jobs, Keys.scheduler_times,
            Keys.run("r-1"), Keys.lock("prod/kube-system/x"), Keys.lease("r-1"), Keys.run_audit("r-1"),
            Keys.once("slack:command:abc"), Keys.events("r-1"), Keys.seen("r-1"), Keys.report("r-1", "24h"),
            Keys.leader_epoch]
    assert {key_slot(key.encode()) for key in keys} == {key_slot(b"upgradebot")}


def test_keys_of_an_older_version_are_moved_under_the_new_prefix(redis_url: str) -> None:
    """Runs stored by a version before the hash tag are kept: the store renames upgradebot:* keys
    once, with their values and expiries, and never overwrites a key of the new layout."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.hset("upgradebot:run:r-old", mapping={"version": "3", "state": "monitoring", "json": "{}"})
    client.zadd("upgradebot:runs", {"r-old": 1.0})
    client.set("upgradebot:lease:r-old", "bot-a", px=60_000)
    client.set("upgradebot:once:k", "1")
    client.set("{upgradebot}:once:k", "new")
    store = RedisRunStore.from_url(redis_url)
    assert store.migrate_keys() == 3
    assert client.hgetall(Keys.run("r-old"))["state"] == "monitoring" and client.zscore(Keys.runs, "r-old") == 1.0
    assert 0 < client.pttl(Keys.lease("r-old")) <= 60_000
    assert client.get(Keys.once("k")) == "new" and client.get("upgradebot:once:k") == "1"  # kept, not clobbered
    assert store.migrate_keys() == 0


def test_unreachable_redis_is_one_clear_error() -> None:
    """A Redis that does not answer is StoreUnavailable naming the URL without its password."""
    with pytest.raises(StoreUnavailable, match=r"cannot reach Redis at redis://u:\*\*\*@127.0.0.1:1"):
        RedisRunStore.from_url("redis://u:secret@127.0.0.1:1/0")


# ------------------------------------------------------------------ large progress values apart
def big_baseline(nodes: int) -> dict[str, object]:
    return {"taken_at": NOW.isoformat(), "daemonset": "team/plugin", "nodes": {
        f"gpu-node{i}": {"name": f"gpu-node{i}", "capacity": {"nvidia.com/gpu": 8}, "allocatable": {"nvidia.com/gpu": 8},
                         "pod": f"plugin-{i:05}", "pod_uid": secrets.token_hex(16), "restarts": 0,
                         "images": {"plugin": "repo/plugin:v1"}, "registered": True} for i in range(1, nodes + 1)}}


def test_a_save_writes_only_what_changed_not_a_5000_node_baseline(redis_url: str) -> None:
    """Found on main: every save rewrote the whole run, a 5,000-node baseline with it (1.9 MB)."""
    store = RedisRunStore.from_url(redis_url)
    baseline = big_baseline(5000)
    run = store.create(new_run())
    told: list[int] = []
    store.on_save = told.append  # the upgradebot_run_save_bytes histogram's, in serve and its workers
    run = store.save(run.model_copy(update={"progress": {"baseline": baseline, "saved": {"image": "v1"}}}))
    first = store.last_save_bytes
    assert first > 1_000_000  # recording the baseline writes it, once
    sizes = []
    for moved in range(1, 20):
        run = store.save(run.model_copy(update={"progress": {**run.progress, "wave_moved": {"1": moved}}}))
        sizes.append(store.last_save_bytes)
    assert max(sizes) < 64 * 1024, sizes
    assert told == [first, *sizes], "each save tells what it sent"
    again = RedisRunStore.from_url(redis_url).get(run.id)  # another process reads it whole
    assert again is not None and again.progress["baseline"] == baseline and again.progress["wave_moved"] == {"1": 19}
    slim = store.get(run.id, whole=False)
    assert slim is not None and slim.shown("baseline") is None and slim.shown("wave_moved") == {"1": 19}
    assert slim.progress["baseline"]["entries"] == 3 and slim.progress["baseline"]["$stored_apart"] > 1_000_000
    assert len(slim.model_dump_json()) < 4096
    with pytest.raises(ValueError, match="read without its parts"):
        store.save(slim)
    assert [r.shown("baseline") for r in store.list_runs(whole=False)] == [None]
    assert store.list_runs()[0].progress["baseline"] == baseline


def test_parts_stay_right_when_two_processes_take_turns(redis_url: str) -> None:
    """A store that did not see the last version sends every part and deletes the others; a
    progress value removed (or grown small) leaves no part behind."""
    one, two = RedisRunStore.from_url(redis_url), RedisRunStore.from_url(redis_url)
    run = one.create(new_run())
    run = one.save(run.model_copy(update={"progress": {"baseline": big_baseline(50), "waves": [["x" * 3000]]}}))
    run = two.get(run.id)  # type: ignore[assignment]
    run = two.save(run.model_copy(update={"progress": {"baseline": big_baseline(60)}}))  # waves removed
    fields = set(redis.Redis.from_url(redis_url, decode_responses=True).hkeys(Keys.run(run.id)))
    assert {f for f in fields if f.startswith("part:")} == {"part:baseline"}
    stale = run.model_copy(update={"progress": {"baseline": {"small": True}, "waves": [["y" * 3000]]}})
    run = one.save(stale)  # one last saw an older version: it cannot trust what it knew
    fields = set(redis.Redis.from_url(redis_url, decode_responses=True).hkeys(Keys.run(run.id)))
    assert {f for f in fields if f.startswith("part:")} == {"part:waves"}
    assert two.get(run.id).progress == {"baseline": {"small": True}, "waves": [["y" * 3000]]}  # type: ignore[union-attr]


def _net_in(client: redis.Redis) -> int:
    """The bytes every client has sent to this Redis so far (``INFO stats``)."""
    return int(client.info("stats")["total_net_input_bytes"])


def test_a_save_over_a_version_another_process_wrote_sends_only_what_changed(redis_url: str) -> None:
    """issue 39: a save over a version another process wrote sent every part again (a 5,000-node
    baseline, 1.7 MB, at the end of each promotion in serve). Each part's digest is kept in Redis
    and the save script compares them: such a save sends only what differs (well under 16 KiB, as
    Redis counts what it received), a part that did change is sent once, and the run reads back whole."""
    one, two = RedisRunStore.from_url(redis_url), RedisRunStore.from_url(redis_url)
    counter = redis.Redis.from_url(redis_url)
    baseline = big_baseline(5000)
    run = one.create(new_run())
    run = one.save(run.model_copy(update={"progress": {"baseline": baseline, "waves": [["a" * 3000]]}}))
    seen = two.get(run.id)
    assert seen is not None
    run = two.save(seen.model_copy(update={"progress": {**seen.progress, "wave_moved": {"1": 1}}}))
    before = _net_in(counter)
    run = one.save(run.model_copy(update={"progress": {**run.progress, "wave_moved": {"1": 2}}}))
    sent = _net_in(counter) - before
    assert sent < 16 * 1024 and one.last_save_bytes < 16 * 1024, (sent, one.last_save_bytes)
    run = two.save(run.model_copy(update={"progress": {**run.progress, "waves": [["b" * 3000]]}}))
    before = _net_in(counter)
    run = one.save(run.model_copy(update={"progress": {**run.progress, "waves": [["c" * 3000]], "wave_moved": {"1": 3}}}))
    sent = _net_in(counter) - before
    assert 3000 < sent < 16 * 1024, sent  # the part that changed, once; not the baseline
    again = RedisRunStore.from_url(redis_url).get(run.id)
    assert again is not None and again.version == run.version
    assert again.progress == {"baseline": baseline, "waves": [["c" * 3000]], "wave_moved": {"1": 3}}


def test_a_save_that_lost_the_race_leaves_the_newer_parts(redis_url: str) -> None:
    """issue 39: the digests compared in the save script never let a stale save through: the
    store that lost the compare-and-set writes no part and no digest, and the next save by the
    loser (after reading the run again) sends only what differs from the winner's parts."""
    one, two = RedisRunStore.from_url(redis_url), RedisRunStore.from_url(redis_url)
    run = one.create(new_run())
    run = one.save(run.model_copy(update={"progress": {"baseline": big_baseline(200)}}))
    seen = two.get(run.id)
    assert seen is not None
    newer = big_baseline(300)
    two.save(seen.model_copy(update={"progress": {"baseline": newer}}))
    with pytest.raises(StaleRun):
        one.save(run.model_copy(update={"progress": {"baseline": big_baseline(250)}}))
    fresh = one.get(run.id)
    assert fresh is not None and fresh.progress == {"baseline": newer}
    one.save(fresh.model_copy(update={"progress": {**fresh.progress, "small": 1}}))
    assert one.last_save_bytes < 4096
    assert RedisRunStore.from_url(redis_url).get(run.id).progress == {"baseline": newer, "small": 1}  # type: ignore[union-attr]
