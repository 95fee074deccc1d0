"""Every call of the API as data: method, path, query, body, and the model
its answer is read into. The sync and async clients send these alike, so
the two cannot differ in what they ask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Type
from urllib.parse import quote

from pydantic import BaseModel

from . import models


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: Optional[Dict[str, Any]] = None
    json: Any = None
    #: The model the answer is read into; ``None`` answers the JSON as is.
    model: Optional[Type[BaseModel]] = None


@dataclass(frozen=True)
class Listing:
    """A list endpoint read page by page: ``items`` names the array of each
    page, ``model`` the type of one item."""

    path: str
    items: str
    model: Optional[Type[BaseModel]]
    params: Dict[str, Any]


def _id(value: str) -> str:
    return quote(str(value), safe="")


def _query(**params: Any) -> Dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _body(fields: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


# Tasks.
def submit_task(spec: Mapping[str, Any]) -> Call:
    return Call("POST", "/v1/tasks", json=_body(spec), model=models.TaskAccepted)


def get_task(task_id: str) -> Call:
    return Call("GET", f"/v1/tasks/{_id(task_id)}", model=models.TaskRecord)


def list_tasks(status: Optional[str], batch: Optional[str], page_size: Optional[int]) -> Listing:
    return Listing("/v1/tasks", "tasks", models.TaskRecord, _query(status=status, batch=batch, limit=page_size))


def cancel_task(task_id: str) -> Call:
    return Call("POST", f"/v1/tasks/{_id(task_id)}/cancel", model=models.Cancelled)


def answer_task(task_id: str, decision: str, message: Optional[str]) -> Call:
    body = _body({"decision": decision, "message": message})
    return Call("POST", f"/v1/tasks/{_id(task_id)}/input", json=body, model=models.InputAccepted)


def task_events_path(task_id: str) -> str:
    return f"/v1/tasks/{_id(task_id)}/events"


# Batches.
def submit_batch(tasks: List[Mapping[str, Any]], defaults: Optional[Mapping[str, Any]]) -> Call:
    body = _body({"tasks": [dict(t) for t in tasks], "defaults": dict(defaults) if defaults else None})
    return Call("POST", "/v1/batches", json=body, model=models.BatchAccepted)


def get_batch(batch_id: str) -> Call:
    return Call("GET", f"/v1/batches/{_id(batch_id)}", model=models.BatchView)


def cancel_batch(batch_id: str) -> Call:
    return Call("POST", f"/v1/batches/{_id(batch_id)}/cancel", model=models.BatchCancelled)


def batch_events_path(batch_id: str) -> str:
    return f"/v1/batches/{_id(batch_id)}/events"


# Schedules.
def create_schedule(fields: Mapping[str, Any]) -> Call:
    return Call("POST", "/v1/schedules", json=_body(fields), model=models.Schedule)


def list_schedules(page_size: Optional[int]) -> Listing:
    return Listing("/v1/schedules", "schedules", models.Schedule, _query(limit=page_size))


def get_schedule(schedule_id: str) -> Call:
    return Call("GET", f"/v1/schedules/{_id(schedule_id)}", model=models.Schedule)


def update_schedule(schedule_id: str, fields: Mapping[str, Any]) -> Call:
    return Call("PATCH", f"/v1/schedules/{_id(schedule_id)}", json=_body(fields), model=models.Schedule)


def delete_schedule(schedule_id: str) -> Call:
    return Call("DELETE", f"/v1/schedules/{_id(schedule_id)}")


# Usage.
def get_usage(start: Optional[str], end: Optional[str]) -> Call:
    return Call("GET", "/v1/usage", params=_query(**{"from": start, "to": end}), model=models.UsageReport)


# Webhooks.
def create_webhook(fields: Mapping[str, Any]) -> Call:
    return Call("POST", "/v1/webhooks", json=_body(fields), model=models.EndpointCreated)


def list_webhooks(page_size: Optional[int]) -> Listing:
    return Listing("/v1/webhooks", "webhooks", models.Endpoint, _query(limit=page_size))


def get_webhook(webhook_id: str) -> Call:
    return Call("GET", f"/v1/webhooks/{_id(webhook_id)}", model=models.Endpoint)


def update_webhook(webhook_id: str, fields: Mapping[str, Any]) -> Call:
    return Call("PATCH", f"/v1/webhooks/{_id(webhook_id)}", json=_body(fields), model=models.Endpoint)


def delete_webhook(webhook_id: str) -> Call:
    return Call("DELETE", f"/v1/webhooks/{_id(webhook_id)}")


def rotate_webhook_secret(webhook_id: str) -> Call:
    return Call("POST", f"/v1/webhooks/{_id(webhook_id)}/rotate-secret", model=models.SecretRotated)
