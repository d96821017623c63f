"""One writer per output folder: an exclusive lock file in the folder, naming its holder.

Every job that writes a folder (ingest, features, diff, rerun) and every ProductionLogger takes
the folder's lock before it touches anything there, and removes it when it is done. The lock
file (LOCK_FILE) is created whole and exclusively (a temp file hard-linked to its name: the link
fails while a lock is there), so of two writers started together exactly one gets it, and no
reader sees it empty; it holds {host, pid, process_start, started} as JSON. A take-over removes
a dead holder's lock under an exclusive flock of the folder, so of several writers that judged
it dead one removes it and the others then find the winner's. A second writer is refused
with one line naming the holder (UsageError, exit 2). A lock whose process is gone -- on this
host, no process with its pid, or one that started after the lock was taken (a pid reused) --
is taken over: only then may the new writer remove the dead run's temp files. A lock taken on
another host cannot be checked from here and is never taken over; its message says to remove
the file once that job is known to be gone. Local folders only: an object store (gs://, s3://)
has no exclusive create, so a job writing there takes no lock (docs/operating.md).

`started` is wall-clock time, for a reader of the message; it is never part of an output.
"""
import datetime
import errno
import fcntl
import json
import os
import socket

from transforms.spec.errors import UsageError

__all__ = ["LOCK_FILE", "FolderLock", "lock_folder", "live_writer"]

LOCK_FILE = ".skewtrace-lock"


def _process_start(pid):
  """The start time of process `pid` in clock ticks since boot (Linux /proc), None where it
  cannot be read."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      stat = f.read()
  except OSError:
    return None
  # Field 22 (starttime), counted after the command name, which may hold spaces and ')'.
  return int(stat[stat.rindex(b")") + 2:].split()[19])


def _alive(holder):
  """Whether the process a lock on this host names still runs (the same process, not a
  reused pid)."""
  pid = holder.get("pid")
  if not isinstance(pid, int) or pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process: it exists
    pass
  start = _process_start(pid)
  return start is None or holder.get("process_start") in (None, start)


def _describe(holder, path):
  return (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')} "
          f"(lock {path})")


class FolderLock:
  """The lock of one folder, held until release() (or the end of a with block)."""

  def __init__(self, folder, what):
    self.path = os.path.join(folder, LOCK_FILE)
    self.taken_over = None  # the dead holder whose lock this one replaced, if any
    me = {"host": socket.gethostname(), "pid": os.getpid(),
          "process_start": _process_start(os.getpid()),
          "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    data = json.dumps(me, sort_keys=True).encode("utf-8")
    for _ in range(5):  # a take-over race ends with one holder
      try:
        self._publish(data)
      except FileExistsError:
        holder = self._holder()
        if holder is None:  # released (or unreadable) between the two calls: try again
          continue
        if holder.get("host") != me["host"]:
          raise UsageError(f"{folder} is being written by {what} {_describe(holder, self.path)};"
                           " remove the lock file once that job is known to be gone") from None
        if _alive(holder):
          raise UsageError(f"{folder} is being written by {what} "
                           f"{_describe(holder, self.path)}; wait for it or use another "
                           "folder") from None
        if self._remove_dead(folder, holder):
          self.taken_over = holder
        continue
      self._mine = data
      return
    raise UsageError(f"{folder}: cannot take its lock {self.path} (another writer keeps "
                     "taking it)")

  def _publish(self, data):
    """Creates the lock file whole (its content in place before its name appears, so no
    reader sees it empty): a temp file linked to the lock's name, which fails with
    FileExistsError while another lock is there."""
    tmp = f"{self.path}.{os.getpid()}.{id(self)}.tmp"
    try:
      with open(tmp, "wb") as f:
        f.write(data)
      os.link(tmp, self.path)
    finally:  # a full disk or a refused write leaves no temp file either
      try:
        os.remove(tmp)
      except FileNotFoundError:
        pass

  def _remove_dead(self, folder, judged):
    """Removes the lock of the dead holder `judged`, under an exclusive flock of the folder that
    every take-over takes: of several writers that judged it dead, the first removes it and the
    others find another lock (a live one) when they look again. False if it changed meanwhile."""
    fd = os.open(folder, os.O_RDONLY)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX)
      if self._holder() != judged:
        return False
      os.remove(self.path)
      return True
    finally:
      os.close(fd)  # releases the flock

  def _holder(self):
    try:
      with open(self.path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
      return None
    except (OSError, ValueError):
      return {"pid": None, "host": None, "started": None}  # unreadable: held by someone

  def release(self):
    """Removes the lock file if it is still this writer's."""
    try:
      with open(self.path, "rb") as f:
        if f.read() != self._mine:
          return
      os.remove(self.path)
    except FileNotFoundError:
      pass

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.release()


def lock_folder(folder, what):
  """The FolderLock of a local `folder` (created if missing), or None for an object store's."""
  if "://" in folder:
    return None
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:
    raise UsageError(f"{folder}: cannot create the folder ({e.strerror})") from None
  try:
    return FolderLock(folder, what)
  except OSError as e:  # a read-only file system, a folder this process may not write
    if e.errno in (errno.ENOSPC, errno.EDQUOT):  # the words every job's full disk gets
      raise UsageError(f"no space left on the device holding {folder} ({e.strerror}); "
                       "nothing was published: free space there or write to another "
                       "folder") from None
    raise UsageError(f"{folder}: cannot write there ({e.strerror or e})") from None


def live_writer(folder):
  """Who is writing `folder` now, in a few words (None: no lock, or its process is gone): what
  verify says of a folder being written instead of judging files a live writer is changing.
  A lock taken on another host counts as live (it cannot be checked from here)."""
  if "://" in folder:
    return None
  path = os.path.join(folder, LOCK_FILE)
  try:
    with open(path, "rb") as f:
      holder = json.loads(f.read().decode("utf-8"))
  except FileNotFoundError:
    return None
  except (OSError, ValueError):
    holder = {}
  if holder.get("host") == socket.gethostname() and not _alive(holder):
    return None
  return _describe(holder, path)
