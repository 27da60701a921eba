"""What each argument of a verb's usage line means: the shell's ``<verb> --help`` and the chat's
``help <verb>`` list them (issue 41: ``ARG as in the usage line`` described nothing).

An argument is named as its usage line writes it: ``key=`` for a ``key=value`` word, the
placeholder itself for a positional one (``<run>``), the flag for a flag (``-f``).
:data:`ARGUMENTS` says what each means; :data:`ARGUMENTS_OF` what one means for one verb
where it differs. A verb whose usage line names an argument found in neither is refused by
:func:`described` (and so by the tests), so a new argument comes with its sentence.
"""

from __future__ import annotations

import re

ARGUMENTS: dict[str, str] = {
    "<namespace>/<daemonset>": "the DaemonSet of the device plugin or DRA driver, as the policy's targets "
                               "name it (kube-system/nvidia-device-plugin-daemonset)",
    "<run>": "a run's id, r- and eight letters or digits, as `runs` lists them",
    "<run>|<namespace>/<daemonset>": "a run (its canary node, or every node once promoted), or a DaemonSet "
                                     "checked as it is now",
    "<canary|migration|repair|cleanup|quarantine|release|promotion|rollback>": (
        "which request of the run: the one `status <run>` shows waiting for approval"),
    "<namespace>/[<kind>/]<workload>": "the workload whose device-plugin resources become ResourceClaims "
                                       "(kind: Deployment, StatefulSet, Job…; default: found by name)",
    "cluster=": "the kubeconfig context to act on (default: the current context, or the channel's cluster)",
    "image=": "the new image, with a tag or digest (nvcr.io/nvidia/k8s-device-plugin:v0.17.0)",
    "node=": "the canary node, changed and verified first; auto picks the least busy qualifying node of each "
             "hardware class and says why in the request",
    "container=": "the container to change (default: the only one, the one running the plugin beside "
                  "gpu-feature-discovery, mps-control-daemon or config-manager containers, or the one the policy "
                  "names)",
    "when=": "next-window: wait for the policy's next maintenance window instead of refusing outside one",
    "env=": "set (NAME=value) or remove (NAME-) an environment variable of the container; repeatable",
    "args=": "the container's arguments, comma-separated (- removes them)",
    "limits=": "the container's resource limits (cpu=…,memory=…)",
    "requests=": "the container's resource requests (cpu=…,memory=…)",
    "security=": "the container's securityContext fields (allowPrivilegeEscalation=false,capabilities.drop=ALL)",
    "pod-security=": "the pod's securityContext fields",
    "priority=": "the pod's priorityClassName (- removes it)",
    "toleration=": "add a toleration (key[=value][:Effect]) or remove one (…-); repeatable",
    "volume=": "move a hostPath volume of the pod to another host directory, <name>:<absolute path> "
               "(device-plugin:/var/lib/kubelet/device-plugins); repeatable",
    "reason=": "why, in your words: kept in the audit trail and shown to the approvers",
    "limit=": "how many runs to list, newest first (default 20)",
    "window=": "how long to watch for restarts and events (30s, 5m; default: the policy's observe_window)",
    "target=": "the Kubernetes release you upgrade to (1.32 or v1.32.4)",
    "-f": "a manifest file or directory to check as well (shell only; repeatable)",
    "class=": "the DeviceClass the claims ask for (default: the one the cluster's driver publishes)",
    "canary=": "run the plan first on a duplicate of the workload with n replicas (or p% of them); the switch "
               "waits for its own approval",
    "repair=": "namespaces where `repair` may delete stuck pods, comma-separated",
    "account=": "the ServiceAccount the bot runs as, <namespace>/<name> (default: upgradebot/upgradebot)",
    "verb": "the verb to describe (default: every verb)",
    "--all": "every entry of the trail; without it the oldest checks and steps of a long trail are left out "
             "(never the request, a transition or a decision)",
}
ARGUMENTS_OF: dict[tuple[str, str], str] = {
    ("verify", "node="): "the node to check (default: the run's canary node, or every node)",
    ("restart", "node="): "the node restarted first and verified; auto picks one per hardware class and says why",
    ("quarantine", "node="): "the node the plugin is kept off (cordoned, labelled, its plugin pod removed)",
    ("release", "node="): "the quarantined node given back to the plugin",
    ("status", "<run>"): "a run's id (default: every active run)",
    ("resume", "<run>"): "the halted run whose step runs again (shell, default: every unfinished run)",
}

_WORD = re.compile(r"(?:<[^>]*>|[^\s<])+")


def _bare(word: str) -> str:
    """``[node=<node>|auto]``: ``node=<node>|auto`` (the brackets that only say "optional")."""
    if word.startswith("["):
        word = word[1:]
    while word.endswith("]") and word.count("]") > word.count("["):
        word = word[:-1]
    return word


def argument_names(usage: str) -> list[str]:
    """The arguments a usage line names, each once, in order (``audit <run>``: ``["<run>"]``)."""
    names: list[str] = []
    words = [_bare(w) for w in _WORD.findall(usage)][1:]
    for at, word in enumerate(words):
        if word in ("...", "…", "") or (word.startswith("<") and at and words[at - 1].startswith("-")):
            continue  # a flag's value (-f <file|dir>) is described with the flag
        if word.startswith("-") or word.startswith("<"):
            name = word
        elif "=" in word:
            name = word.split("=", 1)[0] + "="
        else:
            name = word
        if name not in names:
            names.append(name)
    return names


def described(verb: str, usage: str) -> list[tuple[str, str]]:
    """Each argument of ``usage`` and what it means for ``verb``; KeyError names one not described."""
    out = []
    for name in argument_names(usage):
        meaning = ARGUMENTS_OF.get((verb, name)) or ARGUMENTS.get(name)
        if meaning is None:
            raise KeyError(f"{verb}: the argument {name} of its usage line has no description in handlers/argument_help.py")
        out.append((name, meaning))
    return out
