"""What keeps ``anydevice check``'s script from changing the user's files: the kernel, not convention.

While check runs a script's first steps (and every process the script starts), nothing outside check's own
temporary folder (the scratch working directory, ``TMPDIR``, the caches), ``/dev/shm``, the device files in
``/dev`` and the system's temporary folders (only when they hold neither the working directory nor the
script's folder) can be created, changed or removed. A write elsewhere fails as on a read-only file system
(``EACCES``/``EROFS``). The mechanisms, tried in this order; the first that holds is used and named in the report:

* ``landlock``: the kernel's Landlock LSM (Linux 5.13+, unprivileged). check builds the ruleset (writes allowed only
  beneath the folders above; reading and executing everywhere) and the child applies it before ``exec``, so the
  runner, the script and every process it starts (``os.system``, ``subprocess``) inherit it.
* ``namespace``: a private user and mount namespace (``unshare -Urm``) in which every mount but those folders,
  ``/proc``, ``/sys`` and ``/dev`` is remounted read-only.
* ``copy``: the script's folder (and the working directory) copied into the temporary folder, and the script run
  from the copy: writes through ``__file__`` and relative paths land in the copy; an absolute path elsewhere is
  not contained (a copy is refused above :data:`COPY_LIMIT` bytes or :data:`COPY_FILES` files).

Where none holds, check refuses to run the script unless ``--allow-writes`` is given.
``ANYDEVICE_CHECK_CONTAINMENT=landlock|namespace|copy|none`` (an internal knob, for tests) tries only the one named
(``none``: as on a machine where nothing holds). Standard library only: check's own process never imports torch.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anydevice.errors import AnyDeviceError

MECHANISMS = ("landlock", "namespace", "copy")
KNOB = "ANYDEVICE_CHECK_CONTAINMENT"
"""Internal, for tests: try only this mechanism (``none``: none, as where nothing holds)."""
HOW = {
    "landlock": "the kernel (Landlock) refused every write outside check's scratch folder",
    "namespace": "a private mount namespace in which every folder but check's scratch folder was read-only",
    "copy": "the script ran from a copy of its folder; an absolute path elsewhere was not contained",
    "none": "nothing held on this machine and --allow-writes was given: the script's writes reached your files",
}
COPY_LIMIT = 512 * 2**20
COPY_FILES = 20_000

# Landlock (include/uapi/linux/landlock.h): the syscalls and the file-system rights check handles.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_PR_SET_NO_NEW_PRIVS = 38
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE = sum(1 << bit for bit in range(6, 13))  # MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3 (IOCTL_DEV, ABI 5, is not handled: ioctls stay allowed)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]  # the ABI 1 size: later fields (net, scope) stay unhandled


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _checked(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (an old kernel, Landlock not enabled, not Linux)."""
    try:
        found = _libc().syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(found), 0)


def write_rights(abi: int) -> int:
    """Every right that changes the file system, for this ABI: these are handled (denied unless a rule allows them)."""
    return WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)


def landlock_ruleset(writable: Sequence[str], devices: str = "/dev") -> int:
    """A Landlock ruleset (a file descriptor, close-on-exec) that allows writes only beneath ``writable``; in
    ``devices``, writing existing device files (``/dev/null``, a terminal), nothing else. Raises OSError."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(errno.ENOSYS, "the kernel has no Landlock")
    libc, handled = _libc(), write_rights(abi)
    attr = _RulesetAttr(handled)
    created = libc.syscall(
        ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_long(0)
    )
    ruleset = _checked(created, "landlock_create_ruleset")
    try:
        rules = [(folder, handled) for folder in writable] + [(devices, WRITE_FILE | (TRUNCATE if abi >= 3 else 0))]
        for folder, allowed in rules:
            if not os.path.isdir(folder):
                continue
            fd = os.open(folder, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(allowed, fd)
                add = libc.syscall(
                    ctypes.c_long(_ADD_RULE),
                    ctypes.c_long(ruleset),
                    ctypes.c_long(_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_long(0),
                )
                _checked(add, f"landlock rule for {folder}")
            finally:
                os.close(fd)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def restrict_self(ruleset: int) -> None:
    """Apply ``ruleset`` to this process (and every process it starts from now on): no way back."""
    libc = _libc()
    no_new_privs = libc.prctl(
        ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
    )
    _checked(no_new_privs, "prctl(PR_SET_NO_NEW_PRIVS)")
    _checked(libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_long(ruleset), ctypes.c_long(0)), "landlock_restrict_self")


# A private user + mount namespace (<linux/sched.h>, <sys/mount.h>).
_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
_KEPT = {2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME, 4096: MS_RELATIME}
"""statvfs's ST_* flags -> MS_* flags a remount must keep (a user namespace may not clear a locked flag)."""
SPARED = ("/proc", "/sys", "/dev")


