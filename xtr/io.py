"""Every file xtr reads or writes: one module, used by every stage (it imports nothing of xtr).

- Files inside a directory that xtr owns (an index, a model dir), handled as untrusted names.
  Whoever hands xtr a directory controls every name in it: a symlink, FIFO or device where xtr
  keeps its own file must neither redirect a write outside the directory nor hang or redirect a
  read. So files are created with O_CREAT | O_EXCL | O_NOFOLLOW (`create`, `atomic_write`, the
  one writer of owned files), read with O_NOFOLLOW and checked to be regular files
  (`open_regular`), relative paths are resolved only through real directories inside the
  directory (`inside`), and a name that is not a plain file of the directory is refused with
  `UnsafeFileError`; `Lock` keeps a second writer out.
- A user's output paths (`atomic_open`, `write_results`): replaced atomically when regular files,
  written through when they are pipes or /dev/stdout.
- JSON (`write_json`), sha256 (`sha256`, `digest`), and files by path, local or gs://
  (`open_binary`, `read_bytes`, `exists`): a local one must be a regular file (symlinks
  followed, as in a Hugging Face cache): a FIFO or device is refused, never read.

A failed write (a full disk) names the file (`write_error`).
"""
from collections.abc import Callable
from collections.abc import Iterator
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
from typing import Any
from typing import BinaryIO
from typing import TextIO

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a FIFO never hangs


class UnsafeFileError(OSError):
  """A name inside a directory that xtr owns is not the plain file or directory xtr keeps there."""


class LockedError(OSError):
  """Another process holds the lock of a directory."""


