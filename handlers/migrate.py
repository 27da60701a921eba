"""``migrate <namespace>/[<kind>/]<workload> [class=<device class>] [cluster=<context>]`` and
``apply-migration`` with the same arguments.

``migrate`` is thin: parse, connect, run the runbook (:mod:`runbooks.dra.migrating`), return
its model. :func:`summarize` shows what changes (each container's extended resource and the
claim that replaces it), the objects to apply as YAML, and the server's answers to their
dry run. Exit 1 when the server refused one. Nothing is applied.

``apply-migration`` opens a migration run (:mod:`runbooks.dra.migration_run`): the same plan,
stored with the run and waiting for an approver; once approved it is applied, verified
(the pods run with allocated claims) and rolled back to the saved pod template on failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import yaml
from pydantic import BaseModel, ConfigDict

from handlers.arguments import UsageError, split_pairs
from handlers.replies import Attachment, Item, Message, Reply, Table
from handlers.routing import EXIT_FAILED, EXIT_OK, Caller, Command, Deps
from handlers.run_replies import requested_reply
from handlers.runs import failed_unless_done, outcome_json
from handlers.verbs import entry
from runbooks import validation
from runbooks.dra.migrating import WORKLOADS, Migration, migrate
from runbooks.engine.commands import Outcome
from runbooks.errors import shorten

USAGE = entry("migrate").usage
APPLY_USAGE = entry("apply-migration").usage
KINDS = {k.lower(): k for k in WORKLOADS}
LONG_CHARS = 2900
"""A plan longer than this (what one Slack section holds, in a code block) is attached as a
file (Slack uploads it to the thread) rather than shown inline in pieces."""


class MigrateRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    name: str
    kind: str | None = None
    device_class: str | None = None
    cluster: str | None = None
    canary: str | None = None
    """``apply-migration`` only: replicas of a duplicate that runs the plan before the switch (``2``, ``25%``)."""


def _parser(usage: str) -> Callable[[Sequence[str]], MigrateRequest]:
    def parse(words: Sequence[str]) -> MigrateRequest:
        keys = ("class", "cluster", "canary") if usage == APPLY_USAGE else ("class", "cluster")
        positional, pairs = split_pairs(words, allowed=keys, usage=usage, max_positional=1)
        canary = pairs.get("canary")
        if canary is not None and not re.fullmatch(r"[1-9][0-9]{0,3}|(100|[1-9][0-9]?)%", canary):
            raise UsageError(f"canary={canary} is not a number of replicas (canary=2) or a percentage of the "
                             "workload's (canary=25%)", usage)
        if not positional:
            raise UsageError("which workload? give <namespace>/<name> (or <namespace>/<kind>/<name>)", usage)
        parts = positional[0].split("/")
        if len(parts) not in (2, 3):
            raise UsageError(f"{positional[0]!r} is not <namespace>/[<kind>/]<name>", usage)
        kind = None
        if len(parts) == 3:
            kind = KINDS.get(parts[1].lower())
            if kind is None:
                raise UsageError(f"{parts[1]!r} cannot be migrated: use one of {', '.join(KINDS)}", usage)
        try:
            namespace, name = validation.node_name(parts[0]), validation.node_name(parts[-1])
            if "class" in pairs:
                validation.node_name(pairs["class"])
        except ValueError as exc:
            raise UsageError(str(exc), usage) from None
        return MigrateRequest(namespace=namespace, name=name, kind=kind, device_class=pairs.get("class"),
                              cluster=pairs.get("cluster"), canary=canary)

    return parse


parse = _parser(USAGE)


def handle(request: MigrateRequest, deps: Deps, caller: Caller) -> Migration:
    with deps.connect(request.cluster) as cluster:
        return migrate(cluster, request.namespace, request.name, kind=request.kind,
                       device_class=request.device_class, resources=deps.policy.gpu_resources)


def manifest_text(result: Migration) -> str:
    """The objects to apply, as one YAML stream."""
    return yaml.safe_dump_all(result.objects, sort_keys=False)


def summarize(result: Migration) -> Reply:
    refused = [d for d in result.dry_runs if not d.accepted]
    changes = "\n".join(f"{c.container}: {c.resource} {c.count} -> claim {c.claim} (ResourceClaimTemplate "
                        f"{c.template}, {c.count} device(s) of {result.device_class})" for c in result.claims)
    text = ("The server refused part of the plan in its dry run: fix it before applying." if refused else
            "The server accepted every object of the plan in a dry run (nothing was written).") + "\n" + changes
    fields = [
        Item(label="Workload", value=result.ref),
        Item(label="Written in", value=f"resource.k8s.io/{result.version}, device class {result.device_class}"),
        Item(label="Cluster", value=result.context),
    ]
    manifest = manifest_text(result)
    files: list[Attachment] = []
    if len(manifest) > LONG_CHARS:
        name = f"migration-{result.namespace}-{result.kind.lower()}-{result.name}.yaml"
        files.append(Attachment(filename=name, title=f"To apply: kubectl apply --server-side -f {name}",
                                content=manifest))
        thread = [Message(title="To apply (kubectl apply --server-side -f -)",
                          text=f"{len(result.objects)} object(s), {manifest.count(chr(10))} lines: in the file {name}")]
    else:
        thread = [Message(title="To apply (kubectl apply --server-side -f -)", text=f"```\n{manifest}```")]
    if result.dry_runs:
        rows = [[d.subject, "accepted" if d.accepted else "REFUSED", shorten(d.answer, 200)] for d in result.dry_runs]
        thread.append(Message(title="Server-side dry run (dryRun=All, nothing written)",
                              table=Table(header=["OBJECT", "RESULT", "THE SERVER SAID"], rows=rows),
                              tone="error" if refused else "ok"))
    if result.notes:
        thread.append(Message(title="Notes", text="\n".join(result.notes), tone="warn"))
    return Reply(title=f"Migration of {result.ref} to DRA", text=text, fields=fields, thread=thread,
                 tone="error" if refused else "ok", files=files)


def request(args: MigrateRequest, deps: Deps, caller: Caller) -> Outcome:
    """A migration run waiting at its migration request; nothing changes before an approver approves."""
    return deps.engine.request_migration(
        actor=deps.actor(caller), namespace=args.namespace, name=args.name, kind=args.kind,
        device_class=args.device_class, cluster=args.cluster, canary=args.canary,
        origin={"surface": caller.surface, "channel": caller.channel or ""})


APPLY_COMMAND = Command.of(entry("apply-migration"), _parser(APPLY_USAGE), request, requested_reply,
                           exit_code=failed_unless_done, to_json=outcome_json, by_surface=True)
COMMAND = Command.of(entry("migrate"), parse, handle, summarize,
                     exit_code=lambda result: EXIT_OK if result.accepted else EXIT_FAILED)
