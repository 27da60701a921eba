"""Finding 8 of the security review, the engine's half: a request whose approval request
cannot be opened must not leave a run holding its target's lock.

Before: with ``expire_after: 999999999d`` the run was stored (``requested``, taking the
target's lock) and then opening its gate raised OverflowError: every canary answered
"internal error" and the target stayed locked by a run nobody could decide or close. The
policy now refuses such a duration; this test reaches the engine's mechanism directly, with
a policy copied past validation, as any other unexpected error there would.
"""

from __future__ import annotations

import pytest

from runbooks.engine.runs import Run, RunState, Target, new_run_id
from tests.engine_support import ALICE, IMAGE, make_engine, policy, request


def test_finding8_a_request_whose_gate_cannot_open_ends_failed_and_frees_the_target(redis_url: str) -> None:
    """The error reaches the caller; the run it stored is failed with the reason and the
    target's lock is released, so the next request (with a sound policy) is accepted."""
    sound = policy()
    broken = sound.model_copy(update={"approvers": sound.approvers.model_copy(update={"expire_after": "999999999d"})})
    engine = make_engine(redis_url, pol=broken)
    with pytest.raises(OverflowError):
        request(engine)
    [run] = engine.runs(limit=10)
    assert run.state is RunState.FAILED and "could not be opened" in run.reason and "OverflowError" in run.reason
    assert engine.store.lock_holder(run.target.key) is None
    again = make_engine(redis_url, pol=sound)
    assert request(again, ALICE).state is RunState.AWAITING_APPROVAL


def test_finding8_a_resumed_requested_run_whose_gate_cannot_open_frees_the_target(redis_url: str) -> None:
    """A run left ``requested`` (its process died before the request was opened) is opened on
    resume by the same path: an error there fails it and frees the target, as at request time."""
    sound = policy()
    broken = sound.model_copy(update={"approvers": sound.approvers.model_copy(update={"expire_after": "999999999d"})})
    engine = make_engine(redis_url, pol=broken)
    now = engine.clock.now()
    left = Run(id=new_run_id(), target=Target(cluster="prod", namespace="kube-system",
                                              name="nvidia-device-plugin-daemonset"),
               image=IMAGE, container="plugin", node="gpu-node1", requester="U0ALICE", created_at=now, updated_at=now)
    engine.store.create(left)
    assert engine.store.lock_holder(left.target.key) == left.id
    with pytest.raises(OverflowError):
        engine.resume()
    run = engine.get(left.id)
    assert run.state is RunState.FAILED and "could not be opened" in run.reason
    assert engine.store.lock_holder(left.target.key) is None
