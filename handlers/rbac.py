"""``rbac [repair=<ns>,...] [account=<ns>/<name>]``: the Roles and bindings the policy needs.

The shell only (a chat reply is no place for a manifest to pipe): the ClusterRole of reads, a
Role per target namespace naming its DaemonSets, the smoke test's, migration and repair Roles,
and the drain ClusterRole when a target drains, each with its binding to the bot's
ServiceAccount, from the same table a refused call is named from
(:mod:`runbooks.cluster.permissions`). ``upgradebot rbac | kubectl apply -f -`` installs them.
Reads nothing but the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from handlers.arguments import UsageError, split_pairs
from handlers.replies import Reply
from handlers.routing import Caller, Command, Deps
from handlers.verbs import entry
from runbooks import validation
from runbooks.rbac_manifests import manifests, render

USAGE = entry("rbac").usage


class RbacRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    repair: tuple[str, ...] = ()
    """The namespaces whose GPU pods a repair may delete (default: none, no repair Role)."""
    account: tuple[str, str] = ("upgradebot", "upgradebot")


class Rbac(BaseModel):
    model_config = ConfigDict(frozen=True)

    objects: list[dict[str, Any]]


def _name(value: str, what: str, check: Callable[[str, str], str] = validation.dns1123_subdomain) -> str:
    try:
        return check(value, what)
    except ValueError as exc:
        raise UsageError(str(exc), USAGE) from None


def _namespace(value: str, what: str) -> str:
    """A namespace: a DNS-1123 label (at most 63 characters, no '.'), as the API server requires."""
    return _name(value, what, validation.dns1123_label)


def parse(words: Sequence[str]) -> RbacRequest:
    _, pairs = split_pairs(words, allowed=("repair", "account"), usage=USAGE)
    repair = tuple(_namespace(n, "repair namespace") for n in pairs.get("repair", "").split(",") if n)
    account = ("upgradebot", "upgradebot")
    if "account" in pairs:
        namespace, sep, name = pairs["account"].partition("/")
        if not sep:
            raise UsageError("account= is the ServiceAccount as <namespace>/<name>, e.g. upgradebot/upgradebot", USAGE)
        account = (_namespace(namespace, "account namespace"), _name(name, "ServiceAccount"))
    return RbacRequest(repair=repair, account=account)


def handle(request: RbacRequest, deps: Deps, caller: Caller) -> Rbac:
    return Rbac(objects=manifests(deps.policy, repair_namespaces=request.repair, account=request.account))


def present(result: Rbac) -> Reply:
    return Reply(text=render(result.objects))


COMMAND = Command.of(entry("rbac"), parse, handle, present,
                     to_json=lambda result: {"apiVersion": "v1", "kind": "List", "items": result.objects})
