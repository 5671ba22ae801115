"""Who may write the compile cache: only the user running the process (as ssh and pip require).

Compiled artifacts are code: Inductor loads ``.so`` files and unpickles its FX-graph and AOTAutograd
cache entries, so whoever can write a cache entry can run code as the next user of it. The rules:

- The cache root and every directory above it must be owned by this user (or root) and not writable by
  group or others; a world-writable ancestor is allowed only with the sticky bit (``/tmp``), where
  others cannot rename what is ours. A root that breaks this is refused (CacheTrustError) with the
  path, owner, mode and the fix: torch-fl does not fall back to another directory, because a silent
  fallback turns every start cold without anyone noticing and leaves the unsafe setting in place.
- Each entry directory must be owned by this user and not group/other-writable, and everything inside
  it must be owned by this user; an entry that is not is never loaded (cache.py moves it aside).
- The root is resolved once (symbolic links followed) and the resolved path is what Inductor gets: a
  link swapped after the check cannot redirect this process. A symbolic link on the way that another
  user owns is refused (they could swap it before the next process checks).
- What torch-fl creates is private whatever the umask: directories 0700, files 0600. Inductor and
  AOTAutograd write their files with the process umask, but inside the 0700 entry nobody else can reach
  them, and their modes are tightened when the entry's artifacts are recorded (cache.seal).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import CacheTrustError, CacheUnusableError

DIR_MODE = 0o700
FILE_MODE = 0o600


def _uid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1


def owner_text(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def describe(st: os.stat_result) -> str:
    """'owner nobody (uid 65534), mode 0777'."""
    return f"owner {owner_text(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}"


def problem(st: os.stat_result, *, ancestor: bool = False) -> str:
    """Why another user could change what `st` describes ('' when only this user can)."""
    uid = _uid()
    if uid < 0:  # no POSIX ownership (Windows): nothing to check
        return ""
    owners = (uid, 0) if ancestor else (uid,)
    if st.st_uid not in owners:
        return f"it belongs to {owner_text(st.st_uid)}, not to {owner_text(uid)} who runs this process"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (ancestor and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        who = "group and others" if writable == (stat.S_IWGRP | stat.S_IWOTH) else (
            "its group" if writable == stat.S_IWGRP else "others")
        return f"it is writable by {who}"
    return ""


def make_private_dirs(path: Path) -> None:
    """Create `path` and missing parents as 0700 directories, whatever the umask."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # another process made it: the ownership check decides whether it is usable
        os.chmod(directory, DIR_MODE)


def require_private_root(root: Path, source: str) -> Path:
    """Create `root` (0700) when missing, then refuse it unless only this user can write it and the
    directories above it. `source` says where the path came from (FL_CACHE_DIR, a description).
    Returns the resolved root: the path every later use (Inductor's included) must take, so that what
    was checked is what is used."""
    broad = broad_root(root)
    if broad:
        raise CacheTrustError(root_refusal(root, source))
    require_directory(root, source)
    try:
        make_private_dirs(root)
    except OSError as exc:
        raise unusable(root, exc, source, "creating it") from None
    refusal = root_refusal(root, source)
    if refusal:
        raise CacheTrustError(refusal)
    return Path(os.path.realpath(root))


def link_refusal(root: Path, source: str) -> str:
    """Why a symbolic link on the way to `root` makes it unsafe ('' when none does): a link that another
    user owns (they can point it elsewhere at any time)."""
    uid = _uid()
    if uid < 0:
        return ""
    current = Path(os.path.abspath(root))
    for path in (current, *current.parents):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (uid, 0):
            return (f"compile cache root {root} (from {source}) is refused: {path} is a symbolic link owned by "
                    f"{owner_text(st.st_uid)} (to {os.readlink(path)}), who can point it at a directory of "
                    f"their choosing. Fix: name the directory itself (FL_CACHE_DIR={os.path.realpath(root)}) "
                    f"or a directory of your own, e.g. ~/.cache/torch_fl.")
    return ""


def broad_root(root: Path) -> str:
    """What `root` is when it is a directory that holds far more than a cache ('' when it is not): the
    file system root, the home directory or a directory above it. torch-fl lists, checks and removes
    entries under its root; there, that would walk (and `cache clear` could remove) the user's files."""
    real = Path(os.path.realpath(root))
    home = Path(os.path.realpath(os.path.expanduser("~")))
    if real == Path(real.anchor):
        return "the file system root"
    if real == home:
        return "your home directory"
    if home.is_relative_to(real):
        return f"a directory above your home directory ({home})"
    return ""


