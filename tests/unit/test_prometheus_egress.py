"""The install's NetworkPolicy lets the bot reach kube-prometheus-stack's Prometheus (issue 37, item 5)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_the_bot_may_reach_prometheus_on_9090_in_monitoring_and_nothing_more() -> None:
    """Issue 37 item 5: one egress rule of the bot's NetworkPolicy allows TCP 9090 to the pods
    labelled app.kubernetes.io/name=prometheus in the namespace monitoring (where
    kube-prometheus-stack installs it), only there; docs/operations.md names that rule."""
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "networkpolicy.yaml").read_text()) if d]
    bot = next(d for d in docs if d["metadata"]["name"] == "upgradebot")
    rules = [r for r in bot["spec"]["egress"] if {"port": 9090, "protocol": "TCP"} in r.get("ports", [])]
    assert rules == [{
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}],
        "ports": [{"port": 9090, "protocol": "TCP"}],
    }]
    assert "app.kubernetes.io/name: prometheus" in (ROOT / "docs" / "operations.md").read_text()
