"""A Jupyter kernel for the tests' papermill runs that starts by fork from a process with the heavy libraries imported.

Every smoke notebook (tests/test_experiments.py) runs through papermill in a fresh `python -m ipykernel_launcher`, which
spends seconds importing torch, torch._dynamo (which `torch.optim`'s first step imports), xarray, scipy and matplotlib
before the notebook's own work, and more tearing them down at exit: about a third of the smoke runs' time on this
project's 2-core machines. Here one server per pytest worker (`serve`) imports those libraries once; the kernelspec's
command (`connect`) asks it to fork a child, and that child becomes an ordinary ipykernel (`IPKernelApp`) with the
client's connection file, working directory, environment and standard streams. papermill, nbclient and jupyter_client
are unchanged: they start, talk to, interrupt and shut down the `connect` process as they would any kernel; it relays
signals to the kernel's process group, kills it when its own parent dies (as ipykernel's parent poller does for a plain
kernel) and exits with the kernel's status.

Nothing of diffgeo is imported in the server, so each notebook imports the package as it is on disk. Where the client's
environment differs from the server's in a variable read at import time (MPLBACKEND, OMP_*, MKL_*, NUMBA_*, ATEN_*,
ONEDNN_*, TORCH_*, PYTHON*, HOME, LANG, ...), or the server cannot be reached, the `connect` process replaces itself
with a plain `python -m ipykernel_launcher` (exec): the preloaded libraries could not have seen that environment.
The server has one thread when it forks (checked, native threads included: where it has more it refuses, and the
kernels are plain), so no lock is copied held. What a notebook could still tell apart: numpy's global generator is
reseeded from the OS in each kernel as in a fresh process, but every forked kernel shares the server's string-hash seed
(PYTHONHASHSEED), so a set of strings iterates in the same order in each; the kernel ends by `os._exit` after the
interpreter's exit functions (no module teardown).

    python tests/kernel_fork.py serve SOCKET          # the server: preload, then fork a kernel per connection
    python tests/kernel_fork.py connect SOCKET FILE   # the kernelspec's argv: a kernel on connection file FILE
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

#: Environment variables read when the preloaded libraries are imported: a client whose values differ gets a plain kernel.
IMPORT_TIME_ENV = ("MPLBACKEND", "MPLCONFIGDIR", "OMP_", "MKL_", "NUMBA_", "ATEN_", "ONEDNN_", "TORCH_", "PYTHON", "KMP_",
                   "OPENBLAS_", "CUDA_", "PYTORCH_", "NPY_", "NUMPY_", "LD_", "HOME", "XDG_", "LANG", "LC_", "TZ")
PRELOAD = ("numpy", "scipy.linalg", "scipy.special", "pandas", "xarray", "netCDF4", "matplotlib", "matplotlib.pyplot",
           "torch", "torch._dynamo", "torch.optim", "torchvision", "numba", "tqdm", "IPython", "ipykernel.kernelapp")


def _import_env(env:dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


def _exact(sock, n:int) -> bytes|None:
    "n bytes from a stream socket, or None where it closes first."
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk: return None
        data += chunk
    return data


def _send(sock, obj) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv(sock):
    head = _exact(sock, 4)
    if head is None: return None
    data = _exact(sock, struct.unpack("!I", head)[0])
    return None if data is None else json.loads(data)


def _threads() -> int:
    "This process's threads, native ones included (Linux), else Python's."
    try: return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading
        return threading.active_count()


def serve(path:str) -> None:
    import importlib
    for m in PRELOAD: importlib.import_module(m)
    if _threads() != 1:   # a lock held by another thread would be copied held: plain kernels instead, saying why
        print(f"refused: the preloads started {_threads() - 1} threads on this machine, so forking is unsafe", flush=True)
        return
    env0, parent = _import_env(os.environ), os.getppid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the kernels are reaped by the kernel; no zombies
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    server.settimeout(1.0)   # no thread may watch the parent (forks must copy one thread): the accept loop does
    print("ready", flush=True)
    while os.getppid() == parent:   # the pytest worker gone: so is its server
        try: conn, _ = server.accept()
        except socket.timeout: continue
        fds = []
        try:
            conn.settimeout(None)
            head, fds, _, _ = socket.recv_fds(conn, 4, 3)   # the client's stdin, stdout, stderr ride on the length
            if len(head) < 4: head += _exact(conn, 4 - len(head)) or b""
            data = _exact(conn, struct.unpack("!I", head)[0]) if len(head) == 4 else None
            if data is None or len(fds) != 3: continue
            req = json.loads(data)
            if _import_env(req["env"]) != env0:
                _send(conn, {"plain": True})   # the preloads did not see this environment: the client starts a plain kernel
            elif os.fork() == 0:
                server.close()
                _child(conn, req, fds)   # never returns
        except Exception as e:   # one bad client (gone, refused, a failed fork) must not end the server
            print(f"tests/kernel_fork.py: a request failed: {e!r}", file=sys.stderr, flush=True)
        finally:
            conn.close()
            for fd in fds: os.close(fd)


def _child(conn, req:dict, fds:list) -> None:
    "Become the kernel: the client's streams, directory and environment, then IPKernelApp."
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()   # a process group of its own: the client's signals reach the kernel's subprocesses too
        for i, fd in enumerate(fds): os.dup2(fd, i)
        for fd in fds: os.close(fd)
        os.register_at_fork(after_in_child=conn.close)   # a notebook's own forks must not keep the client waiting
        os.chdir(req["cwd"])
        os.environ.clear(); os.environ.update(req["env"])
        import numpy as np
        np.random.seed()   # fresh entropy, as in a new process (Python's `random` reseeds itself after a fork)
        _send(conn, {"pid": os.getpid()})
        import threading
        def watch():   # the client gone (killed by jupyter_client): the kernel and its subprocesses go too
            while True:
                try:
                    if not conn.recv(1): break
                except OSError: break
            os.killpg(0, signal.SIGKILL)
        threading.Thread(target=watch, daemon=True).start()
        import importlib.util
        # as `python -m ipykernel_launcher` has them: the launcher's path in argv, and (the launcher drops the working
        # directory that -m puts first) no script directory in front of the path
        sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, "-f", req["connection_file"]]
        del sys.path[0]
        from ipykernel import kernelapp
        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            import atexit
            atexit._run_exitfuncs()   # what an exiting interpreter runs (history, finalizers, temporary folders)
            sys.stdout.flush(); sys.stderr.flush()
            _send(conn, {"exit": code})
        except BaseException: pass
        os._exit(code)   # no module teardown: the point of forking


def connect(path:str, connection_file:str) -> int:
    "The kernel as jupyter_client sees it: ask the server for a forked kernel, relay signals to it, exit with its status."
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        req = json.dumps({"connection_file": os.path.abspath(connection_file), "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        head = struct.pack("!I", len(req))
        socket.send_fds(sock, [head], [0, 1, 2])
        sock.sendall(req)
        first = _recv(sock)
    except OSError as e:
        print(f"tests/kernel_fork.py: no server at {path} ({e})", file=sys.stderr)
        first = None
    if first is None or first.get("plain"):   # a plain kernel: another environment, or no server to fork one
        sock.close()
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file])
    pid = first["pid"]   # the kernel's process group too (it called setsid)
    def relay(signum, _frame):
        try: os.killpg(pid, signum)
        except ProcessLookupError: pass
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, relay)
    import threading
    import time
    parent = os.getppid()
    def poll():   # papermill killed (a test's timeout): the kernel must not run on, as ipykernel's parent poller ensures
        while os.getppid() == parent: time.sleep(1.0)
        relay(signal.SIGKILL, None)
        os._exit(1)
    threading.Thread(target=poll, daemon=True).start()
    last = _recv(sock)
    return 1 if last is None else int(last["exit"])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve": serve(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "connect": sys.exit(connect(sys.argv[2], sys.argv[3]))
    else: sys.exit("usage: kernel_fork.py serve SOCKET | connect SOCKET CONNECTION_FILE")
