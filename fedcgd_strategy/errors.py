"""The project's marks of errors: a message that is one complete line, a stop of a run.

:class:`OneLineMessage`: a refused setting, a folder in use, a failed write, a decision that
breaks the budget, a stop by a signal: the message says what happened and what to do, so a
command prints it alone (no traceback) and a run's ``status.json`` records it without the class
name. :class:`StopsRun`: an end of a run that is not a failure (a SIGINT or SIGTERM). Nothing
here imports flwr or torch.
"""

from __future__ import annotations


class OneLineMessage:
    """Mix into an exception class whose message is one complete line for the user.

    ``isinstance(err, OneLineMessage)`` is how the commands, the ServerApp and
    ``status.json``'s writer tell such an error from a bug (whose traceback says where).
    """


class StopsRun:
    """Mix into an exception class that stops a run on purpose (a signal), not a failure.

    ``isinstance(err, StopsRun)`` is how a run's status tells such an end (``stopped``) from a
    failure (:func:`server_app.run_folder.signals.stops_the_run`).
    """


class RuleBrokenError(ValueError):
    """What the researcher's code gave the app breaks one of its rules; the message states it.

    A schedule of devices that are not candidates, a policy state a checkpoint cannot hold: a
    policy's call reports it in the rule's words, not as an exception its code raised.
    """
