"""APScheduler on a job store shared by several processes keeps running when a job vanishes."""

from __future__ import annotations

import datetime as dt
import threading

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore

from bot.reports.scheduler import SharedStoreScheduler


class RemovedByAnotherProcess(ThreadPoolExecutor):
    """Runs the job, and meanwhile "another process" removes it from the shared store."""

    def __init__(self, store: MemoryJobStore) -> None:
        super().__init__(1)
        self.store = store
        self.raced = False

    def submit_job(self, job, run_times) -> None:  # type: ignore[no-untyped-def]
        super().submit_job(job, run_times)
        if not self.raced:
            self.raced = True
            self.store.remove_job(job.id)


def test_a_job_removed_elsewhere_does_not_stop_the_loop() -> None:
    """The loser of the race logs and goes on; a later job still fires in this process."""
    store = MemoryJobStore()
    scheduler = SharedStoreScheduler(jobstores={"default": store}, executors={"default": RemovedByAnotherProcess(store)},
                                     timezone=dt.UTC)
    fired: list[str] = []
    later = threading.Event()
    now = dt.datetime.now(dt.UTC)
    scheduler.add_job(lambda: fired.append("first"), "date", run_date=now, id="first")
    scheduler.add_job(lambda: (fired.append("second"), later.set()), "date",
                      run_date=now + dt.timedelta(seconds=1.5), id="second")
    scheduler.start()
    try:
        assert later.wait(10), "the scheduler loop died after the race"
    finally:
        scheduler.shutdown(wait=True)
    assert fired == ["first", "second"]
