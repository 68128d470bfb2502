"""A Jupyter kernel for the tests' papermill runs that starts by fork from a process with the heavy libraries imported.

Every smoke notebook (tests/test_experiments.py) runs through papermill in a fresh `python -m ipykernel_launcher`, which
spends seconds importing torch, torch._dynamo (which `torch.optim`'s first step imports), xarray, scipy and matplotlib
before the notebook's own work, and more tearing them down at exit: about a fifth of the smoke runs' time on this
project's 2-core machines. Here one server per pytest worker (`serve`) imports those libraries once; the kernelspec's
command (`connect`) asks it to fork a child, and that child becomes an ordinary ipykernel (`IPKernelApp`) with the
client's connection file, working directory, environment and standard streams. papermill, nbclient and jupyter_client
are unchanged: they start, talk to, interrupt and shut down the `connect` process as they would any kernel, and it
relays signals to the child and exits with the child's status.

Nothing of diffgeo is imported in the server, so each notebook imports the package as it is on disk. Where the client's
environment differs from the server's in a variable read at import time (MPLBACKEND, OMP_*, MKL_*, NUMBA_*, ATEN_*,
ONEDNN_*, TORCH_*, PYTHON*, ...), the `connect` process replaces itself with a plain `python -m ipykernel_launcher`
(exec) instead: the preloaded libraries could not have seen that environment. The server has one thread when it forks (checked), so no lock
is copied held.

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
                   "OPENBLAS_", "CUDA_", "PYTORCH_")
PRELOAD = ("numpy", "scipy.linalg", "scipy.special", "pandas", "xarray", "netCDF4", "matplotlib", "matplotlib.pyplot",
           "torch", "torch._dynamo", "torch.optim", "torchvision", "numba", "tqdm", "IPython", "ipykernel.kernelapp")


def _import_env(env:dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


def _send(sock, obj) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk: return None
        head += chunk
    (n,), data = struct.unpack("!I", head), b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk: return None
        data += chunk
    return json.loads(data)


def serve(path:str) -> None:
    import importlib
    import threading
    for m in PRELOAD: importlib.import_module(m)
    assert threading.active_count() == 1, f"the preloads started threads ({threading.enumerate()}): forking is unsafe"
    env0 = _import_env(os.environ)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the children are reaped by the kernel; no zombies
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        try:
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        except OSError:
            conn.close(); continue
        req = json.loads(msg)
        if _import_env(req["env"]) != env0:
            _send(conn, {"plain": True})   # the preloads did not see this environment: the client starts a plain kernel
        elif os.fork() == 0:
            server.close()
            _child(conn, req, fds)   # never returns
        conn.close()
        for fd in fds: os.close(fd)


def _child(conn, req:dict, fds:list) -> None:
    "Become the kernel: the client's streams, directory and environment, then IPKernelApp."
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        for i, fd in enumerate(fds): os.dup2(fd, i)
        for fd in fds: os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear(); os.environ.update(req["env"])
        _send(conn, {"pid": os.getpid()})
        import threading
        def watch():   # the client gone (killed by jupyter_client): the kernel goes too
            while True:
                try:
                    if not conn.recv(1): break
                except OSError: break
            os.kill(os.getpid(), signal.SIGKILL)
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
            sys.stdout.flush(); sys.stderr.flush()
            _send(conn, {"exit": code})
        except BaseException: pass
        os._exit(code)   # no interpreter teardown: the point of forking


def connect(path:str, connection_file:str) -> int:
    "The kernel as jupyter_client sees it: ask the server for a forked kernel, relay signals to it, exit with its status."
    plain = [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        req = {"connection_file": os.path.abspath(connection_file), "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(sock, [json.dumps(req).encode()], [0, 1, 2])
        first = _recv(sock)
    except OSError as e:   # no server (it died?): a plain kernel, saying so (the tests' probe notices)
        print(f"tests/kernel_fork.py: no server at {path} ({e}); starting a plain kernel", file=sys.stderr)
        first = {"plain": True}
    if first is None: return 1
    if first.get("plain"):
        sock.close()
        os.execv(sys.executable, plain)
    pid = first["pid"]
    def relay(signum, _frame):
        try: os.kill(pid, signum)
        except ProcessLookupError: pass
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, relay)
    last = _recv(sock)
    return 1 if last is None else int(last["exit"])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve": serve(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "connect": sys.exit(connect(sys.argv[2], sys.argv[3]))
    else: sys.exit("usage: kernel_fork.py serve SOCKET | connect SOCKET CONNECTION_FILE")
