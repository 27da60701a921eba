"""``python -m kubesim serve --port P --scenario NAME ...``: serve a simulated cluster."""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import threading

from kubesim.dcgmprofiles import PROFILES, RELEASES, ExporterConfig
from kubesim.running import KubeSim, parse_release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubesim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a simulated GPU cluster on 127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="port (0 picks a free one)")
    serve.add_argument("--scenario", default="gpu-small", help="gpu-small (default), gpu-large, gpu-unsafe, gpu-mixed, dra-broken-claims, "
                       "gpu-helm, gpu-helm-mig or gpu-operator")
    serve.add_argument("--nodes", type=int, default=None, help="node count (gpu-large)")
    serve.add_argument("--k8s-version", default="1.31", help="release to simulate, 1.27 .. 1.34")
    serve.add_argument("--event-ttl", default="1h", help="how long events are kept (default 1h)")
    serve.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    serve.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig")
    serve.add_argument("--context", default="kubesim", help="context name in the kubeconfig")
    serve.add_argument("--dcgm-port", type=int, default=0,
                       help="port of the GPU nodes' dcgm-exporters on 127.0.0.1 (0 picks a free one)")
    serve.add_argument("--dcgm-profile", default="default", choices=sorted(PROFILES),
                       help="the dcgm-exporters' counters CSV: default (default-counters.csv) or dcp "
                            "(dcp-metrics-included.csv, the GPU operator's)")
    serve.add_argument("--dcgm-enable", default="", metavar="FIELD[,FIELD]",
                       help="fields the CSV comments out that the exporters export all the same "
                            "(e.g. DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,DCGM_EXP_XID_ERRORS_COUNT)")
    serve.add_argument("--dcgm-release", default="4.5.3-4.8.2", choices=sorted(RELEASES),
                       help="the dcgm-exporter release imitated: its node label is Hostname, or hostname for main-d5e5f51")
    serve.add_argument("--push", action="append", default=[], metavar="IMAGE",
                       help="push an image (repository:tag) to the simulated registry, e.g. a fault build "
                            "such as nvcr.io/nvidia/k8s-device-plugin:v0.17.0-crash; repeatable")
    args = parser.parse_args(argv)
    # Caught before the cluster is built, so before the URL is printed: a supervisor that stops
    # kubesim as soon as it reads the URL gets exit 0, never death by the signal.
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        parse_release(args.k8s_version)
        exporters = ExporterConfig(profile=args.dcgm_profile, release=args.dcgm_release,
                                   enabled=tuple(f for f in args.dcgm_enable.split(",") if f))
        sim = KubeSim(
            scenario=args.scenario, nodes=args.nodes, k8s_version=args.k8s_version,
            event_ttl=args.event_ttl, speed=args.speed, port=args.port,
            kubeconfig=args.kubeconfig, context=args.context, dcgm_port=args.dcgm_port,
            dcgm=exporters, pushed=args.push,
        ).start()
    except (ValueError, OSError) as exc:
        print(f"kubesim: {exc}", file=sys.stderr)
        return 2
    # The cluster built at start (millions of objects at 5,000 nodes) is never scanned again by
    # full passes, and the objects each request builds die young: without both, full passes over a
    # promotion's changes took 0.2-0.6 s each, 8 s of a 3-minute bench at 5,000 nodes.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    print(sim.url, flush=True)
    print(f"kubeconfig written to {sim.kubeconfig} (context {args.context})", flush=True)
    print(f"dcgm-exporter targets (Prometheus http_sd): {sim.dcgm_url}/sim/v1/dcgm/targets", flush=True)
    done.wait()
    sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