def _kind(mode: int) -> str:
  kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
           (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
           (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
  return next((name for test, name in kinds if test(mode)), "not a regular file")


def _unsafe(path: str, mode: int) -> UnsafeFileError:
  return UnsafeFileError(f"{path} is {_kind(mode)}, not a file that xtr wrote: xtr never follows "
                         "or replaces such names inside a directory it owns; remove it and rerun.")


def _refuse_unless(path: str, is_kind: Callable[[int], bool]) -> bool:
  """Whether `path` exists (without following it); raises UnsafeFileError unless it is_kind."""
  try:
    mode = os.lstat(path).st_mode
  except FileNotFoundError:
    return False
  if not is_kind(mode):
    raise _unsafe(path, mode)
  return True


def regular_size(path: str) -> int:
  """The size of the regular file `path`; UnsafeFileError if it is anything else (a symlink
  included), FileNotFoundError if it is missing."""
  st = os.lstat(path)
  if not stat.S_ISREG(st.st_mode):
    raise _unsafe(path, st.st_mode)
  return st.st_size


def open_regular(path: str) -> BinaryIO:
  """`path` opened for reading, without following a symlink and only if it is a regular file
  (a FIFO or device is refused, never read)."""
  fd = _open_file(path, _READ)
  os.set_blocking(fd, True)
  return os.fdopen(fd, "rb")


def _open_file(path: str, flags: int) -> int:
  """The descriptor of `path` opened with `flags` (O_NOFOLLOW among them), if it is a regular
  file; UnsafeFileError if it is anything else."""
  try:
    fd = os.open(path, flags, 0o644)
  except OSError as e:
    if e.errno == errno.ELOOP:
      raise _unsafe(path, stat.S_IFLNK) from None
    raise
  mode = os.fstat(fd).st_mode
  if not stat.S_ISREG(mode):
    os.close(fd)
    raise _unsafe(path, mode)
  return fd


def inside(root: str, relative: str) -> str:
  """root/relative, for a relative path read from a file of `root`: refused (UnsafeFileError)
  if it is absolute or remote, leaves `root`, or passes through a symlink."""
  parts = relative.split("/")
  if os.path.isabs(relative) or "://" in relative or any(p in ("", ".", "..") for p in parts):
    raise UnsafeFileError(f"{relative!r} (recorded in {root}) is not a relative path inside it.")
  parent = os.path.join(root, *parts[:-1])
  if os.path.realpath(parent) != os.path.join(os.path.realpath(root), *parts[:-1]):
    raise UnsafeFileError(f"{os.path.join(root, relative)} passes through a symbolic link: xtr "
                          "never follows links inside a directory it owns; remove it and rerun.")
  path = os.path.join(parent, parts[-1])
  if os.path.islink(path):
    raise _unsafe(path, stat.S_IFLNK)
  return path


def make_dir(path: str) -> None:
  """Creates the directory `path` (its parent must exist) unless it is one already; refuses a
  symlink or file there."""
  try:
    os.mkdir(path)
  except FileExistsError:
    _refuse_unless(path, stat.S_ISDIR)


def remove_stale(path: str) -> None:
  """Removes a temporary left at `path` by a killed run: a regular file, or a directory tree
  (not followed); refuses anything else."""
  mode = os.lstat(path).st_mode if os.path.lexists(path) else None
  if mode is None:
    return
  if stat.S_ISDIR(mode):
    shutil.rmtree(path)  # Never follows symlinks inside.
  elif stat.S_ISREG(mode):
    os.remove(path)
  else:
    raise _unsafe(path, mode)


def create(path: str) -> BinaryIO:
  """A new regular file at `path`, opened for writing; never follows or reuses a name there."""
  return os.fdopen(os.open(path, _CREATE, 0o644), "wb")


def write_error(path: str, error: BaseException) -> OSError:
  """An OSError whose message names `path`, for `error` raised while writing it, and says what to
  do when the disk is full: ENOSPC or EDQUOT, TensorFlow's "No space left on device", or a native
  writer's error (ScaNN reports a full disk as "RuntimeError: ... I/O error") with less than
  1 MiB left where `path` is."""
  code = getattr(error, "errno", None)
  full = code in (errno.ENOSPC, errno.EDQUOT) or os.strerror(errno.ENOSPC) in str(error)
  if not full and not isinstance(error, OSError):
    with contextlib.suppress(OSError):
      full = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < 2**20
  hint = "; free space (or write elsewhere) and rerun" if full else ""
  named = OSError(f"cannot write {path}: {getattr(error, 'strerror', None) or error}{hint}")
  named.errno = code
  return named


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
  """Turns an OSError of writing `path` that names no file (ENOSPC, EIO, ...) into one whose
  message names `path` (`write_error`)."""
  try:
    yield
  except OSError as e:
    if e.filename is not None or isinstance(e, UnsafeFileError):
      raise
    raise write_error(path, e) from e


def atomic_write(path: str, write: Callable[[BinaryIO], None], unique: bool = False) -> None:
  """Writes `path` through a temporary in its directory and a rename: `path` is either as
  before or complete. The temporary is `path.tmp` (a stale one, left by a killed run, is
  removed), or with `unique` a fresh name (for writers that may run at once); `path` itself must
  be absent or a regular file."""
  _refuse_unless(path, stat.S_ISREG)
  if unique:  # mkstemp: O_CREAT | O_EXCL | O_NOFOLLOW under a random name.
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=directory or ".")
    file = os.fdopen(fd, "wb")
  else:
    tmp = path + ".tmp"
    remove_stale(tmp)
    file = create(tmp)
  try:
    with naming(path):
      with file:
        write(file)
      os.replace(tmp, path)
  except BaseException:
    os.remove(tmp)
    raise


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator[TextIO | BinaryIO]:
  """A user's output file ("w": UTF-8 text, "wb": binary) that replaces `path` when the block
  ends; if the block raises, `path` is untouched and the temporary file is removed. The
  temporary file (`path.tmp-PID`) is created anew (O_EXCL | O_NOFOLLOW): a file or symlink
  planted at its name is refused, never written through.

  A path that is not a regular file (a pipe, a terminal, /dev/null) or that names a file
  descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N) is written in place instead: never
  replaced, nor removed if the block raises; "-" is stdout. (Files inside an index or model
  dir, which xtr owns, go through `atomic_write`, which refuses such paths.)

  Raises:
    OSError: naming `path` (`write_error`), e.g. on a full disk.
  """
  path = os.fspath(path)
  if path == "-":
    yield sys.stdout.buffer if "b" in mode else sys.stdout
    sys.stdout.flush()
    return
  encoding = None if "b" in mode else "utf-8"
  with naming(path):
    if _written_in_place(path):
      with open(path, mode, encoding=encoding) as f:
        yield f
      return
    temp_path = f"{path}.tmp-{os.getpid()}"
    fd = _create_temporary(temp_path)
    try:
      with os.fdopen(fd, mode, encoding=encoding) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())
      os.replace(temp_path, path)
    except BaseException:
      with contextlib.suppress(FileNotFoundError):
        os.remove(temp_path)
      raise


