"""How a failure a user can cause is told: one line, `error: <message>`, on stderr and its own exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable

from .. import errors
from ..data.reader import DataError
from ..models.spec import UnknownClass
from ..submission.files import SubmissionError
from ..training.checkpoints import CheckpointError


def guarded(command: Callable[[], int]) -> int:
    """Run `command` and return its exit code, or the code of the failure it raised (solution.errors); any other
    exception is a bug in the package and keeps its traceback."""
    try:
        return command()
    except SystemExit as stop:  # argparse and jsonargparse: --help, --print_config, bad arguments
        return errors.exit_status(stop)
    except KeyboardInterrupt:
        return errors.fail("interrupted; every output is whole or not written", errors.INTERRUPTED)
    except (DataError, SubmissionError, CheckpointError) as error:
        return errors.fail(error, errors.BAD_DATA)
    except (errors.SettingsError, UnknownClass, *lightning_usage_errors()) as error:
        return errors.fail(error, errors.USAGE)
    except errors.WriteError as error:
        return errors.fail(error, errors.WRITE_FAILED)
    except OSError as error:  # a named input that is missing or unreadable; the package's writes raise WriteError
        return errors.fail(error, errors.WRITE_FAILED if error.errno in errors.DISK_ERRNOS else errors.USAGE)


def lightning_usage_errors() -> tuple[type[Exception], ...]:
    """Lightning's settings error (MisconfigurationException), where Lightning is loaded: a command that never
    imports it cannot raise it, and need not pay for the import."""
    exceptions = sys.modules.get("lightning.fabric.utilities.exceptions")
    return (exceptions.MisconfigurationException,) if exceptions is not None else ()
