"""What a resolver is given (`Context`), and the error a caller can act on (`ClientError`)."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..domain import retention, tail, writes
from ..domain.admission import Admissions
from ..domain.auth import Action, Caller, Policy
from ..settings import Settings
from ..store.replica import Replica
from . import subscriptions
from .limits import DetailBudget


class ClientError(GraphQLError):
    """An error the caller can act on; its message is shown as it is, never masked."""

    def __init__(self, message: str, code: str, **extensions: Any) -> None:
        super().__init__(message, extensions={"code": code, **extensions})


@dataclass
class Context:
    engine: AsyncEngine
    settings: Settings
    writer: writes.Writer  # the app's: its write queue and what it knows of the detail column
    policy: Policy
    caller: Caller
    request_id: str
    # The websocket, on one; None over HTTP, so a reference cycle cannot keep the body alive.
    request: Any = None
    sweeper: retention.Sweeper | None = None  # None when retention is off
    arrived: float | None = None  # the event loop's time when the request (or operation) came
    detail_budget: DetailBudget | None = None  # made by the first page that reads details
    watcher: tail.Watcher | None = None  # the app's; None outside it (no long poll, no tail)
    # On a websocket, one context serves the connection's every operation.
    tails: subscriptions.Tails | None = None
    connection: subscriptions.Connection | None = None
    connection_params: dict[str, Any] | None = None
    replica: Replica | None = None  # the read replica, when RUNLOG_READ_DATABASE_URL is set
    # An entry for each writeRunLog field that answered false (not_stored.note).
    not_stored: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    admissions: Admissions | None = None  # the app's; None: searches are not counted (an export's pages)

    def for_operation(self) -> Context:
        """A context for one operation sent over this websocket: its own arrival, page budget and writes."""
        return dataclasses.replace(
            self, arrived=asyncio.get_running_loop().time(), detail_budget=None, not_stored=[]
        )

    def details_left(self) -> DetailBudget:
        """The request's detail budget, shared by all its pages."""
        if self.detail_budget is None:
            self.detail_budget = DetailBudget(self.settings.max_page_bytes)
        return self.detail_budget

    def require(self, action: Action, what: str) -> None:
        """Raise a refusal that says who the caller would have to be."""
        if self.policy.allows(self.caller, action):
            return
        who = _ROLE_WORDS[action]
        if not self.caller.authenticated:
            # A browser cannot set a websocket's headers: the token goes in connection_init.
            where = ' in the connection_init payload: {"Authorization": "Bearer <token>"}'
            raise ClientError(
                f"{what} is refused: the caller is not {who} "
                f"(send `Authorization: Bearer <token>` with {who}'s token"
                f"{where if self.connection is not None else ''})",
                "UNAUTHENTICATED",
            )
        raise ClientError(f"{what} is refused: the caller is not {who}", "FORBIDDEN")


_ROLE_WORDS = {
    Action.READ: "a reader",
    Action.WRITE: "a writer",
    Action.ADMINISTER: "an admin",
}
