"""The cluster adapter: the only way runbooks reach a Kubernetes API server.

``adapter`` sends every request over ``transport`` (urllib3, with the TLS and credentials
that ``kubeconfig`` and ``credentials`` read as kubectl does); it is the single module that
may import the official ``kubernetes`` client (an import-linter contract holds it there),
which it does for a legacy ``auth-provider`` only, and it returns plain dicts and
dataclasses, never client models. The other modules are pure: ``resources`` (what is read and in which API
version), ``retrying`` (the retry policy), ``wrapping`` (HTTP answers into
:mod:`runbooks.errors`), ``metrics`` (Prometheus text); ``writing`` (patch, create, delete with preconditions)
and ``discovering`` (served API versions and kinds) are mixins of :class:`Cluster` that
send through the adapter.
"""

from runbooks.cluster.adapter import Cluster
from runbooks.cluster.metrics import MetricSample
from runbooks.cluster.resources import DraApis, Resource, ServerVersion
from runbooks.cluster.retrying import RetryPolicy

__all__ = ["Cluster", "DraApis", "MetricSample", "Resource", "RetryPolicy", "ServerVersion"]
