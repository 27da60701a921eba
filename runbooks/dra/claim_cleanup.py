"""A cleanup run (``cleanup-claims``): the broken ResourceClaims ``claims`` lists, deleted as listed.

:class:`ClaimCleanupSteps` implements :class:`runbooks.engine.steps.ChangeSteps`:

- ``plan`` (at request time, read-only): :func:`runbooks.dra.claims.broken_claims`; the claims
  it may delete (every broken one but a terminating one, which deleting again does not move,
  and one still reserved for a live pod) are stored with the run with the uid and
  resourceVersion each was read at, the others listed only, each in use one with the live
  pods holding it, so the approver sees them. Refused when there is none to delete. The
  approvers approve exactly that.
- ``check_request``: each deletion made as a server-side dry run (authorized like the
  deletion), so a missing RBAC rule refuses the request before anyone approves.
- ``apply``: each listed claim read again with its namespace's pods just before its delete:
  one a live pod holds now (:func:`runbooks.dra.claims.live_holders`) is kept and reported,
  no delete sent. The others deleted with their listed uid and resourceVersion as the delete's
  preconditions: a claim that changed since it was listed (another resourceVersion: a pod took
  it, the controller released it) or a new claim of the same name is not deleted (the API
  server answers 409) and is reported; one gone already is noted. The engine lets the run
  delete those claims and write nothing else.
- ``verify_all``: every claim it deleted is gone, or being deleted (its finalizer is the
  controller's to remove once nothing reserves it).
- ``rollback``: nothing to put back (a deleted claim cannot be restored).

What the steps keep in ``run.progress``: ``deleted``, ``changed`` (``namespace/name``) and ``kept``
(``namespace/name`` -> the live pods that held it at its delete)
"""

from __future__ import annotations

from typing import Any

from runbooks.cluster import Cluster
from runbooks.cluster.resources import DRA_GROUP, PODS, Resource
from runbooks.daemonset.checks import listing
from runbooks.dra.claims import broken_claims, live_holders
from runbooks.engine.recording import failed, note, note_checks, passed, result
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, StepContext, StepResult, StepSettings
from runbooks.errors import Conflict, Forbidden, NotFound, plural


def _ref(claim: dict[str, Any]) -> str:
    return f"{claim['namespace']}/{claim['name']}"


def _claims(run: Run) -> Resource:
    return Resource(DRA_GROUP, str(run.change["version"]), "resourceclaims", "ResourceClaim", True)


def plan_text(change: dict[str, Any]) -> str:
    """``delete 3 broken ResourceClaims as listed: ml-team/a (reason), ...; listed only: ...``."""
    deleting = [f"{_ref(c)} ({c['reason']})" for c in change.get("delete") or []]
    listed = [f"{_ref(c)} ({c['reason']}" + (f"; in use by live pod(s) {', '.join(c['holders'])}: kept"
                                               if c.get("holders") else "") + ")" for c in change.get("listed") or []]
    return (f"delete {plural(len(deleting), 'broken ResourceClaim')} as listed (uid and resourceVersion as read "
            f"now): {listing(deleting)}" + (f"; listed only, for a person: {listing(listed)}" if listed else ""))


def _holders_now(ctx: StepContext, claims: Resource, claim: dict[str, Any]) -> list[str]:
    """The live pods the claim (this uid) is reserved for as it is now; [] when it is gone or is another."""
    found = ctx.cluster.list_objects(claims, namespace=claim["namespace"],  # list: the read rule has no get
                                     field_selector=f"metadata.name={claim['name']}")
    now = next((o for o in found if o["metadata"].get("uid") == claim["uid"]), None)
    if now is None or not (now.get("status") or {}).get("reservedFor"):
        return []
    return live_holders(now, ctx.cluster.list_objects(PODS, namespace=claim["namespace"]))


