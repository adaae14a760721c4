"""Errors that point at the offending input: file, line and field."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """Bad input from the user (data, config, paths): the stages print the message as one line, without a traceback."""


class DataError(UserError, ValueError):
    """Bad input data. The message always names where: ``file:line: field: problem``."""

    def __init__(self, problem: str, *, file: str | Path | None = None, line: int | None = None,
                 field: str | None = None):
        self.problem = problem
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        where = []
        if self.file is not None:
            where.append(self.file + (f":{line}" if line is not None else ""))
        elif line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__((": ".join(where) + ": " if where else "") + problem)


class UnknownDatasetError(UserError, LookupError):
    """A dataset name that resolves to nothing; the message lists what exists."""


class ConfigError(UserError, ValueError):
    """A config value that cannot work; the message names the key (``attribution.ifr_multi_hop.hops``) and why."""


class ExampleRefused(UserError, ValueError):
    """The example (or the whole dataset) cannot be scored as configured; the message says why."""
