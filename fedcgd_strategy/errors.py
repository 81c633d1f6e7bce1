"""The project's marks of errors: a message that is one complete line, a broken rule."""

from __future__ import annotations


class OneLineMessage:
    """Mix into an exception whose message is one complete line for the user (no traceback)."""


class RuleBrokenError(ValueError):
    """What the researcher's code gave breaks one of the app's rules; the message states it."""
