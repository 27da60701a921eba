"""The cluster adapter: the only way runbooks reach a Kubernetes API server.

``adapter`` is the single module that imports the official ``kubernetes`` client (an
import-linter contract holds it there); it returns plain dicts and dataclasses, never
client models. The other modules are pure: ``resources`` (what is read and in which API
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
