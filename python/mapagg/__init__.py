"""mapagg: jobs in Python for a mapagg cluster, and a client of its HTTP API.

Standard library only. A job is one file with a ``mapper`` and a ``reducer`` (and, optionally,
a ``combiner``) that ends in ``mapagg.run()``; a worker registers it with
``worker run --program NAME='python3 /path/to/job.py'``. See README.md.
"""

from .streaming import run, params, task, escape, unescape, ProtocolError
from .client import Client, APIError, JobFailed

__all__ = ["run", "params", "task", "escape", "unescape", "ProtocolError", "Client", "APIError", "JobFailed"]
__version__ = "0.1.0"
