"""Write files atomically: a temporary file in the same folder, renamed over the target when complete."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success rename it onto `path`, on error delete it."""
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(error, OSError) and error.errno in REASONS:  # disk full, permission denied, ...
            raise OSError(error.errno, f"cannot write {path}: {REASONS[error.errno]} ({error.strerror}); "
                          f"{'the old file is unchanged' if path.exists() else 'nothing was written'}") from error
        raise


REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
