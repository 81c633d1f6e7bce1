"""The project's mark of an error whose message is one complete line for the user.

A refused setting, a folder in use, a failed write, a decision that breaks the budget, a stop
by a signal: the message says what happened and what to do, so a command prints it alone (no
traceback) and a run's ``status.json`` records it without the class name. Nothing here imports
flwr or torch.
"""

from __future__ import annotations


class OneLineMessage:
    """Mix into an exception class whose message is one complete line for the user.

    ``isinstance(err, OneLineMessage)`` is how the commands, the ServerApp and
    ``status.json``'s writer tell such an error from a bug (whose traceback says where).
    """