def root_refusal(root: Path, source: str) -> str:
    """Why the existing directory `root` is refused as a cache root ('' when it is fine): the message
    names the path, its owner and mode, and the fix."""
    broad = broad_root(root)
    if broad:
        return (f"compile cache root {root} (from {source}) is refused: it is {broad}, whose other files "
                f"torch-fl would walk and could remove as cache entries. Fix: point FL_CACHE_DIR at a "
                f"directory of its own, e.g. ~/.cache/torch_fl.")
    linked = link_refusal(root, source)
    if linked:
        return linked
    st = os.stat(root)
    reason = problem(st)
    if reason:
        fix = (f"`chmod go-w {root}`" if st.st_uid == _uid() else
               f"use a directory of your own (unset FL_CACHE_DIR or point it at one, e.g. "
               f"~/.cache/torch_fl), or, if {root} is really yours, `chown -R {_uid()} {root}`")
        return (f"compile cache root {root} (from {source}) is refused: {reason} ({describe(st)}). "
                f"Compiled artifacts are code that the next process loads, so a cache another user can write "
                f"lets that user run code as you. Fix: {fix}. To share compiled work, share read-only AOT "
                f"packages checked by hash (docs/compile.md, 'Trust').")
    for parent in Path(os.path.realpath(root)).parents:
        try:
            pst = os.stat(parent)
        except OSError:
            continue
        reason = problem(pst, ancestor=True)
        if reason:
            return (f"compile cache root {root} (from {source}) is refused: the directory above it, {parent}, "
                    f"lets another user replace it: {reason} ({describe(pst)}). Fix: put the cache under a "
                    f"directory only you (or root) can write, or `chmod +t {parent}` (sticky, like /tmp).")
    return ""


def entry_problem(path: Path) -> str:
    """Why the entry directory `path` or something inside it is not this user's alone ('' when it is).
    Modes inside a private entry are not a problem (nobody else can reach them); ownership is."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot stat it: {exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory ({describe(st)})"
    reason = problem(st)
    if reason:
        return f"{path}: {reason} ({describe(st)})"
    uid = _uid()
    if uid < 0:
        return ""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            item = os.path.join(dirpath, name)
            try:
                ist = os.lstat(item)
            except OSError:
                continue  # removed meanwhile (Inductor's temporary files)
            if ist.st_uid != uid:
                return f"{item}: it belongs to {owner_text(ist.st_uid)} ({describe(ist)})"
            if stat.S_ISLNK(ist.st_mode):
                return f"{item} is a symbolic link (to {os.readlink(item)}); an entry holds plain files only"
    return ""


def tighten(path: Path) -> None:
    """Directories 0700 and files 0600 below `path` (what this user owns; links are left alone)."""
    uid = _uid()
    for dirpath, dirnames, filenames in os.walk(path):
        for name, mode in [(n, DIR_MODE) for n in dirnames] + [(n, FILE_MODE) for n in filenames]:
            item = os.path.join(dirpath, name)
            try:
                st = os.lstat(item)
                if st.st_uid == uid and not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
                    os.chmod(item, mode if stat.S_ISDIR(st.st_mode) else
                             (FILE_MODE | (st.st_mode & stat.S_IXUSR)))
            except OSError:
                continue


def open_private(path: Path, flags: int) -> int:
    """os.open with mode 0600 whatever the umask (fchmod after creation)."""
    fd = os.open(path, flags, FILE_MODE)
    if hasattr(os, "fchmod"):
        try:
            os.fchmod(fd, FILE_MODE)
        except OSError:
            pass  # not ours to change (an existing file of another user): the entry check reports it
    return fd


def unusable(root: Path, exc: OSError, source: str = "", doing: str = "") -> CacheUnusableError:
    """The torch-fl error for an OSError met while using the cache root `root`: what happened (the path
    and the system's words), why, and the fix."""
    path = exc.filename or root
    where = f"compile cache root {root}" + (f" (from {source})" if source else "")
    what = f" while {doing}" if doing else ""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        why = (f"the disk (or quota) holding it is full: writing {path}{what} failed with "
               f"'{exc.strerror}'")
        fix = (f"free space there (`torchfl cache clear --stale` removes entries of older stacks, `du -sh "
               f"{root}` shows its size), or point FL_CACHE_DIR at a disk with room")
    elif code in (errno.EROFS, errno.EACCES, errno.EPERM):
        ro = "it is on a read-only file system" if code == errno.EROFS else "you may not write there"
        why = f"{ro}: {path} cannot be created or written{what} ('{exc.strerror}')"
        fix = (f"make it writable (`chmod u+w {root}`, or remount the disk read-write), or point "
               f"FL_CACHE_DIR at a writable directory of your own, e.g. ~/.cache/torch_fl")
    elif code in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((p for p in (Path(path), *Path(path).parents) if p.exists() and not p.is_dir()), path)
        why = f"{blocker} is a file, not a directory, so nothing can be created under it{what}"
        fix = f"remove or rename {blocker}, or point FL_CACHE_DIR at a directory"
    else:
        why = f"{path}{what}: {exc.strerror or exc}"
        fix = "check the directory (it must be a writable directory of your own), or point FL_CACHE_DIR elsewhere"
    error = CacheUnusableError(f"{where} is unusable: {why}. Fix: {fix}. torch.fl.compile goes on without "
                               "the cache meanwhile (every start compiles from scratch).")
    error.oserror, error.doing, error.source = exc, doing, source  # to restate it with its source
    return error


def require_directory(root: Path, source: str = "") -> None:
    """Raise CacheUnusableError when `root`, or a path above it, exists and is not a directory."""
    for path in (root, *root.parents):
        if os.path.lexists(path):
            if not path.is_dir():
                raise unusable(root, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path)),
                               source)
            return
