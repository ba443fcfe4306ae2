"""How many expensive reads (searches, exports) one process runs at once: `Admissions.from_settings`.

`with admissions.searches.enter(): ...` runs the read, or raises `Busy` at once, naming the setting
and when to try again: a refused reader never waits for a connection it would take from others.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import Settings

__all__ = ["Admission", "Admissions", "Busy"]


class Busy(Exception):
    """A read refused because `Admission.most` of its kind run already: its message names the setting."""

    def __init__(self, message: str, code: str, most: int, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.most = most
        self.retry_after = retry_after  # whole seconds, as `Retry-After` says them


class Admission:
    """At most `most` reads of one kind at once; the next one is refused, never queued."""

    def __init__(self, most: int, what: str, setting: str, code: str, retry_after: int) -> None:
        self.most = most
        self.what = what
        self.setting = setting
        self.code = code
        self.retry_after = retry_after
        self.running = 0

    def enter(self) -> _Running:
        """Count one read in, to be used at once as `with admission.enter():`; raises `Busy` when full."""
        if self.running >= self.most:
            raise Busy(
                f"{self.running} {self.what} are running in this process, the most it runs at once "
                f"({self.setting}={self.most}); try again in {self.retry_after} s",
                self.code,
                self.most,
                self.retry_after,
            )
        self.running += 1
        return _Running(self)


class _Running:
    """One read counted in by `Admission.enter`, counted out when its `with` block ends."""

    __slots__ = ("admission",)

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        self.admission.running -= 1


@dataclass(frozen=True)
class Admissions:
    """The process's admissions, one per kind of expensive read."""

    searches: Admission
    exports: Admission

    @classmethod
    def from_settings(cls, settings: Settings) -> Admissions:
        # Half the readers' pool each at most (its overflow as many again), so that pages,
        # tails and long polls always find connections.
        share = 1_000_000 if settings.is_embedded else max(1, settings.pool_size // 2)
        return cls(
            searches=Admission(
                min(settings.max_searches, share),
                "searches",
                "RUNLOG_MAX_SEARCHES",
                "TOO_MANY_SEARCHES",
                # A search page ends by RUNLOG_READ_TIMEOUT at the latest; most end in well under a second.
                retry_after=1,
            ),
            exports=Admission(
                min(settings.max_exports, share),
                "exports",
                "RUNLOG_MAX_EXPORTS",
                "TOO_MANY_EXPORTS",
                retry_after=5,  # an export lasts as long as its client reads
            ),
        )