def read_only_namespace(writable: Sequence[str], protected: Sequence[str]) -> None:
    """Move this process into a private user + mount namespace where only ``writable`` (and /proc, /sys, /dev) can be
    written. ``protected`` (the user's folders) are checked to be read-only afterwards. Raises OSError."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    _checked(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER | CLONE_NEWNS)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    mount = libc.mount
    _checked(mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for folder in writable:
        if os.path.isdir(folder):
            path = folder.encode()
            _checked(mount(path, path, None, MS_BIND | MS_REC, None), f"mount --rbind {folder}")
    for point in _mount_points():
        if any(_under(point, kept) for kept in (*SPARED, *writable)):
            continue
        try:
            kept = os.statvfs(point).f_flag
        except OSError:
            continue  # hidden under a later mount: what is there now is remounted under its own point
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | sum(ms for st, ms in _KEPT.items() if kept & st)
        _checked(mount(None, point.encode(), None, flags, None), f"remount {point} read-only")
    for folder in protected:
        if os.access(folder, os.W_OK):
            raise OSError(errno.EPERM, f"{folder} is still writable in the namespace")


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        points = [line.split()[4] for line in table if len(line.split()) > 4]
    return list(dict.fromkeys(_unescape(p) for p in points))


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass
class Plan:
    """Where check runs the script and what keeps it from the user's files."""

    tmp: Path
    """check's temporary folder: writable, removed afterwards."""
    script: Path
    cwd: Path
    """The script and the working directory the child gets (their copies, under ``copy``)."""
    order: list[str]
    """The mechanisms to try, in order."""
    writable: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    mechanism: str = ""
    """The one that held (``none`` where none did and --allow-writes was given)."""
    why_not: dict[str, str] = field(default_factory=dict)
    """Why each mechanism tried before it did not hold."""
    copies: dict[str, str] = field(default_factory=dict)
    """Under ``copy``: each copy -> the user's folder it copies (to name the user's paths in the report)."""

    def user_path(self, text: str) -> str:
        """``text`` with every copy's path replaced by the user's folder it copies."""
        for copy, original in self.copies.items():
            text = text.replace(copy, original)
        return text


def plan(tmp: Path, script: Path, cwd: Path, also: Sequence[str] = ()) -> Plan:
    """The plan for running ``script`` from ``cwd`` with ``tmp`` as check's temporary folder (``also``: more of check's own)."""
    forced = (os.environ.get(KNOB) or "").strip()
    if forced and forced not in (*MECHANISMS, "none"):
        raise AnyDeviceError(
            f"{KNOB}={forced!r} is not a containment mechanism.",
            f"Set it to one of {', '.join((*MECHANISMS, 'none'))} (an internal knob, for tests), or unset it.",
        )
    order = [forced] if forced in MECHANISMS else [] if forced == "none" else list(MECHANISMS)
    user = [str(cwd.resolve()), str(script.resolve().parent)]
    writable = list(dict.fromkeys([str(tmp.resolve()), *(os.path.realpath(a) for a in also), "/dev/shm"]))
    for system_tmp in dict.fromkeys((tempfile.gettempdir(), "/tmp", "/var/tmp")):
        real = os.path.realpath(system_tmp)
        if os.path.isdir(real) and not any(_under(u, real) for u in user):
            writable.append(real)  # the system's temporary folder, unless the user's folders are in it
    home = os.path.expanduser("~")
    protected = list(dict.fromkeys([*user, *([home] if os.path.isdir(home) else [])]))
    why = {"all": f"{KNOB}=none"} if forced == "none" else {}
    return Plan(tmp, script, cwd, order, writable, [p for p in protected if not any(_under(p, w) for w in writable)], "", why)


