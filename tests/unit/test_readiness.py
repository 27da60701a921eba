"""``/readyz``'s checks and their cache (:class:`bot.slack.http.Readiness`), on a fake clock."""

from __future__ import annotations

from bot.slack.http import Readiness


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Flaky:
    """A check that fails while ``up`` is False, counting its calls."""

    def __init__(self, up: bool) -> None:
        self.up, self.calls = up, 0

    def __call__(self) -> None:
        self.calls += 1
        if not self.up:
            raise ConnectionError("down")


def test_a_replica_is_ready_at_the_first_probe_after_the_failed_check_passes() -> None:
    """Issue 35: a not-ready answer was cached as long as a ready one (5 s), so a starting
    ``serve`` whose workers had just beaten stayed unready up to 5 s more. The required check
    that failed is asked again at each probe (ready at once when it passes); the checks that
    passed, and the reported ones (Slack's ``auth.test``, the clusters: remote), are still
    asked once per cache period; a ready answer is cached as before."""
    clock = Clock()
    consumers, redis, slack = Flaky(up=False), Flaky(up=True), Flaky(up=False)
    readiness = Readiness({"consumers": consumers, "redis": redis, "slack": slack}, cache_seconds=5.0,
                          clock=clock, reported=("slack",))
    ready, results = readiness.check()
    assert not ready and results["consumers"] == "failed: ConnectionError: down"
    clock.now += 0.1
    assert readiness.check()[0] is False and consumers.calls == 2, "still failing: asked again, still unready"
    consumers.up = True
    clock.now += 0.1
    ready, results = readiness.check()
    assert ready and results == {"consumers": "ok", "redis": "ok", "slack": "failed: ConnectionError: down"}
    assert (redis.calls, slack.calls) == (1, 1), "the others kept from the last full check"
    consumers.up = False
    clock.now += 0.1
    assert readiness.check()[0] is True and consumers.calls == 3, "a ready answer is cached"
    clock.now += 5.0
    ready, results = readiness.check()
    assert not ready and (consumers.calls, redis.calls, slack.calls) == (4, 2, 2), "every check again once expired"
