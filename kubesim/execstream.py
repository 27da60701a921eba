"""``pods/<name>/exec`` over WebSocket, as kubectl 1.30+ speaks it, for a few commands.

kubectl asks for ``v5.channel.k8s.io`` (then ``v4``…) on a ``GET`` with the WebSocket
upgrade headers; each binary message starts with its channel: 1 stdout, 2 stderr, 3 the
error channel, on which the API server writes the command's ``Status`` before closing
(``Success``, or ``NonZeroExitCode`` with the exit code as the ``ExitCode`` cause, which
kubectl prints as ``command terminated with exit code N`` and exits with). A request without
the upgrade (SPDY's ``POST``) is refused as the API server refuses a non-upgrade request,
``400 Upgrade request required``; kubectl then reports it.

The container is what the scenario knows of it: ``/dev`` with the runtime's entries plus,
for a container given GPUs (``nvidia.com/gpu`` or a claim's devices, the GPUs
:mod:`kubesim.dcgm` attributes to it), the NVIDIA device nodes the container toolkit injects
and ``nvidia-smi``. Commands: ``ls``, ``nvidia-smi -L``, ``echo``, ``true``, ``false`` and
``sh -c`` of those (globs expanded); any other program is not found, as the runtime words it
(``executable file not found in $PATH``) or, under ``sh -c``, as dash does (exit code 127).
"""

from __future__ import annotations

import fnmatch
import json
import shlex
from typing import Any

from aiohttp import web

from kubesim import dcgm, errors

PODS = ("", "pods")
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDOUT, STDERR, ERROR = 1, 2, 3
_RUNTIME_DEV = ("core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
                "stdout", "termination-log", "tty", "urandom", "zero")