def _create_temporary(path: str) -> int:
  """A descriptor of the new file `path`, open for writing; refuses a file or symlink there."""
  try:
    return os.open(path, _CREATE, 0o666)
  except FileExistsError:
    raise FileExistsError(
        errno.EEXIST, "exists (left by an interrupted write, or planted): "
        "nothing was written; remove it and rerun", path) from None


def _written_in_place(path: str) -> bool:
  """Whether `path` exists and is not a regular file, or names a file descriptor (its directory
  is /dev or under /proc: /dev/stdout, /dev/fd/1, /proc/self/fd/1, whatever they are open to)."""
  try:
    regular = stat.S_ISREG(os.stat(path).st_mode)
  except FileNotFoundError:
    return False
  directory = os.path.realpath(os.path.dirname(os.path.abspath(path)))
  return not regular or directory == "/dev" or directory.startswith("/proc/")


def write_results(path: str, results: Any) -> None:
  """Writes `results` as indented JSON (NaN refused) to a user's output `path` (`atomic_open`)."""
  with atomic_open(path) as f:
    json.dump(results, f, indent=2, allow_nan=False)
    f.write("\n")


def write_json(path: str, value: Any, unique: bool = False) -> None:
  """Writes `value` as JSON to `path` inside a directory xtr owns (`atomic_write`)."""
  atomic_write(path, lambda f: f.write(json.dumps(value, indent=1, sort_keys=True).encode()),
               unique)


def sha256(path: str) -> str:
  """The sha256 of a file the user named (local or gs://, symlinks followed)."""
  with open_binary(path) as f:
    return digest(f)


def digest(f: BinaryIO) -> str:
  """The sha256 of what is left to read in `f`."""
  hasher = hashlib.sha256()
  for block in iter(lambda: f.read(1 << 24), b""):
    hasher.update(block)
  return hasher.hexdigest()


def link_or_copy(src: str, dst: str) -> None:
  """Places a hard link to (or, across file systems, a copy of) the regular file `src` at `dst`,
  through `dst.tmp` and a rename; `dst` must be absent or a regular file. A `dst` that already is
  a link to `src` (a resumed run's) is left as it is: renaming a second link of one file over it
  would do nothing and leave `dst.tmp` behind."""
  source = os.lstat(src)
  regular_size(src)
  if _refuse_unless(dst, stat.S_ISREG) and os.path.samestat(source, os.lstat(dst)):
    return
  tmp = dst + ".tmp"
  remove_stale(tmp)
  try:
    os.link(src, tmp, follow_symlinks=False)
  except OSError:
    with naming(dst), open_regular(src) as source, create(tmp) as copy:
      shutil.copyfileobj(source, copy)
  os.replace(tmp, dst)


def replace_dir(tmp: str, path: str) -> None:
  """Moves the directory `tmp` (written by this run) to `path`, removing the directory tree that
  was there (never followed); refuses a symlink or file at `path`."""
  if _refuse_unless(path, stat.S_ISDIR):
    shutil.rmtree(path)
  os.replace(tmp, path)


