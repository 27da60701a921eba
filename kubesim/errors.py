"""API errors as the real API server reports them: a ``metav1.Status`` with code and reason."""

from __future__ import annotations

from typing import Any

from kubesim.resources import ResourceType


class ApiError(Exception):
    """An error answered as a ``Status`` object with an HTTP code."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # StatusReasonUnknown ("") is omitted, as Go's omitempty does
            body["reason"] = self.reason
        if self.details is not None:  # metav1.Status's field order: ... reason, details, code
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(res: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}  # StatusDetails' field order: name, group, kind, ...
    if res.group:
        details["group"] = res.group
    details["kind"] = res.plural
    return details


def not_found(res: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name)
    )


def conflict(res: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        _details(res, name),
    )


def forbidden(res: ResourceType, name: str, why: str, causes: list[dict[str, str]] | None = None) -> ApiError:
    """403 as admission answers it (``NewForbidden``): ``pods "p" is forbidden: <why>``."""
    subject = f'{res.qualified} "{name}"' if name else res.qualified
    details = _details(res, name)
    if causes:
        details["causes"] = causes
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}", details)


def invalid(res: ResourceType, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 with one cause per (field, message), worded as the API server words them."""
    text = "; ".join(f"{f}: {m}" for f, m in causes)
    if len(causes) > 1:
        text = "[" + ", ".join(f"{f}: {m}" for f, m in causes) + "]"
    details = _details(res, name)
    details["kind"] = res.kind
    details["causes"] = [
        {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes
    ]
    return ApiError(422, "Invalid", f'{res.kind} "{name}" is invalid: {text}', details)


def invalid_object(res: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 as ``NewInvalid`` words it for a kind of a named group (``PodDisruptionBudget.policy "x"
    is invalid: ...``); each cause is (field, reason such as ``FieldValueInvalid``, error body)."""
    texts = [f"{f}: {m}" for f, _, m in causes]
    text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    qualified = f"{res.kind}.{res.group}" if res.group else res.kind
    details = _details(res, name)
    details["kind"] = res.kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in causes]
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json; got {content_type!r}")
