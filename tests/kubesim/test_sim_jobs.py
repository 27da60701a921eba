"""The simulated kubelets run the CUDA vectoradd sample to completion (smoke-test pods)."""

from __future__ import annotations

from _simkit import PODS, condition, create, events, get, small

SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"


def _sample(name: str, image: str = SAMPLE, *, gpus: int = 1, restart: str = "Never") -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"restartPolicy": restart,
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "cuda", "image": image, "resources": resources}]}}


def _log(sim, name: str) -> str:
    return sim.logs.read("default", name, "cuda") or ""


def test_sample_with_a_gpu_passes_and_succeeds():
    """A scheduled sample pod with a GPU logs the vectoradd output with Test PASSED and Succeeds."""
    sim = small()
    create(sim, PODS, _sample("vectoradd"))
    sim.advance(10)
    pod = get(sim, PODS, "default", "vectoradd")
    assert pod["spec"]["nodeName"].startswith("gpu-node")
    assert pod["status"]["phase"] == "Succeeded"
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    assert condition(pod, "Ready")["reason"] == "PodCompleted"
    log = _log(sim, "vectoradd")
    assert log.startswith("[Vector addition of 50000 elements]\n") and "Test PASSED\n" in log


def test_crash_tag_and_no_gpu_fail():
    """A -crash tag, or a sample given no GPU, prints the CUDA error and the pod Fails (exit 1)."""
    sim = small()
    create(sim, PODS, _sample("broken", SAMPLE + "-crash"))
    create(sim, PODS, _sample("nogpu", gpus=0))
    sim.advance(10)
    for name, error in (("broken", "CUDA driver version is insufficient"), ("nogpu", "no CUDA-capable device")):
        pod = get(sim, PODS, "default", name)
        assert pod["status"]["phase"] == "Failed"
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
        assert error in _log(sim, name) and "Test PASSED" not in _log(sim, name)


def test_failing_sample_with_restart_always_crash_loops():
    """With restartPolicy Always a failing sample restarts and backs off like any crashing container."""
    sim = small()
    create(sim, PODS, _sample("loop", SAMPLE + "-crash", restart="Always"))
    sim.advance(30)
    pod = get(sim, PODS, "default", "loop")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["restartCount"] >= 1
    assert events(sim, reason="BackOff", name="loop")
