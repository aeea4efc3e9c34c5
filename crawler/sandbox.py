"""How a rendering crawler starts Chromium: sandboxed, as an unprivileged user, with none of the
crawler's credentials (docs/contract.md §15).

The browser runs the pages of any site, beside a crawler that holds ``REDIS_URL``, the Kafka
credentials and a network path to Redis and REST. So:

* **Chromium's sandbox is on** (Playwright's ``chromium_sandbox=True``; Playwright's default is
  ``--no-sandbox``). Debian's Chromium has no setuid sandbox helper: its sandbox needs *user
  namespaces*, which an unprivileged user can create when the kernel and the container's seccomp
  profile allow it (Docker's default profile does not). Chromium refuses its sandbox when run as
  root, so a crawler running as root starts the browser as RENDER_BROWSER_USER (``nobody`` by
  default) through a small launcher (:func:`write_launcher`) that hands it Playwright's profile
  directory and drops to that user before the browser starts.
* :func:`sandbox_problem` checks at start-up, in a child process as the browser's user, that a
  user namespace can be made. If not, the crawler refuses to start, naming the reason and
  RENDER_ALLOW_NO_SANDBOX; with that setting true it starts the browser unsandboxed and logs one
  WARNING saying why that is dangerous.
* **The browser's environment** is :func:`browser_env`: ``PATH``, ``HOME``, locale and time zone,
  nothing else. Playwright passes it to the browser instead of the crawler's own, so
  ``/proc/<pid>/environ`` of the browser holds no ``REDIS_URL``, ``KAFKA_*``, ``REST_API_KEY`` or
  password (the Playwright driver, a Node.js process of the crawler, keeps the crawler's).
"""

from __future__ import annotations

import atexit
import logging
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawlhive.utils.config.errors import SettingsError

if TYPE_CHECKING:
    from crawlhive.utils.config.settings import Settings

logger = logging.getLogger(__name__)

#: The PATH the browser gets (the crawler's own may name directories of its virtualenv).
BROWSER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Variables of the crawler's environment the browser gets too: locale and time zone only.
PASSED_ON = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ")

#: unshare(2) flags of what Chromium's namespace sandbox makes for each renderer.
_NAMESPACES = 0x10000000 | 0x20000000 | 0x40000000  # CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
#: How long the sandbox check may take (a Python start and a few system calls).
PROBE_TIMEOUT_S = 30.0


#: The check :func:`_probe` runs in a fresh interpreter (argv: the unshare(2) flags, then the
#: browser's uid and gid, or -1 -1 for the interpreter's own): become that user, make the sandbox's
#: namespaces and map itself in them, as the sandbox does (the map is refused where user namespaces
#: are allowed but left without capabilities, e.g. by AppArmor's userns restriction); exit 0 or the
#: errno.
_PROBE = """
import ctypes, os, sys
flags, uid, gid = (int(arg) for arg in sys.argv[1:4])
code = 1
try:
    if uid >= 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 1)  # PR_SET_DUMPABLE, which setuid cleared (the browser gets it by its exec)
    if libc.unshare(flags) != 0:
        code = min(ctypes.get_errno(), 255) or 1
    else:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as out:
                out.write(text)
        code = 0
except OSError as exc:
    code = min(exc.errno or 1, 255)
sys.exit(code)
"""


def _probe(user: pwd.struct_passwd | None) -> int:
    """Run :data:`_PROBE` as *user* (None: the crawler's own); 0 or the errno it met.

    A fresh interpreter, neither a fork of this one nor the browser's user's: unshare(2) refuses a
    new user namespace to a process with more than one thread (EINVAL), and a fork of this process
    may start threads before its first line runs (OpenTelemetry's batch processors restart their
    worker thread in every forked child). The interpreter starts as the crawler's user, isolated
    (``-I -S``: no virtualenv's packages, no environment), so the browser's user never needs to read
    the crawler's virtualenv; it drops to that user itself.
    """
    ids = ("-1", "-1") if user is None else (str(user.pw_uid), str(user.pw_gid))
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, str(_NAMESPACES), *ids],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={},
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    return done.returncode


#: The launcher Playwright starts instead of the browser when the crawler is root (write_launcher).
_LAUNCHER = """#!{python} -I
# Written by crawlhive (crawler/sandbox.py): starts {browser} as uid {uid}, sandboxed.
import os, sys
UID, GID, BROWSER = {uid}, {gid}, {browser!r}
args = sys.argv[1:]
for arg in args:
    if arg.startswith("--user-data-dir="):  # Playwright's profile, made by root: the browser's own
        profile = arg.split("=", 1)[1]
        os.chown(profile, UID, GID)
        for top, dirs, files in os.walk(profile):
            for name in dirs + files:
                os.lchown(os.path.join(top, name), UID, GID)
        os.environ["HOME"] = profile
os.setgroups([])
os.setgid(GID)
os.setuid(UID)
if os.getuid() != UID or os.geteuid() != UID:
    sys.exit("crawlhive: could not drop to the browser's user")
os.execv(BROWSER, [BROWSER, *args])
"""


