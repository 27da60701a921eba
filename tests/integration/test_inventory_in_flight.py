"""Identical reads at once are read once: fifty ``inventory`` requests while one is being taken
share its result, on kubesim (the cluster is connected to, and listed, once); so do identical
``verify`` requests while one observes its window."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from handlers import inventory, verify
from handlers.routing import Caller, Deps, InFlight
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.policy import Policy
from tests.support import at_once


def test_fifty_inventories_at_once_read_the_cluster_once(cluster: KubeSim,
                                                          connect: Callable[..., Cluster]) -> None:
    opened: list[float] = []

    def counting(context: str | None) -> Cluster:
        opened.append(time.monotonic())
        time.sleep(0.3)  # a large cluster's read takes a while: the others arrive meanwhile
        return connect(cluster)

    deps = Deps(policy=Policy(), connect=counting)
    results = at_once([lambda: inventory.COMMAND.handle(inventory.InventoryRequest(), deps, Caller(user="U0ANA"))] * 50)
    assert len(results) == 50 and len(opened) == 1, f"{len(opened)} reads"
    assert all(r is results[0] for r in results) and deps.in_flight.shared == 49
    inventory.COMMAND.handle(inventory.InventoryRequest(), deps, Caller(user="U0ANA"))
    assert len(opened) == 2, "nothing is kept once the read is done: the next one reads anew"


def test_identical_verifies_at_once_observe_the_cluster_once(cluster: KubeSim,
                                                             connect: Callable[..., Cluster]) -> None:
    """Ten ``verify kube-system/nvidia-device-plugin-daemonset window=1s`` at once: one
    observation, ten answers; one of another window is its own."""
    opened: list[str | None] = []

    def counting(context: str | None) -> Cluster:
        opened.append(context)
        return connect(cluster)

    deps = Deps(policy=Policy(), connect=counting)
    target = "kube-system/nvidia-device-plugin-daemonset"

    def ask(window: str) -> Callable[[], tuple[str, verify.Verified]]:
        request = verify.parse([target, f"window={window}"])
        return lambda: (window, verify.COMMAND.handle(request, deps, Caller(user="U0ANA")))

    results = at_once([ask("1s")] * 10 + [ask("2s")])
    assert len(results) == 11 and len(opened) == 2, f"{len(opened)} observations"
    same = [found for window, found in results if window == "1s"]
    assert all(found.result is same[0].result for found in same) and same[0].result.ok, same[0].result.reason
    assert deps.in_flight.shared == 9


def test_a_failed_read_fails_every_caller_that_waited_for_it() -> None:
    flights, started, errors = InFlight(), threading.Event(), []

    def read() -> int:
        started.set()
        time.sleep(0.2)
        raise ConnectionError("unreachable")

    def ask() -> None:
        try:
            flights.do("k", read)
        except ConnectionError as exc:
            errors.append(exc)

    first = threading.Thread(target=ask)
    first.start()
    assert started.wait(5)
    others = [threading.Thread(target=ask) for _ in range(5)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join(timeout=5)
    assert len(errors) == 6 and flights.shared == 5
    with pytest.raises(ConnectionError):
        flights.do("k", read)


def test_an_inventory_asked_before_the_last_one_ended_is_answered_by_it(cluster: KubeSim,
                                                                        connect: Callable[..., Cluster]) -> None:
    """Issue 39: at 5,000 nodes a worker answered ~6 inventories a second through a burst, each
    asked before the one taken for it began; now whoever asked before the last inventory of the
    cluster ended gets that one (read after they asked, or while: as fresh as one read for them),
    and whoever asked after it ended, or says nothing of when (the shell: now), reads anew."""
    opened: list[float] = []

    def counting(context: str | None) -> Cluster:
        opened.append(time.time())
        return connect(cluster)

    deps = Deps(policy=Policy(), connect=counting)
    request = inventory.InventoryRequest()

    def ask(asked_at: float | None) -> inventory.Inventory:
        result: inventory.Inventory = inventory.COMMAND.handle(request, deps, Caller(user="U0ANA", asked_at=asked_at))
        return result

    before = time.time()
    first = ask(before)
    assert len(opened) == 1
    assert ask(before - 60) is first and ask(before) is first and len(opened) == 1, "asked before it began: the same"
    now = time.time()
    second = ask(now)
    assert len(opened) == 2 and second is not first, "asked after it ended: read anew"
    assert ask(now) is second and len(opened) == 2
    third = ask(None)
    assert len(opened) == 3 and third is not second, "no time said: asked now, read anew"
    other = inventory.COMMAND.handle(inventory.InventoryRequest(cluster="elsewhere"), deps,
                                     Caller(user="U0ANA", asked_at=before - 60))
    assert len(opened) == 4 and other is not third, "another cluster's inventory is its own"


def test_a_read_answers_whoever_asked_while_it_ran() -> None:
    """Issue 39: through a flood of inventories at 5,000 nodes a worker took one after another,
    each for the commands asked while the one before it ran. One asked while a read ran would
    have joined that read had a thread taken it at once; taken later off the queue, it is
    answered by that same read, as fresh. One asked once it ended reads anew."""
    clock = [100.0]
    flights = InFlight(clock=lambda: clock[0])
    reads: list[float] = []

    def read() -> str:
        reads.append(clock[0])
        clock[0] += 3.0  # the read takes three seconds
        return f"read at {reads[-1]:.0f}"

    assert flights.since("k", 100.0, read) == "read at 100"
    clock[0] = 150.0  # the commands asked meanwhile are taken off the queue much later
    assert flights.since("k", 101.5, read) == "read at 100", "asked while it ran: the same read"
    assert flights.since("k", 102.9, read) == "read at 100" and reads == [100.0]
    assert flights.since("k", 103.0, read) == "read at 150", "asked once it ended: read anew"
    assert reads == [100.0, 150.0]


def test_a_failed_read_leaves_the_last_good_one_to_those_who_asked_before_it() -> None:
    clock = [100.0]
    flights = InFlight(clock=lambda: clock[0])
    assert flights.since("k", 99.0, lambda: "read at 100") == "read at 100"
    clock[0] = 110.0

    def failing() -> str:
        raise ConnectionError("unreachable")

    with pytest.raises(ConnectionError):
        flights.since("k", 105.0, failing)
    assert flights.since("k", 99.5, failing) == "read at 100"
    with pytest.raises(ConnectionError):
        flights.since("k", 100.5, failing)


def test_an_inventory_shared_by_several_callers_is_summarized_once(cluster: KubeSim,
                                                                   connect: Callable[..., Cluster]) -> None:
    """Issue 39: the summary of an inventory at 5,000 nodes was a quarter of a worker's CPU, made
    again for each caller the inventory answered; the verb keeps the last reply it presented."""
    deps = Deps(policy=Policy(), connect=lambda context: connect(cluster))
    verb = inventory.COMMAND.verb(deps)
    request, before = inventory.InventoryRequest(), time.time()
    first = verb.handle(request, Caller(user="U0ANA", asked_at=before))
    assert verb.handle(request, Caller(user="U0BOB", asked_at=before - 1)) is first, "the same inventory: one summary"
    assert verb.handle(request, Caller(user="U0ANA", asked_at=before, surface="console")) is not first
    again = verb.handle(request, Caller(user="U0ANA"))
    assert again is not first and again.title == first.title, "a new inventory: summarized anew"


def test_a_kept_result_is_let_go_keep_for_seconds_after_its_read_ended() -> None:
    """An inventory of 5,000 nodes is about 34 MiB: kept only while a burst asked before it can
    still be waiting (``keep_for``), then let go by the sweep and never answered again."""
    clock = [100.0]
    flights = InFlight(clock=lambda: clock[0], keep_for=120.0)
    reads: list[float] = []

    def read() -> dict[str, float]:
        reads.append(clock[0])
        return {"read at": clock[0]}

    first = flights.since("k", 99.0, read)
    clock[0] = 219.0
    assert flights.since("k", 99.0, read) is first and len(reads) == 1, "within keep_for: still kept"
    flights.expire()
    assert flights.since("k", 99.0, read) is first, "the sweep lets go only of what is older"
    clock[0] = 220.0
    flights.expire()
    second = flights.since("k", 99.0, read)
    assert second is not first and len(reads) == 2, "let go: read anew"
    clock[0] = 400.0
    assert flights.since("k", 99.0, read) is not second and len(reads) == 3, "an expired one not swept yet is not used"


def test_a_presented_reply_never_keeps_its_result_alive(cluster: KubeSim, connect: Callable[..., Cluster]) -> None:
    import gc
    import weakref

    deps = Deps(policy=Policy(), connect=lambda context: connect(cluster))
    deps.in_flight = InFlight(keep_for=0.0)  # kept by nothing once answered
    taken: list[inventory.Inventory] = []
    real = inventory.COMMAND.handle

    def handle(request: inventory.InventoryRequest, d: Deps, caller: Caller) -> inventory.Inventory:
        result: inventory.Inventory = real(request, d, caller)
        taken.append(result)
        return result

    verb = replace(inventory.COMMAND, handle=handle).verb(deps)
    verb.handle(inventory.InventoryRequest(), Caller(user="U0ANA"))
    ref = weakref.ref(taken.pop())
    deps.in_flight.expire()
    gc.collect()
    assert ref() is None, "the last reply's memo holds its result weakly"
