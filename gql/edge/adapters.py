"""The request and the websocket as the view reads them: Strawberry's adapters, adjusted."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from cross_web import HTTPException, StarletteRequestAdapter
from starlette.websockets import WebSocketDisconnect, WebSocketState
from starlette.websockets import WebSocketDisconnected as StarletteWebSocketDisconnected

# A documented module: Strawberry's "Adding an integration" imports from it.
from strawberry.http.exceptions import NonJsonMessageReceived, NonTextMessageReceived, WebSocketDisconnected

from ..compat.strawberry import WebSocketAdapterBase
from .answers import json_content_type


class RequestAdapter(StarletteRequestAdapter):
    @property
    def content_type(self) -> str | None:
        # What RunLogGraphQL.run accepted, spelled as Strawberry compares it (case-sensitively).
        header = super().content_type
        return "application/json" if json_content_type(header) is None else header


class WebSocketAdapter(WebSocketAdapterBase):
    """Strawberry's websocket adapter, sending text frames and closing (4400) on a message not a JSON object.

    Text, since browsers hand binary frames over as a Blob the `graphql-ws` client cannot parse.
    """

    async def iter_json(self, *, ignore_parsing_errors: bool = False) -> AsyncGenerator[object, None]:
        messages = super().iter_json()  # never skipping what does not parse: see above
        try:
            async for message in messages:
                if not isinstance(message, dict):
                    raise NonJsonMessageReceived()
                yield message
        except (NonJsonMessageReceived, HTTPException):  # HTTPException: decode_json's refusals of a body
            await self.close(code=4400, reason="WebSocket message must be a JSON object")
        except NonTextMessageReceived:
            await self.close(code=4400, reason="WebSocket message type must be text")
        finally:
            await messages.aclose()

    async def send_json(self, message: Any) -> None:
        encoded = self.view.encode_json(message)
        try:
            await self.ws.send_text(encoded.decode() if isinstance(encoded, bytes) else encoded)
        except (WebSocketDisconnect, StarletteWebSocketDisconnected) as exc:
            # Gone, or closed by this side: Strawberry's handlers take this as the client having left.
            raise WebSocketDisconnected from exc

    async def close(self, code: int, reason: str) -> None:
        # Starlette would raise on a second close.
        if self.ws.application_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(WebSocketDisconnect, StarletteWebSocketDisconnected):
                await self.ws.close(code=code, reason=reason)
