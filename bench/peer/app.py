"""The peer: what a user might otherwise pick — a small FastAPI service with the same
dispatch / state / events subset as StateServer, for the counter feature only, in memory.

Same paths and JSON shapes as the contract (docs/API.md):
    GET  /healthz
    POST /v1/sessions                              -> 201 {"id", "token"}
    GET  /v1/sessions/{id}/state/{feature}         -> {"feature", "version", "state"} + ETag
    POST /v1/sessions/{id}/dispatch                -> {"feature", "version", "state", "effect"}
    GET  /v1/sessions/{id}/events                  -> SSE: snapshot, then one "state" per change

Written the way the FastAPI documentation suggests (pydantic request model, dependency for
auth, sse-starlette's EventSourceResponse), not golfed for speed.

Run (bench/run.sh does): uvicorn app:app --app-dir bench/peer --port P --workers 1
    --no-access-log --log-level warning
One worker on purpose: sessions live in this process's memory, and with N workers a session
created on one worker would be unknown to the others (a real deployment would need Redis or
similar, which would make it slower still). uvicorn[standard] gives it uvloop and httptools,
the fastest stock setup.
"""

import asyncio
import json
import secrets
from typing import Any, Optional

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from sse_starlette.sse import EventSourceResponse

app = FastAPI()

FEATURE = "counter"
INT_MAX = 2**63 - 1


class Session:
    __slots__ = ("id", "token", "version", "count", "seq", "subscribers")

    def __init__(self):
        self.id = secrets.token_urlsafe(16)
        self.token = secrets.token_urlsafe(32)
        self.version = 0
        self.count = 0
        self.seq = 0
        self.subscribers: set[asyncio.Queue] = set()


sessions: dict[str, Session] = {}


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


class APIError(Exception):
    def __init__(self, status, code, message):
        self.status, self.code, self.message = status, code, message


@app.exception_handler(APIError)
async def api_error_handler(request: Request, exc: APIError):
    return error(exc.status, exc.code, exc.message)


def session_for(session_id: str, authorization: Optional[str] = Header(default=None)) -> Session:
    if not authorization or not authorization.startswith("Bearer "):
        raise APIError(401, "unauthorized", "a bearer token is required")
    s = sessions.get(session_id)
    if s is None or not secrets.compare_digest(s.token, authorization[7:]):
        raise APIError(404, "session_not_found", "there is no such session")
    return s


class Action(BaseModel):
    type: str
    by: int = 1
    value: Optional[int] = None


class DispatchBody(BaseModel):
    feature: str
    action: Action


@app.get("/healthz")
async def healthz():
    return {"status": "ok"}


@app.post("/v1/sessions", status_code=201)
async def create_session():
    s = Session()
    sessions[s.id] = s
    return JSONResponse({"id": s.id, "token": s.token}, status_code=201,
                        headers={"Location": f"/v1/sessions/{s.id}"})


@app.get("/v1/sessions/{session_id}/state/{feature}")
async def get_state(feature: str, s: Session = Depends(session_for)):
    if feature != FEATURE:
        raise APIError(404, "unknown_feature", f"there is no feature named {feature}")
    return JSONResponse({"feature": FEATURE, "version": s.version, "state": {"count": s.count}},
                        headers={"ETag": f'"{s.version}"'})


@app.post("/v1/sessions/{session_id}/dispatch")
async def dispatch(request: Request, s: Session = Depends(session_for)):
    # The contract parses the body as JSON whatever its Content-Type says, so the body is
    # validated here rather than by a `body: DispatchBody` parameter (which wants the header).
    try:
        body = DispatchBody.model_validate_json(await request.body())
    except ValidationError as e:
        raise APIError(400, "invalid_request", str(e).splitlines()[0])
    if body.feature != FEATURE:
        raise APIError(404, "unknown_feature", f"there is no feature named {body.feature}")
    a = body.action
    if a.type == "increment":
        new = s.count + a.by
    elif a.type == "decrement":
        new = s.count - a.by
    elif a.type == "set" and a.value is not None:
        new = a.value
    else:
        raise APIError(422, "invalid_action", f"unknown or incomplete action {a.type}")
    if not -INT_MAX - 1 <= new <= INT_MAX:
        raise APIError(422, "action_rejected", "the counter would overflow")
    s.count = new
    s.version += 1
    s.seq += 1
    state = {"count": s.count}
    event = {"id": str(s.seq), "event": "state", "data": dumps({
        "feature": FEATURE, "version": s.version, "cause": "dispatch",
        "action": a.model_dump(exclude_none=True), "state": state, "effect": None})}
    for q in s.subscribers:
        q.put_nowait(event)
    return JSONResponse({"feature": FEATURE, "version": s.version, "state": state, "effect": None},
                        headers={"ETag": f'"{s.version}"'})


@app.get("/v1/sessions/{session_id}/events")
async def events(request: Request, session_id: str, access_token: Optional[str] = None,
                 authorization: Optional[str] = Header(default=None)):
    if access_token and not authorization:
        authorization = f"Bearer {access_token}"
    s = session_for(session_id, authorization)
    q: asyncio.Queue = asyncio.Queue()
    s.subscribers.add(q)
    snapshot = {"id": str(s.seq), "event": "snapshot", "data": dumps(
        {"features": {FEATURE: {"version": s.version, "state": {"count": s.count}}}})}

    async def stream():
        try:
            yield snapshot
            while True:
                yield await q.get()
        finally:
            s.subscribers.discard(q)

    return EventSourceResponse(stream(), ping=15)
