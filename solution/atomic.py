"""Write files atomically: temporary files in the same folder, renamed over their targets when all are complete."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Iterator

from .errors import WriteError


@contextlib.contextmanager
def atomic_files(paths: Sequence[str | Path], mode: str = "w", **open_kwargs) -> Iterator[list[IO]]:
    """Open a temporary sibling of each path for writing; on success rename them onto their paths together (both
    or neither: a rename that fails puts back the files renamed before it), on error delete them."""
    paths, temps, handles = [Path(p) for p in paths], [], []
    try:
        with contextlib.ExitStack() as stack:
            for path in paths:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
                temps.append(tmp)
                os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
                handles.append(stack.enter_context(os.fdopen(fd, mode, **open_kwargs)))
            yield handles
            for handle in handles:
                handle.flush()
                os.fsync(handle.fileno())
        _replace_together(temps, paths)
    except BaseException as error:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(error, OSError) and not isinstance(error, WriteError) and error.errno in REASONS:
            old = "the old files are unchanged" if len(paths) > 1 else "the old file is unchanged"
            raise WriteError(error.errno, f"cannot write {' and '.join(map(str, paths))}: {REASONS[error.errno]} "
                             f"({error.strerror}); {old if all(p.exists() for p in paths) else 'nothing was written'}"
                             ) from error
        raise


def atomic_write(path: str | Path, mode: str = "w", **open_kwargs) -> contextlib.AbstractContextManager[IO]:
    """Open a temporary sibling of `path` for writing; on success rename it onto `path`, on error delete it."""
    return _single(atomic_files([path], mode, **open_kwargs))


@contextlib.contextmanager
def _single(files: contextlib.AbstractContextManager[list[IO]]) -> Iterator[IO]:
    with files as (handle,):
        yield handle


def _replace_together(temps: list[str], paths: list[Path]) -> None:
    """Rename each temporary onto its path; where one fails, undo those done (the old files come back)."""
    backups: list[str] = []
    done: list[tuple[str | None, Path]] = []  # (backup of the old file or None, path), for each rename made
    try:
        for tmp, path in zip(temps, paths):
            backup = None
            if len(paths) > 1 and path.exists():
                backup = f"{tmp}.old"
                os.link(path, backup)
                backups.append(backup)
            os.replace(tmp, path)
            done.append((backup, path))
    except BaseException:
        for backup, path in done:
            if backup is None:
                os.unlink(path)
            else:
                os.replace(backup, path)
        raise
    finally:
        for backup in backups:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(backup)


REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.ENOTDIR: "a folder on its path is a regular file",
    errno.EEXIST: "a folder on its path is a regular file",
}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
