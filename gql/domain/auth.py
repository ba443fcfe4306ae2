"""Who the caller is, and what they may do: `Policy.from_settings(s).identify(header)`, then `allows`.

Reader, writer, admin (everything). Reads or writes with no token configured are open; admin never is.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from ..settings import Settings


class Role(enum.Enum):
    READER = "reader"
    WRITER = "writer"
    ADMIN = "admin"


class Action(enum.Enum):
    READ = "read"
    WRITE = "write"
    ADMINISTER = "administer"


@dataclass(frozen=True)
class Caller:
    """The roles a request's bearer token grants, and whether it sent one at all."""

    roles: frozenset[Role]
    authenticated: bool


@dataclass(frozen=True)
class Policy:
    tokens: Mapping[Role, tuple[bytes, ...]]

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        given = {
            Role.READER: settings.reader_tokens,
            Role.WRITER: settings.writer_tokens,
            Role.ADMIN: settings.admin_tokens,
        }
        return cls(tokens={role: tuple(map(_digest, tokens)) for role, tokens in given.items()})

    @property
    def open_reads(self) -> bool:
        return not self.tokens[Role.READER]

    @property
    def open_writes(self) -> bool:
        return not self.tokens[Role.WRITER]

    def identify(self, authorization: str | None) -> Caller:
        """Map an `Authorization` header to the roles its token grants."""
        token = _bearer(authorization)
        if token is None:
            return Caller(roles=frozenset(), authenticated=False)
        given = _digest(token)
        roles = set()
        for role, tokens in self.tokens.items():
            # Every token compared (no `any`), so the time taken says nothing of which matched.
            if [expected for expected in tokens if hmac.compare_digest(given, expected)]:
                roles.add(role)
        return Caller(roles=frozenset(roles), authenticated=bool(roles))

    def allows(self, caller: Caller, action: Action) -> bool:
        if Role.ADMIN in caller.roles:
            return True
        if action is Action.READ:
            return self.open_reads or Role.READER in caller.roles
        if action is Action.WRITE:
            return self.open_writes or Role.WRITER in caller.roles
        return False


def _digest(token: str) -> bytes:
    # Digests of one length: compare_digest may return early on lengths that differ.
    return hashlib.sha256(token.encode()).digest()


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
