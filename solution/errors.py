"""The exit codes of every `solution` command, one per kind of failure, and how a failure is told on stderr."""

from __future__ import annotations

import errno
import sys

OK = 0
UNEXPECTED = 1  # anything else: a bug (Python's own code for an uncaught exception, traceback shown), failed sweep runs
USAGE = 2  # bad command-line arguments or settings: argparse's and jsonargparse's own code
BAD_DATA = 3  # a data file (DataError) or a submission that fails its checks
WRITE_FAILED = 4  # an output that cannot be written: a read-only folder, a path under a regular file, a full disk
INTERRUPTED = 130  # stopped by Ctrl-C (the shell's code for SIGINT); outputs are whole or not written

DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}  # an OSError with one of these is a failed write


class SettingsError(ValueError):
    """A setting that cannot be used (an option, a YAML file, a value that contradicts a checkpoint): USAGE."""


class WriteError(OSError):
    """An output that cannot be written (its message names the file and why): WRITE_FAILED."""

    def __str__(self) -> str:
        return str(self.strerror)


def fail(message: object, code: int) -> int:
    """Print `error: <message>` on stderr and return `code`."""
    print(f"error: {message}", file=sys.stderr)
    return code


def exit_status(stop: SystemExit) -> int:
    """The code of a SystemExit: an argument parser's (its message already on stderr), or USAGE for one that
    carries a message in place of a code."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or OK
    return fail(stop.code, USAGE)