class Lock:
  """An exclusive flock on a lock file, held while the Lock (or its process) lives: the kernel
  drops it when the process dies, so a killed run never leaves it stuck. The file says who holds
  it (`note`); `release` removes it."""

  def __init__(self, path: str, note: str, busy: Callable[[str], str]):
    """Takes the lock at `path`; raises LockedError(busy(holder's note)) if another holds it."""
    self.path = path
    while True:
      self._file = self._open()
      try:
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        holder = self._file.read(200).decode(errors="replace").strip() or "unknown"
        self._file.close()
        raise LockedError(busy(holder)) from None
      if self._is_current():  # Not a file that its last holder removed while we opened it.
        break
      self._file.close()
    try:
      with naming(path):
        self._file.truncate(0)
        self._file.write(f"{note} by process {os.getpid()} on {socket.gethostname()}\n".encode())
        self._file.flush()
    except OSError:
      self.release()
      raise

  def _open(self) -> BinaryIO:
    fd = _open_file(self.path, _LOCK)
    if os.fstat(fd).st_nlink != 1:  # A hard link: truncating it would truncate another name's file.
      os.close(fd)
      raise UnsafeFileError(f"{self.path} is a hard link to another file, not a lock file that "
                            "xtr wrote: remove it and rerun.")
    return os.fdopen(fd, "r+b")

  def _is_current(self) -> bool:
    try:
      on_disk = os.lstat(self.path)
    except FileNotFoundError:
      return False
    held = os.fstat(self._file.fileno())
    return (on_disk.st_ino, on_disk.st_dev) == (held.st_ino, held.st_dev)

  def release(self) -> None:
    """Removes the lock file and drops the lock."""
    os.remove(self.path)
    self._file.close()

  def __enter__(self) -> "Lock":
    return self

  def __exit__(self, *exc) -> None:
    self.release()


def holder(path: str) -> str | None:
  """Who holds the lock at `path` (its note), or None if no process holds it."""
  try:
    file = open_regular(path)
  except (FileNotFoundError, UnsafeFileError):
    return None
  with file:
    try:
      fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
      return file.read(200).decode(errors="replace").strip() or "unknown"
    fcntl.flock(file, fcntl.LOCK_UN)
  return None


# Files by path, local or remote (gs://…): remote ones through TensorFlow's gfile, which is
# imported only for them, so that a search of local files never loads TensorFlow.


def _gfile():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.io.gfile


def is_remote(path: str) -> bool:
  """Whether `path` is a URL (gs://bucket/…) rather than a local file."""
  return "://" in str(path)


def open_binary(path: str) -> BinaryIO:
  """The file at `path` (remote, or a local regular file: symlinks followed), opened for reading
  bytes; UnsafeFileError for a FIFO, device or directory, which is never read (nor waited on)."""
  if is_remote(path):
    return _gfile().GFile(path, "rb")
  fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # Opening a FIFO would wait for a writer.
  mode = os.fstat(fd).st_mode
  if not stat.S_ISREG(mode):
    os.close(fd)
    raise UnsafeFileError(f"{path} is {_kind(mode)}, not a regular file: xtr reads model and "
                          "data files from regular files only.")
  os.set_blocking(fd, True)
  return os.fdopen(fd, "rb")


def read_bytes(path: str, max_bytes: int | None = None) -> bytes:
  """The bytes of the file at `path` (`open_binary`); a ValueError naming it if it holds more
  than `max_bytes`, of which no more are read."""
  with open_binary(path) as f:
    data = f.read() if max_bytes is None else f.read(max_bytes + 1)
  if max_bytes is not None and len(data) > max_bytes:
    raise ValueError(f"{path} holds more than {max_bytes:,} bytes: too large for its kind of file.")
  return data


def exists(path: str) -> bool:
  return _gfile().exists(path) if is_remote(path) else os.path.exists(path)
