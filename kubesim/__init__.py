"""kubesim: a simulated GPU Kubernetes cluster that speaks the real Kubernetes REST API.

It imports nothing of the bot. Only the demo wiring, the tests and the benchmarks start
it. ``KubeSim`` (in :mod:`kubesim.running`) serves a scenario on 127.0.0.1 in-process;
``python -m kubesim serve`` does the same from a shell. Data modules (``store``,
``resources``, ``clock``) import nothing of the HTTP layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubesim.running import KubeSim

__all__ = ["KubeSim"]


def __getattr__(name: str) -> Any:
    if name == "KubeSim":
        from kubesim.running import KubeSim

        return KubeSim
    raise AttributeError(name)
