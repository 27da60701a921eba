"""Sentences people read: plurals, no reprs, an expired request that says when it expired, a
verdict that does not hide its warnings."""

from __future__ import annotations

from handlers.verify import Verified, verification_reply
from runbooks.engine.steps import Check, CheckStatus, StepResult


def test_a_verify_with_a_warning_does_not_say_all_checks_passed() -> None:
    checks = [Check(name="rollout", status=CheckStatus.PASS), Check(name="events", status=CheckStatus.WARN)]
    reply = verification_reply(Verified(target="ns/ds", scope="all nodes", result=StepResult(ok=True, checks=checks)))
    assert reply.title == "Verify of ns/ds on all nodes: passed, with 1 warning"
    clean = verification_reply(Verified(target="ns/ds", scope="all nodes",
                                        result=StepResult(ok=True, checks=checks[:1])))
    assert clean.title.endswith(": all checks passed")
