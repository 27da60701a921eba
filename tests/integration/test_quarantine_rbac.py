"""``quarantine`` and ``release`` as the bot's ServiceAccount (issue 61, item 5): with the install's
RBAC alone a quarantine request is refused before anyone approves, naming the missing rule (the
node patch's server-side dry run is authorized like the patch); with
``deploy/examples/quarantine.yaml`` beside it (what ``upgradebot rbac`` prints) the quarantine and
the release run with no 403."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.daemonset.quarantining import QuarantineSteps, ReleaseSteps
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunKind, RunState
from tests.integration.test_install_rbac import (
    ALICE,
    BOB,
    POLICY,
    ROOT,
    TARGET,
    install,
    rendered_rbac,
    sim,
)

__all__ = ["sim"]  # the fixture of the install tests
KINDS = {RunKind.QUARANTINE: QuarantineSteps(), RunKind.RELEASE: ReleaseSteps()}


def test_the_quarantine_example_lets_a_quarantine_and_a_release_run_with_zero_403s(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "bare").mkdir()
    (tmp_path / "with-example").mkdir()
    bare = install(sim, tmp_path / "bare", rendered_rbac())
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY, connect=bare.connect,
                    kinds=KINDS)
    with pytest.raises(Refused, match=re.escape('lacks the rule {apiGroups: [""], resources: [nodes], verbs: [patch]}')):
        engine.request_quarantine(actor=ALICE, target=TARGET, node="gpu-node2")
    assert engine.runs() == []

    example = list(yaml.safe_load_all((ROOT / "deploy" / "examples" / "quarantine.yaml").read_text()))
    bot = install(sim, tmp_path / "with-example", [*rendered_rbac(), *example])
    before = bot.refusals()
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY, connect=bot.connect,
                    kinds=KINDS)
    for request, node in ((engine.request_quarantine, "gpu-node2"), (engine.request_release, "gpu-node2")):
        run = request(actor=ALICE, target=TARGET, node=node).run
        engine.decide(run.id, actor=BOB, approve=True)
        run = engine.advance(run.id)
        assert run.state is RunState.DONE, run.reason
    assert bot.refusals() == before
