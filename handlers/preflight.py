"""``preflight target=<version> [-f <file|dir>] [cluster=<context>]``: before a Kubernetes upgrade.

Thin, as every handler: parse the words, read the manifests named with ``-f`` (the shell
only: a chat surface never reads files on the machine the bot runs on), connect, run the
runbook (:mod:`runbooks.dra.preflight`), return its model. :func:`summarize` shows the
verdict, the findings (failures first, each with its fix and source), the server's
answers to the dry runs, and the notes on each release on the way. Exit 1 when something
would break.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from handlers.arguments import UsageError, split_pairs
from handlers.replies import Item, Message, Reply, Table
from handlers.routing import EXIT_FAILED, EXIT_OK, Caller, Command, Deps
from handlers.verbs import entry
from runbooks.dra.preflight import Manifest, Preflight, PreflightError, preflight
from runbooks.errors import shorten

USAGE = entry("preflight").usage
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_ROWS = 40


class PreflightRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    target: int
    """The target release's minor version (``1.32`` -> 32)."""
    cluster: str | None = None
    files: tuple[str, ...] = ()
    """Manifest files or directories (``-f``, the shell only)."""


def target_minor(text: str) -> int:
    """``1.32``, ``v1.32`` or ``1.32.4`` -> 32."""
    parts = text.removeprefix("v").split(".")
    if len(parts) not in (2, 3) or parts[0] != "1" or not all(p.isdigit() for p in parts):
        raise UsageError(f"target={text!r} is not a Kubernetes release: write it as 1.32 (or v1.32.4)", USAGE)
    return int(parts[1])


def parse(words: Sequence[str]) -> PreflightRequest:
    if "-f" in words or "--filename" in words:
        raise UsageError("-f reads manifest files, so it works from the shell (upgradebot preflight target=<version> "
                         "-f <file|dir>); here, preflight checks what the cluster holds", USAGE)
    _, pairs = split_pairs(words, allowed=("target", "cluster"), usage=USAGE)
    if "target" not in pairs:
        raise UsageError("which release? give target=<version>, e.g. target=1.32", USAGE)
    return PreflightRequest(target=target_minor(pairs["target"]), cluster=pairs.get("cluster"))


class ManifestError(PreflightError):
    """A manifest that cannot be read: the file and the problem, in one line."""


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
    if path.is_file():
        return [path]
    raise ManifestError(f"cannot read {path}: no such file or directory")


def load_manifests(paths: Sequence[str]) -> list[Manifest]:
    """Every object in the files (directories: their .yaml, .yml and .json files), ``List`` items unpacked."""
    out: list[Manifest] = []
    for given in paths:
        for path in _files(Path(given)):
            try:
                docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                raise ManifestError(f"cannot read {path}: {exc.__class__.__name__}: {exc}") from None
            except yaml.YAMLError as exc:
                where = getattr(exc, "problem_mark", None)
                line = f" (line {where.line + 1})" if where is not None else ""
                raise ManifestError(f"{path}{line} is not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
            for index, doc in enumerate(docs, start=1):
                if doc is None:
                    continue
                origin = f"{path}" + (f" #{index}" if len(docs) > 1 else "")
                if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
                    raise ManifestError(f"{origin} is not a Kubernetes object (apiVersion and kind are missing)")
                items = doc.get("items") if str(doc["kind"]).endswith("List") else None
                if isinstance(items, list):
                    out += [Manifest(f"{origin} item {i}", item) for i, item in enumerate(items, start=1)
                            if isinstance(item, dict)]
                else:
                    out.append(Manifest(origin, doc))
    return out


def handle(request: PreflightRequest, deps: Deps, caller: Caller) -> Preflight:
    manifests = load_manifests(request.files)
    with deps.connect(request.cluster) as cluster:
        return preflight(cluster, request.target, manifests)


# ------------------------------------------------------------------ chat surfaces
def summarize(result: Preflight) -> Reply:
    """The verdict, then the findings, the dry runs and the release notes as thread items."""
    fails = [f for f in result.findings if f.severity == "fail"]
    warns = [f for f in result.findings if f.severity == "warn"]
    refused = [d for d in result.dry_runs if not d.accepted]
    path = " -> ".join(f"1.{m}" for m in [result.current_minor, *result.steps])
    if fails or refused:
        text = (f"{len(fails)} blocking, {len(warns)} to look at, {len(refused)} refused by the server's dry run: "
                f"fix them before upgrading to {result.target}")
    elif warns:
        text = f"Nothing blocks the upgrade to {result.target}; {len(warns)} to look at"
    else:
        text = f"Nothing in the DRA objects checked stops an upgrade to {result.target}."
    fields = [
        Item(label="Cluster", value=f"{result.context} ({result.current})"),
        Item(label="Upgrade", value=path if result.steps else f"none: the cluster runs {result.target}"),
        Item(label="Checked", value=f"{result.checked} object(s): DRA objects, workloads using claims, manifests; "
                                    f"{result.drivers} DRA driver(s)"),
        Item(label="Taken", value=f"{result.taken_at:%Y-%m-%d %H:%M:%S %Z} from {result.server}"),
    ]
    thread: list[Message] = []
    if result.findings:
        shown = result.findings[:MAX_ROWS]
        lines = [f"{'FAIL' if f.severity == 'fail' else 'WARN'}  {f.subject} ({f.origin}): {f.problem}\n"
                 f"      fix: {f.fix}\n      source: {f.source}" for f in shown]
        if len(result.findings) > len(shown):
            lines.append(f"… {len(result.findings) - len(shown)} more (--json lists them all)")
        thread.append(Message(title=f"Findings ({len(result.findings)})", text="\n".join(lines),
                              tone="error" if fails else "warn"))
    if result.dry_runs:
        rows = [[d.origin, d.subject, "accepted" if d.accepted else "REFUSED", shorten(d.answer, 200)]
                for d in result.dry_runs[:MAX_ROWS]]
        thread.append(Message(title="Server-side dry run (dryRun=All, nothing written)",
                              table=Table(header=["FILE", "OBJECT", "RESULT", "THE SERVER SAID"], rows=rows),
                              tone="error" if refused else "ok"))
    if result.notes:
        thread.append(Message(title="On the way", text="\n".join(
            f"{n.release}: {n.text}" + (f" ({n.source})" if n.source else "") for n in result.notes)))
    tone = "error" if fails or refused else ("warn" if warns else "ok")
    return Reply(title=f"Preflight of {result.context} for Kubernetes {result.target}", text=text, fields=fields,
                 thread=thread, tone=tone)


COMMAND = Command.of(entry("preflight"), parse, handle, summarize,
                     exit_code=lambda result: EXIT_FAILED if result.failed else EXIT_OK)
