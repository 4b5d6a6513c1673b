"""Whether the state directory can be used, and what to do when it cannot.

Every allocator on a node shares one state directory (the lock file, the
process runtime's state file, the node's log): these checks refuse what can
never hold them, in one sentence, before anything is written there.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from tpnode_tui.model.errors import ConfigError

_POINT_IT = "point TUNEPLANE_STATE_DIR (or --state-dir) at the node's state directory"


def state_dir_exists(state_dir: Path) -> bool:
    """Whether the state directory is there yet (it is made by the first launch).

    Anything else at that path (a file, a dangling link, a parent that is a
    file) is a ConfigError: it can never hold the lock or the state file.
    """
    try:
        st = os.stat(state_dir)
    except FileNotFoundError:
        if os.path.lexists(state_dir):
            raise ConfigError(f"the state dir {state_dir} is a link to nothing; {_POINT_IT}") from None
        return False
    except NotADirectoryError:
        raise ConfigError(f"the state dir {state_dir} is inside a file, not a directory; {_POINT_IT}") from None
    except OSError as e:
        raise ConfigError(state_dir_unusable(state_dir, e, "be looked at")) from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"the state dir {state_dir} is not a directory; {_POINT_IT}")
    return True


def state_dir_to_serve(state_dir: Path) -> bool:
    """:func:`state_dir_exists`, for a process about to serve the node itself:
    one it may not even look into is a ConfigError too, since every read of
    the node's record there would fail."""
    if not state_dir_exists(state_dir):
        return False
    if not os.access(state_dir, os.X_OK):
        denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        raise ConfigError(state_dir_unusable(state_dir, denied, "be looked into"))
    return True


def state_dir_unusable(state_dir: Path, e: OSError, to: str) -> str:
    """Why the state directory cannot be used, and what to do, in one sentence.

    There is deliberately no advice to use another directory: every allocator
    on the node must share this one, and a private one would be a second truth.
    """
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"the state dir {state_dir} is not a directory, so it cannot {to}; {_POINT_IT}"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"the state dir {state_dir} cannot {to} ({e.strerror}); run as a user who may "
            "write there (every allocator on this node shares it)"
        )
    return f"the state dir {state_dir} cannot {to} ({e.strerror or e})"
