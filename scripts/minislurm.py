"""A real single-node Slurm on this machine: munged, MariaDB, slurmdbd, slurmctld and slurmd, every file and socket in
one folder, every daemon a child whose PID is recorded and stopped by PID. For testing diffgeo's Slurm executor end to
end (tests/test_slurm.py), and for trying a sweep through Slurm before taking it to a cluster.

    sudo bash scripts/install_slurm.sh                # Debian's slurmctld, slurmd, slurmdbd, munge, mariadb-server
    python scripts/minislurm.py up /tmp/minislurm     # start; prints the SLURM_CONF to export
    SLURM_CONF=/tmp/minislurm/slurm.conf sinfo        # use it (sbatch, squeue, sacct, scancel, submitit)
    python scripts/minislurm.py down /tmp/minislurm   # stop every daemon it started (by the PIDs in the folder)

From Python: `with MiniSlurm(folder) as env: ...` (env: the environment variables its clients need); the daemons are
stopped when the block ends, also on an error. Needs root (slurmd runs the jobs; munged runs as the munge user).

Set up for a machine without systemd or cgroups: munged started as the munge user on a socket in the folder, node name
`hostname -s` at NodeAddr 127.0.0.1, proctrack/linuxproc and task/none, `SchedulerParameters=batch_sched_delay=0` and
`KillWait=5` (jobs start and die promptly), free TCP ports picked at start, slurmdbd on MariaDB so that `sacct` (which
submitit reads to see cancelled and killed jobs) works.
"""
import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])   # the daemons live in sbin, not always on PATH
PACKAGES = "slurmctld slurmd slurm-client slurmdbd munge mariadb-server"


def missing() -> str | None:
    "Why a MiniSlurm cannot start here (a sentence naming the fix), or None."
    if os.geteuid() != 0: return "needs root (slurmd runs the jobs, munged runs as the munge user)"
    absent = [d for d in (*DAEMONS, "mariadb-install-db", "mariadb", "sacctmgr", "sbatch", "sacct", "mungekey") if shutil.which(d, path=PATH) is None]
    if absent: return f"{', '.join(absent)} not installed: sudo bash scripts/install_slurm.sh (Debian: {PACKAGES})"
    try: pwd.getpwnam("munge")
    except KeyError: return "no munge user: reinstall Debian's munge package (scripts/install_slurm.sh)"
    return None


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks: s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks: s.close()


def _wait(check, what: str, proc, log: Path | None, timeout: float = 60.0):
    "Poll `check()` until it is true, or fail (at once if the process `proc` exits) with the tail of `log`."
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if check(): return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else "(no log)"
    raise RuntimeError(f"{what} did not come up ({'it exited' if proc.poll() is not None else f'{timeout:.0f} s'}); its log ends:\n{tail}")


def alive(pid: int) -> bool:
    "Whether the process `pid` exists and is not a zombie."
    try: state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError): return False
    return state not in ("Z", "X")


def _ok(*cmd, env=None) -> bool:
    return subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