class ClaimCleanupSteps:
    """Plan, apply and verify of a cleanup run, as the run engine calls them."""

    def plan(self, cluster: Cluster, run: Run, settings: StepSettings) -> tuple[Run, str]:
        report = broken_claims(cluster)
        delete = [b.model_dump() for b in report.broken if b.deletable]
        listed = [b.model_dump() for b in report.broken if not b.deletable]
        if not delete:
            more = f" (listed only, for a person: {listing([_ref(c) for c in listed])})" if listed else ""
            raise Refused(f"no broken ResourceClaim to delete on {cluster.context}{more}: `claims` shows them")
        change = {"version": report.version, "delete": delete, "listed": listed}
        planned = run.model_copy(update={"change": change,
                                         "target": run.target.model_copy(update={"cluster": cluster.context})})
        return planned, plan_text(change)

    def check_request(self, cluster: Cluster, run: Run, settings: StepSettings) -> list[Check]:
        claims = _claims(run)
        for claim in run.change.get("delete") or []:
            try:
                cluster.delete(claims, claim["name"], namespace=claim["namespace"], uid=claim["uid"], dry_run=True)
            except Forbidden as exc:
                return [failed("cleanup-allowed", str(exc), _ref(claim))]
            except (NotFound, Conflict):
                continue  # gone or changed meanwhile: apply says so
        return [passed("cleanup-allowed", f"{plural(len(run.change.get('delete') or []), 'claim')} may be deleted "
                       "(a dry run of each)")]

    def apply(self, ctx: StepContext) -> StepResult:
        run, claims = ctx.run, _claims(ctx.run)
        deleted = list(run.progress.get("deleted") or [])
        changed = list(run.progress.get("changed") or [])
        kept = dict(run.progress.get("kept") or {})
        for claim in run.change.get("delete") or []:
            ref = _ref(claim)
            if ref in deleted or ref in changed or ref in kept:
                continue  # done before a restart
            holders = _holders_now(ctx, claims, claim)
            if holders:
                kept[ref] = holders
                ctx.run = ctx.save_progress({"kept": kept})
                note(ctx, "cleanup.delete-claim", "skipped", f"ResourceClaim {ref} is reserved for live pod(s) "
                     f"{', '.join(holders)} now: kept, not deleted", claim=ref, holders=holders)
                continue
            try:
                ctx.cluster.delete(claims, claim["name"], namespace=claim["namespace"], uid=claim["uid"],
                                   resource_version=claim["resource_version"])
            except NotFound:
                note(ctx, "cleanup.delete-claim", "info", f"ResourceClaim {ref} is gone already", claim=ref)
                continue
            except Conflict:
                changed.append(ref)
                ctx.run = ctx.save_progress({"changed": changed})
                note(ctx, "cleanup.delete-claim", "skipped", f"ResourceClaim {ref} changed since it was listed and "
                     "approved (another resourceVersion, or another claim of that name): not deleted", claim=ref)
                continue
            deleted.append(ref)
            ctx.run = ctx.save_progress({"deleted": deleted})
            note(ctx, "cleanup.delete-claim", "ok", kind="mutation", detail=f"deleted ResourceClaim {ref} "
                 f"({claim['reason']}: {claim['detail']})", claim=ref, uid=claim["uid"],
                 resource_version=claim["resource_version"])
        return StepResult(ok=True)

    def verify_all(self, ctx: StepContext) -> StepResult:
        run, claims = ctx.run, _claims(ctx.run)
        deleted = set(run.progress.get("deleted") or [])
        left = []
        for claim in run.change.get("delete") or []:
            if _ref(claim) not in deleted:
                continue
            found = ctx.cluster.list_objects(claims, namespace=claim["namespace"],  # list: the read rule has no get
                                             field_selector=f"metadata.name={claim['name']}")
            if any(o["metadata"].get("uid") == claim["uid"] and not o["metadata"].get("deletionTimestamp")
                   for o in found):
                left.append(_ref(claim))
        changed = list(run.progress.get("changed") or [])
        kept = [f"{ref} ({', '.join(holders)})" for ref, holders in (run.progress.get("kept") or {}).items()]
        checks = [failed("claims-deleted", f"still there: {listing(left)}", "claims") if left else
                  passed("claims-deleted", f"{plural(len(deleted), 'claim')} deleted as listed", "claims")]
        if changed:
            checks.append(passed("claims-changed", f"not deleted, changed since they were listed: {listing(changed)} "
                                 "(`claims` shows whether they are still broken)", "claims", changed=changed))
        if kept:
            checks.append(passed("claims-in-use", f"not deleted, kept, in use by a live pod: {listing(kept)}", "claims",
                                 kept=kept))
        note_checks(ctx, "verify", checks)
        outcome = result(checks, what="the cleanup of broken ResourceClaims")
        if outcome.ok:
            reason = f"{plural(len(deleted), 'broken ResourceClaim')} deleted as listed" + (
                f"; not deleted, changed since listed: {listing(changed)}" if changed else "") + (
                f"; kept, in use by a live pod: {listing(kept)}" if kept else "")
            return outcome.model_copy(update={"reason": reason})
        return outcome

    def rollback(self, ctx: StepContext) -> StepResult:
        deleted = list(ctx.run.progress.get("deleted") or [])
        what = f"it deleted {listing(deleted)}" if deleted else "it deleted no claim"
        note(ctx, "rollback.cleanup", "info", f"a deleted claim cannot be put back: {what}")
        return StepResult(ok=True, reason=f"nothing to roll back: {what}")