_NVIDIA_CONTROL = ("nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl")
_DIRS = ("/", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/dev/fd")


class Result:
    """What a command printed and its exit code; ``runtime_error`` when it could not start."""

    def __init__(self, out: str = "", err: str = "", code: int = 0, runtime_error: str = "") -> None:
        self.out, self.err, self.code, self.runtime_error = out, err, code, runtime_error


class Container:
    """The files and programs of one running container."""

    def __init__(self, *, gpus: list[tuple[int, str]], model: str) -> None:
        self.gpus, self.model = gpus, model
        self.dev = sorted(_RUNTIME_DEV + ((*_NVIDIA_CONTROL, *(f"nvidia{i}" for i, _ in gpus)) if gpus else ()))

    def exists(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        return path in _DIRS or (path.startswith("/dev/") and path[5:] in self.dev)

    def glob(self, word: str) -> list[str]:
        if not any(c in word for c in "*?["):
            return [word]
        folder, _, pattern = word.rpartition("/")
        names = self.dev if folder == "/dev" else []
        found = [f"{folder}/{n}" for n in names if fnmatch.fnmatchcase(n, pattern)]
        return found or [word]

    def run(self, argv: list[str]) -> Result:
        if not argv:
            return Result(runtime_error='exec: "": executable file not found in $PATH')
        prog, args = argv[0].rsplit("/", 1)[-1], argv[1:]
        if prog in ("sh", "bash") and args[:1] == ["-c"] and len(args) >= 2:
            return self.shell(args[1])
        if prog == "ls":
            return self.ls(args)
        if prog == "echo":
            return Result(out=" ".join(args) + "\n")
        if prog in ("true", "false"):
            return Result(code=int(prog == "false"))
        if prog == "nvidia-smi" and self.gpus:
            return self.nvidia_smi(args)
        return Result(runtime_error=f'exec: "{argv[0]}": executable file not found in $PATH')

    def shell(self, script: str) -> Result:
        try:
            words = shlex.split(script)
        except ValueError:
            return Result(err="sh: 1: Syntax error: Unterminated quoted string\n", code=2)
        argv = [w for word in words for w in self.glob(word)]
        result = self.run(argv)
        if result.runtime_error:
            return Result(err=f"sh: 1: {argv[0]}: not found\n", code=127)
        return result

    def ls(self, args: list[str]) -> Result:
        paths = [a for a in args if not a.startswith("-")] or ["."]
        out: list[str] = []
        err: list[str] = []
        dirs = []
        for path in paths:
            if not self.exists(path) and path != ".":
                err.append(f"ls: cannot access '{path}': No such file or directory\n")
            elif path.rstrip("/") == "/dev":
                dirs.append(path)
            else:
                out.append(path + "\n")
        for i, path in enumerate(dirs):
            if len(paths) > 1:
                out.append(("\n" if out or i else "") + f"{path}:\n")
            out.extend(f"{name}\n" for name in self.dev)
        return Result(out="".join(out), err="".join(err), code=2 if err else 0)

    def nvidia_smi(self, args: list[str]) -> Result:
        if args != ["-L"]:
            return Result(err="kubesim answers nvidia-smi -L only\n", code=2)
        return Result(out="".join(f"GPU {n}: {self.model} (UUID: {uuid})\n" for n, (_, uuid) in enumerate(self.gpus)))


def container_of(sim: Any, pod: dict[str, Any], container: str) -> Container:
    """The container's view: its GPUs (index on the node, UUID) as the dcgm-exporters see them."""
    node = (pod.get("spec") or {}).get("nodeName") or ""
    exporters = sim.controllers.get("dcgm")
    gpus: list[tuple[int, str]] = []
    model = dcgm.DEFAULT_MODEL
    node_obj = sim.store.get(("", "nodes"), "", node)
    if node_obj is not None:
        model = dcgm.model_name(node_obj)
    if exporters is not None and node:
        given = exporters.assignments(node, exporters.gpus(node))  # the exporters attribute GPUs to pods
        m = pod["metadata"]
        gpus = [(i, dcgm.gpu_uuid(node, i)) for i, (ns, name, ctr) in sorted(given.items())
                if (ns, name) == (m.get("namespace"), m["name"]) and ctr in (container, "")]
    return Container(gpus=gpus, model=model)


def _status(result: Result, argv: list[str]) -> dict[str, Any]:
    if result.runtime_error:
        return {"metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
                "message": "Internal error occurred: error executing command in container: failed to exec in "
                           f"container: failed to start exec: OCI runtime exec failed: exec failed: unable to start "
                           f"container process: {result.runtime_error}: unknown",
                "details": {"causes": [{"message": result.runtime_error}]}}
    if result.code:
        return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                "message": f"command terminated with non-zero exit code: error executing command {argv}, "
                           f"exit code {result.code}",
                "details": {"causes": [{"reason": "ExitCode", "message": str(result.code)}]}}
    return {"metadata": {}, "status": "Success"}


def _pick_container(pod: dict[str, Any], name: str) -> str:
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    if not name:
        if len(names) != 1:
            raise errors.bad_request(f"a container name must be specified for pod {pod['metadata']['name']}, "
                                     f"choose one of: [{' '.join(names)}]")
        return names[0]
    if name not in names:
        raise errors.bad_request(f"container {name} is not valid for pod {pod['metadata']['name']}")
    return name


async def serve(sim: Any, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
    """Run the command of an exec request in the pod's container and stream its output."""
    pod = sim.store.get(PODS, namespace, name)
    if pod is None:
        raise errors.ApiError(404, "NotFound", f'pods "{name}" not found',
                              {"name": name, "kind": "pods"})
    container = _pick_container(pod, request.query.get("container", ""))
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise errors.bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
    running = {s.get("name"): "running" in (s.get("state") or {})
               for s in (pod.get("status") or {}).get("containerStatuses") or []}
    if not running.get(container):
        raise errors.bad_request(f"container {container} is not running in pod {namespace}/{name}"
                                 if phase == "Running" else f"pod {name} does not have a host assigned"
                                 if not (pod.get("spec") or {}).get("nodeName") else
                                 f"unable to upgrade connection: container not found (\"{container}\")")
    ws = web.WebSocketResponse(protocols=PROTOCOLS)
    if not ws.can_prepare(request).ok:
        raise errors.ApiError(400, "BadRequest", "Upgrade request required")
    argv = request.query.getall("command", [])
    result = container_of(sim, pod, container).run(list(argv))
    await ws.prepare(request)
    if result.out and request.query.get("stdout") in ("true", "1"):
        await ws.send_bytes(bytes([STDOUT]) + result.out.encode())
    if result.err and request.query.get("stderr") in ("true", "1"):
        await ws.send_bytes(bytes([STDERR]) + result.err.encode())
    await ws.send_bytes(bytes([ERROR]) + json.dumps(_status(result, list(argv))).encode())
    await ws.close()
    return ws