class MiniSlurm:
    "A single-node Slurm whose files all live in `folder` (created, mode 755 so that the munge user can reach its socket)."

    def __init__(self, folder, cpus: int | None = None):
        self.dir = Path(folder).resolve()
        self.cpus = cpus or os.cpu_count() or 1
        self.host = socket.gethostname().split(".")[0]
        self.env = {**os.environ, "PATH": PATH, "SLURM_CONF": str(self.dir / "slurm.conf")}

    # -- processes ------------------------------------------------------------------------------------------------
    def _start(self, name: str, cmd: list[str], user: str | None = None):
        log = open(self.dir / "log" / f"{name}.out", "ab")
        p = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, user=user, cwd=self.dir)
        with open(self.dir / "pids", "a") as f: f.write(f"{name} {p.pid}\n")
        if p.poll() is not None: raise RuntimeError(f"{name} exited at once; see {log.name}")
        return p

    @staticmethod
    def _terminate(pid: int, timeout: float) -> None:
        "SIGTERM, then SIGKILL after `timeout` s; reaped if it is our child."
        try: os.kill(pid, signal.SIGTERM)
        except ProcessLookupError: return
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid: return     # our child: reaped
            except ChildProcessError:                               # not our child: gone, or a zombie nobody reaps
                if not alive(pid): return
            time.sleep(0.1)
        try: os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError): pass

    @staticmethod
    def leftovers(folder) -> list[int]:
        """The job processes of this cluster still alive: slurmstepd and the jobs' own processes, recognised by the
        SLURM_CONF of this folder in their environment (a job step can outlive slurmd while it reports its end)."""
        conf, found = f"SLURM_CONF={Path(folder).resolve() / 'slurm.conf'}", []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid(): continue
            try:
                env = (d / "environ").read_bytes().split(b"\0")
                comm = (d / "comm").read_text().strip()
            except OSError: continue
            if conf.encode() in env and (comm == "slurmstepd" or any(e.startswith(b"SLURM_JOB_ID=") for e in env)):
                if alive(int(d.name)): found.append(int(d.name))
        return found

    @staticmethod
    def stop(folder, timeout: float = 10.0) -> list[str]:
        """Stop this cluster: cancel its jobs (waiting up to `timeout` for them to end), stop the daemons listed in
        `folder`/pids, the last started first (SIGTERM, then SIGKILL after `timeout`), then any job process left; returns
        what it stopped."""
        pids_file = Path(folder) / "pids"
        if not pids_file.exists(): return []
        env = {**os.environ, "PATH": PATH, "SLURM_CONF": str(Path(folder).resolve() / "slurm.conf")}
        jobs = lambda: subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
        try:
            if jobs():
                subprocess.run(["scancel", "--full", *jobs()], env=env, capture_output=True)
                end = time.monotonic() + timeout
                while jobs() and time.monotonic() < end: time.sleep(0.2)
        except OSError: pass                                        # no Slurm clients: nothing to cancel
        entries = [line.split() for line in pids_file.read_text().splitlines() if line.strip()]
        stopped = []
        for name, pid in reversed(entries):
            MiniSlurm._terminate(int(pid), timeout)
            stopped.append(f"{name} {pid}")
        for pid in MiniSlurm.leftovers(folder):
            MiniSlurm._terminate(pid, 5.0)
            stopped.append(f"job process {pid}")
        pids_file.unlink()
        return stopped

    # -- configuration ------------------------------------------------------------------------------------------
    def _configure(self):
        d = self.dir
        for sub in ("log", "state", "spool", "db", "munge"): (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
        munge = pwd.getpwnam("munge")
        os.chown(d / "munge", munge.pw_uid, munge.pw_gid); os.chmod(d / "munge", 0o755)   # munged: its socket's folder must be searchable by all
        key = d / "munge" / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "--create", f"--keyfile={key}"], env=self.env, check=True, capture_output=True)
        os.chown(key, munge.pw_uid, munge.pw_gid); os.chmod(key, 0o400)
        run = Path("/run/munge")   # Slurm's clients ask munged on its default socket, whatever AuthInfo says
        run.mkdir(parents=True, exist_ok=True); os.chown(run, munge.pw_uid, munge.pw_gid); os.chmod(run, 0o755)
        self.sock = run / "munge.socket.2"
        self.db_port, self.dbd_port, self.ctld_port, self.slurmd_port = _free_ports(4)
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        auth = "AuthType=auth/munge\n"
        (d / "slurm.conf").write_text(
            f"ClusterName=minislurm\nSlurmctldHost={self.host}(127.0.0.1)\nSlurmUser=root\n{auth}"
            f"CredType=cred/munge\nSlurmctldPort={self.ctld_port}\nSlurmdPort={self.slurmd_port}\n"
            f"StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n"
            f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n"
            f"SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
            "MpiDefault=none\nReturnToService=2\nSchedulerType=sched/backfill\nSchedulerParameters=batch_sched_delay=0\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nKillWait=5\nInactiveLimit=0\nMinJobAge=300\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={self.dbd_port}\n"
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={mem} State=UNKNOWN\n"
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
        dbd = d / "slurmdbd.conf"
        dbd.write_text(
            f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={self.dbd_port}\nSlurmUser=root\n"
            f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={self.db_port}\n"
            f"StorageUser=slurm\nStoragePass=minislurm\nStorageLoc=slurm_acct_db\n"
            f"PidFile={d}/slurmdbd.pid\nLogFile={d}/log/slurmdbd.log\n")
        os.chmod(dbd, 0o600)

    # -- start / stop -------------------------------------------------------------------------------------------
    def up(self) -> dict:
        "Start the five daemons, each once the one before answers; returns the environment for Slurm's clients (SLURM_CONF set)."
        self.dir.mkdir(parents=True, exist_ok=True)
        if (self.dir / "pids").exists(): raise RuntimeError(f"{self.dir} has running daemons; stop them first: minislurm.py down {self.dir}")
        self._configure()
        d, log = self.dir, self.dir / "log"
        if self.sock.exists() and _ok("munge", "-n", env=self.env):
            raise RuntimeError(f"a munged is running already on {self.sock}, not started by MiniSlurm; stop it first")
        m = d / "munge"
        p = self._start("munged", ["munged", "-F", f"--socket={self.sock}", f"--key-file={m}/munge.key",
                                   f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"],
                        user="munge")
        _wait(lambda: _ok("munge", "-n", env=self.env), "munged", p, log / "munged.out", 20)
        if not (d / "db" / "mysql").exists():
            subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={d}/db", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db"],
                           env=self.env, check=True, capture_output=True)
        sql = ["mariadb", "--no-defaults", f"--socket={d}/mysql.sock", "-uroot"]
        p = self._start("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={d}/db", f"--socket={d}/mysql.sock",
                                 f"--port={self.db_port}", "--bind-address=127.0.0.1", "--user=root",
                                 f"--pid-file={d}/mariadb.pid", f"--log-error={d}/log/mariadb.log"])
        _wait(lambda: _ok(*sql, "-e", "select 1", env=self.env), "MariaDB", p, log / "mariadb.log")
        subprocess.run([*sql, "-e", "CREATE DATABASE IF NOT EXISTS slurm_acct_db; "
                        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'minislurm'; "
                        "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'minislurm'; "
                        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"],
                       env=self.env, check=True, capture_output=True)
        p = self._start("slurmdbd", ["slurmdbd", "-D"])
        _wait(lambda: _ok("sacctmgr", "-n", "list", "cluster", env=self.env), "slurmdbd", p, log / "slurmdbd.log")
        subprocess.run(["sacctmgr", "-i", "add", "cluster", "minislurm"], env=self.env, capture_output=True)
        p = self._start("slurmctld", ["slurmctld", "-D", "-i"])
        _wait(lambda: _ok("scontrol", "ping", env=self.env), "slurmctld", p, log / "slurmctld.log")
        p = self._start("slurmd", ["slurmd", "-D", "-N", self.host])
        idle = lambda: subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True).stdout.strip() in ("idle", "mix", "alloc")
        _wait(idle, "slurmd (node idle)", p, log / "slurmd.log")
        return dict(self.env)

    def pids(self) -> list[int]:
        "The PIDs of the daemons running now."
        f = self.dir / "pids"
        return [int(line.split()[1]) for line in f.read_text().splitlines()] if f.exists() else []

    def down(self) -> list[str]:
        return self.stop(self.dir)

    def __enter__(self) -> dict:
        try: return self.up()
        except BaseException:
            self.down(); raise

    def __exit__(self, *exc):
        self.down()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("up", "down", "check"))
    p.add_argument("folder", nargs="?", default="/tmp/minislurm")
    a = p.parse_args()
    if a.action == "down":
        print("\n".join(f"stopped {s}" for s in MiniSlurm.stop(a.folder)) or "nothing to stop"); return
    why = missing()
    if a.action == "check" or why:
        print(why or "ready"); sys.exit(1 if why else 0)
    s = MiniSlurm(a.folder)
    try: env = s.up()
    except BaseException:
        s.down(); raise
    print(f"Slurm is up (logs in {a.folder}/log). Use it with\n  export SLURM_CONF={env['SLURM_CONF']}\n"
          f"and stop it with\n  python {sys.argv[0]} down {a.folder}")


if __name__ == "__main__":
    main()
