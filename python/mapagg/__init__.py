"""mapagg: jobs in Python for a mapagg cluster, and a client of its HTTP API.

Standard library only. A job is one file with a ``mapper`` and a ``reducer`` (and, optionally,
a ``combiner``) that ends in ``mapagg.run()``; a worker registers it with
``worker run --program NAME='python3 /path/to/job.py'``. See README.md.
"""

from .streaming import run, params, task, escape, unescape, ProtocolError

# The HTTP client (urllib, ssl) is imported when first named: a program's processes, one a task,
# never pay for it.
_CLIENT_NAMES = ("Client", "APIError", "JobFailed")


def __getattr__(name):
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'mapagg' has no attribute {name!r}")


__all__ = ["run", "params", "task", "escape", "unescape", "ProtocolError", "Client", "APIError", "JobFailed"]
__version__ = "0.1.0"
