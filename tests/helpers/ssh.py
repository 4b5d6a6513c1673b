"""A real sshd of the tests' own, and accounts set up to log in to it with keys.

The sshd listens on a free loopback port with a host key made for it, lets in
only the keys the tests authorise (one file per account, in its directory),
and gives every session the environment a node's logins would have: the
product on PATH (the session's runnable copy), and the node's settings file
(``agent.env``, naming its agent's socket) where tests keep their own.
Each account that uses it gets a key of its own and an ``~/.ssh/config``
entry naming the node, as a user sets up SSH to reach a machine.

With ``CI=true`` an sshd that cannot be started fails the test (helpers/services.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

from helpers.accounts import Account, runnable
from helpers.services import free_port, unavailable
from helpers.waiting import until

SSHD = "/usr/sbin/sshd"


class Sshd:
    def __init__(self, root: Path, agent_socket: Path) -> None:
        self.root = root
        self.port = free_port()
        self.agent_socket = agent_socket
        self.keys = root / "authorized"
        self.proc: subprocess.Popen | None = None
        self.log = root / "sshd.log"

    def start(self) -> None:
        if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
            unavailable("openssh-server is not installed (tests/run.sh installs it as root)")
        self.keys.mkdir(mode=0o755)
        host_key = self.root / "host_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
        product = runnable()
        # the node's own settings file, as the agent's unit reads it: where dial-stdio finds the socket
        node_file = self.root / "agent.env"
        node_file.write_text(f"# the node's settings\nTUNEPLANE_AGENT_SOCKET={self.agent_socket}\n")
        node_file.chmod(0o644)
        config = self.root / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.keys}/%u",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin no",
                    "LogLevel VERBOSE",
                    # what a node's login would have: the product on PATH, and the node's settings file;
                    # a login's own idea of the socket is not the node's, and dial-stdio must not take it
                    f"SetEnv PATH={product.bin}:/usr/local/bin:/usr/bin:/bin PYTHONPATH={product.site} "
                    f"TUNEPLANE_NODE_ENV_FILE={node_file} TUNEPLANE_AGENT_SOCKET=/nonexistent/login.sock",
                ]
            )
            + "\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
        with contextlib.suppress(TimeoutError):
            until(lambda: self.proc.poll() is not None or self._answers(), "sshd to answer", 15, error=TimeoutError)
        if not self._answers():
            self.stop()
            unavailable(f"sshd did not start: {self.log.read_text()[-2000:]}")

    def _answers(self) -> bool:
        with socket.socket() as s:
            try:
                s.connect(("127.0.0.1", self.port))
            except OSError:
                return False
        return True

    def host_key_line(self) -> str:
        kind, key = (self.root / "host_ed25519.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {key}"

    def let_in(self, account: Account, alias: str, *, as_user: str | None = None, authorise: bool = True) -> None:
        """Give ``account`` a key, authorise it (unless told not to) for logging
        in as ``as_user`` (itself by default), and name the node ``alias`` in
        its ssh config."""
        # useradd leaves the password "!" (locked), and sshd without PAM lets no
        # locked account in even with a key: "*" is no password, and not locked.
        subprocess.run(["usermod", "-p", "*", as_user or account.name], check=True, capture_output=True)
        ssh = account.home / ".ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        key = ssh / f"id_{alias}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        if authorise:
            with open(self.keys / (as_user or account.name), "a") as authorized:
                authorized.write(key.with_suffix(".pub").read_text())
        with open(ssh / "known_hosts", "a") as known:
            known.write(self.host_key_line() + "\n")
        with open(ssh / "config", "a") as config:
            config.write(
                "\n".join(
                    [
                        f"Host {alias}",
                        "  HostName 127.0.0.1",
                        f"  Port {self.port}",
                        f"  User {as_user or account.name}",
                        f"  IdentityFile {key}",
                        "  IdentitiesOnly yes",
                        "  StrictHostKeyChecking yes",
                        "  BatchMode yes",
                        "",
                    ]
                )
            )
        for path in [ssh, *ssh.iterdir()]:
            os.chown(path, account.uid, account.gid)

    def end_logins(self, *accounts: Account) -> None:
        """End the shared SSH logins (ControlPersist masters) the accounts left."""
        import psutil

        uids = {a.uid for a in accounts}
        left = [
            p
            for p in psutil.process_iter(["uids", "name"])
            if p.info["uids"] and p.info["uids"].real in uids and p.info["name"] == "ssh"
        ]
        for proc in left:
            proc.kill()
        psutil.wait_procs(left, timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