@dataclass(frozen=True)
class BrowserLaunch:
    """What Playwright is told to start: *executable*, sandboxed or not, with *env*."""

    executable: str
    sandbox: bool
    env: dict[str, str]


def browser_env(home: str) -> dict[str, str]:
    """The browser's whole environment: :data:`BROWSER_PATH`, *home*, and :data:`PASSED_ON`."""
    env = {"PATH": BROWSER_PATH, "HOME": home}
    env.update({name: os.environ[name] for name in PASSED_ON if name in os.environ})
    return env


def browser_user(settings: Settings) -> pwd.struct_passwd | None:
    """The user the browser runs as: None for the crawler's own (it is not root), else
    RENDER_BROWSER_USER.

    Raises:
        SettingsError: RENDER_BROWSER_USER is unknown.
    """
    if os.geteuid() != 0:
        return None
    name = settings.RENDER_BROWSER_USER.strip()
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        raise SettingsError(f"RENDER_BROWSER_USER: no user {name!r} on this machine") from None


def sandbox_problem(user: pwd.struct_passwd | None) -> str | None:
    """Why Chromium's sandbox cannot work for the browser run as *user* (None: the crawler's own
    user), or None when it can."""
    uid = os.geteuid() if user is None else user.pw_uid
    if uid == 0:
        return "the browser would run as root, where Chromium refuses its sandbox (RENDER_BROWSER_USER)"
    try:
        code = _probe(user)  # errno; 1 also when the uid_map write failed (OSError in the child)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the sandbox check could not run ({type(exc).__name__}: {exc})"
    if code != 0:
        reason = os.strerror(code) if code > 0 else f"exit status {code}"
        return (
            f"this machine does not let an unprivileged user create user namespaces (unshare: {reason}), "
            "which Chromium's sandbox needs (in a container: a seccomp profile that allows them)"
        )
    return None


def write_launcher(browser: str, user: pwd.struct_passwd) -> str:
    """A launcher (:data:`_LAUNCHER`) of *browser* as *user*, in a directory of its own removed at
    exit; its path."""
    if any(c.isspace() for c in sys.executable):
        raise SettingsError(f"the crawler's Python path has a space ({sys.executable!r}): no browser launcher")
    directory = tempfile.mkdtemp(prefix="crawlhive-browser-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = os.path.join(directory, "chromium")
    with open(path, "w", encoding="utf-8") as out:
        out.write(_LAUNCHER.format(python=sys.executable, browser=browser, uid=user.pw_uid, gid=user.pw_gid))
    os.chmod(path, 0o700)
    return path


def browser_launch(browser: str, settings: Settings) -> BrowserLaunch:
    """How to start *browser*: sandboxed (as RENDER_BROWSER_USER when the crawler is root), or
    unsandboxed only when RENDER_ALLOW_NO_SANDBOX is true and the sandbox cannot work.

    Raises:
        SettingsError: the sandbox cannot work and RENDER_ALLOW_NO_SANDBOX is false (the message
            says why), or RENDER_BROWSER_USER is unknown.
    """
    user = browser_user(settings)
    problem = sandbox_problem(user)
    home = tempfile.gettempdir() if user is not None else os.environ.get("HOME") or tempfile.gettempdir()
    if problem is None:
        executable = browser if user is None else write_launcher(browser, user)
        return BrowserLaunch(executable, sandbox=True, env=browser_env(home))
    if not settings.RENDER_ALLOW_NO_SANDBOX:
        raise SettingsError(
            f"rendering needs Chromium's sandbox and it cannot work here: {problem}. Fix that, or set "
            "RENDER_ALLOW_NO_SANDBOX=true to run the browser without it (dangerous)"
        )
    logger.warning(
        "the browser runs WITHOUT Chromium's sandbox (RENDER_ALLOW_NO_SANDBOX=true): %s. A page that "
        "exploits a bug of the browser then runs code as the crawler's user, beside its network access "
        "to Redis, Kafka and REST; run rendering crawlers where the sandbox works",
        problem,
    )
    # Unsandboxed, but still not as root when another user was named.
    executable = browser if user is None or user.pw_uid == 0 else write_launcher(browser, user)
    return BrowserLaunch(executable, sandbox=False, env=browser_env(home))