def start(
    plan_: Plan, command: Callable[[Path, Path], list[str]], allow_writes: bool, before: Callable[[], None], **popen: Any
) -> subprocess.Popen[str]:
    """Start the child under the first mechanism of ``plan_`` that holds (``plan_.mechanism`` names it).

    ``command(script, cwd)`` is the child's command line for a script and working directory (a copy's, under
    ``copy``); ``before`` runs in the child first (its parent-death signal). Where none holds: without
    ``allow_writes`` an AnyDeviceError that says why, with it the child runs uncontained (``none``).
    """
    for mechanism in plan_.order:
        try:
            if mechanism == "copy":
                script, cwd = _copy(plan_)
                child = subprocess.Popen(command(script, cwd), preexec_fn=before, **popen)
            else:
                child = _start_contained(plan_, mechanism, command(plan_.script, plan_.cwd), before, popen)
        except (OSError, subprocess.SubprocessError) as exc:
            plan_.why_not[mechanism] = _reason(plan_, mechanism, exc)
            continue
        plan_.mechanism = mechanism
        return child
    if not allow_writes:
        tried = "; ".join(f"{m}: {why}" for m, why in plan_.why_not.items()) or "none was tried"
        raise AnyDeviceError(
            f"check cannot keep {plan_.script.name} from changing your files on this machine ({tried}).",
            "check runs the script's first steps only where the kernel (Landlock, or a user namespace) or a copy of its "
            "folder keeps your files as they are. To run it anyway, with its writes reaching your files, add --allow-writes.",
        )
    plan_.mechanism = "none"
    return subprocess.Popen(command(plan_.script, plan_.cwd), preexec_fn=before, **popen)


_FAILED = "containment-failed"
"""Written in check's temporary folder by a child whose mechanism did not hold (the reason), before it ends."""


def _start_contained(plan_: Plan, mechanism: str, command: list[str], before: Callable[[], None], popen: dict[str, Any]) -> Any:
    failed = plan_.tmp / _FAILED
    failed.unlink(missing_ok=True)
    ruleset = landlock_ruleset(plan_.writable) if mechanism == "landlock" else -1

    def contain() -> None:
        before()
        try:
            if mechanism == "landlock":
                restrict_self(ruleset)
            else:
                read_only_namespace(plan_.writable, plan_.protected)
        except OSError as exc:
            failed.write_text(str(exc))
            raise

    try:
        return subprocess.Popen(command, preexec_fn=contain, **popen)
    finally:
        if ruleset >= 0:
            os.close(ruleset)


def _reason(plan_: Plan, mechanism: str, exc: BaseException) -> str:
    failed = plan_.tmp / _FAILED
    text = str(exc)
    if failed.exists():
        text = failed.read_text().strip() or text
        failed.unlink(missing_ok=True)
    return text if len(text) <= 300 else text[:297] + "..."


def _copy(plan_: Plan) -> tuple[Path, Path]:
    """Copy the script's folder and the working directory into check's temporary folder: (the script, the cwd) there."""
    cwd, folder = plan_.cwd.resolve(), plan_.script.resolve().parent
    roots = [cwd] if _under(str(folder), str(cwd)) else [folder] if _under(str(cwd), str(folder)) else [cwd, folder]
    own = str(plan_.tmp.resolve())  # check's temporary folder may be inside the user's (TMPDIR=./tmp): never copied
    _measure(roots, own)
    copies: dict[Path, Path] = {}

    def not_ours(folder: str, names: list[str]) -> list[str]:
        return [name for name in names if _under(own, os.path.realpath(os.path.join(folder, name)))]

    for n, root in enumerate(roots):
        target = plan_.tmp / f"copy{n}" / (root.name or "root")
        try:
            shutil.copytree(root, target, symlinks=True, ignore=not_ours)
        except shutil.Error as exc:
            raise OSError(errno.EIO, f"{root} could not be copied ({len(exc.args[0])} file(s) failed)") from None
        copies[root] = target
        plan_.copies[str(target)] = str(root)

    def moved(path: Path) -> Path:
        root = next(r for r in roots if _under(str(path), str(r)))
        return copies[root] / path.relative_to(root)

    return moved(plan_.script.resolve()), moved(cwd)


def _measure(roots: list[Path], own: str) -> None:
    size = files = 0
    for root in roots:
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = [d for d in subfolders if not _under(own, os.path.realpath(os.path.join(folder, d)))]
            for name in names:
                files += 1
                try:
                    size += os.lstat(os.path.join(folder, name)).st_size
                except OSError:
                    continue
                if size > COPY_LIMIT or files > COPY_FILES:
                    raise OSError(
                        errno.EFBIG,
                        f"{root} is too large to copy (over {COPY_LIMIT // 2**20} MiB or {COPY_FILES} files)",
                    )
