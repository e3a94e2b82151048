"""The entry scripts run as commands, each in a process forked from one that has already imported the libraries.

`python train.py ...` spends ~1.5 s of CPU importing jax, flax, orbax, hydra and tensorflow-datasets before the
command does anything, and the suite runs several hundred commands. `run` and `Popen` take subprocess's arguments;
a command starting one of the entry scripts (train.py, eval.py, export.py, predict.py) runs in a child of a server
process that imported what those scripts import, under the same environment (one server per environment). The
child becomes that command: its own pid, working directory, argv, environment, standard streams and signal
handling, the script run as `__main__`, the interpreter's own exit. Only the imports are shared;
tests/test_commands.py checks that a forked command prints, writes, exits and stops as in a fresh process.
Anything else (`python -c ...`, `-m`, input on stdin) runs as a subprocess, as does every command when
ZOO_TEST_REAL_PROCESSES=1. What happens while the libraries load is tested with fresh processes
(tests/test_startup.py, tests/test_signal_phases.py).
"""
import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SCRIPTS = ("train.py", "eval.py", "export.py", "predict.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_servers = {}  # frozen environment -> Server, the most recently used last
MAX_SERVERS = 3  # each holds ~220 MB; a test giving each command an environment of its own gains nothing from one
_lock = threading.Lock()


def run(args, *, cwd=None, env=None, capture_output=False, text=False, timeout=None, check=False, stdout=None,
        stderr=None, **kwargs):
    """subprocess.run's arguments and result."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    server, env = _server_for(args, cwd, env, kwargs)
    if server is None:
        return subprocess.run(args, cwd=cwd, env=env, text=text, timeout=timeout, check=check, stdout=stdout,
                              stderr=stderr, **kwargs)
    with Forked(server, args, cwd, env, stdout, stderr, text) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess(args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def Popen(args, *, cwd=None, env=None, stdout=None, stderr=None, text=False, **kwargs):  # noqa: N802 — as subprocess
    """subprocess.Popen's arguments; the object has pid, returncode, stdout, stderr, poll, wait, communicate,
    send_signal, terminate and kill."""
    server, env = _server_for(args, cwd, env, kwargs)
    if server is None:
        return subprocess.Popen(args, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=text, **kwargs)
    return Forked(server, args, cwd, env, stdout, stderr, text)


def _server_for(args, cwd, env, kwargs):
    """(the server that can start this command, or None when it must be a real subprocess; its environment)."""
    if os.environ.get("ZOO_TEST_REAL_PROCESSES") == "1" or kwargs or not isinstance(args, (list, tuple)):
        return None, env  # stdin, input, shell, start_new_session...: what the forked child does not reproduce
    if len(args) < 2 or args[0] != sys.executable:
        return None, env
    script = os.path.join(cwd or os.getcwd(), str(args[1]))
    if os.path.dirname(os.path.realpath(script)) != ROOT or os.path.basename(script) not in SCRIPTS:
        return None, env
    env = dict(os.environ if env is None else env)
    # pytest names the running test in the environment; nothing reads it while importing
    key = tuple(sorted((k, v) for k, v in env.items() if k != "PYTEST_CURRENT_TEST"))
    with _lock:
        server = _servers.pop(key, None) or Server(env)
        _servers[key] = server
        while len(_servers) > MAX_SERVERS:
            _servers.pop(next(iter(_servers))).close(wait=False)
        return server, env


class Server:
    """A process that imported the entry scripts' libraries under `env` and forks a child per command."""

    def __init__(self, env: dict):
        self.dir = tempfile.mkdtemp(prefix="zoo-commands-")
        self.address = os.path.join(self.dir, "socket")
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), self.address], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        ready = self.proc.stdout.readline()
        if ready.strip() != "ready":
            self.log.seek(0)
            raise RuntimeError(f"the command server did not start:\n{self.log.read()}")
        atexit.register(self.close)

    def close(self, wait: bool = True):
        """The server exits once the commands it started have ended, their exit statuses reported."""
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        if wait:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # a command left running by its test: it goes on alone
                self.proc.kill()
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)


class Forked:
    """One command forked by a Server: subprocess.Popen's interface, the exit status as the server reports it."""

    def __init__(self, server: Server, args, cwd, env: dict, stdout, stderr, text: bool):
        self.args, self.returncode = list(args), None
        devnull = os.open(os.devnull, os.O_RDWR)
        out_fd, self.stdout = _stream(stdout, 1, devnull, text)
        err_fd, self.stderr = (os.dup(out_fd), None) if stderr == subprocess.STDOUT else \
            _stream(stderr, 2, devnull, text)
        request = json.dumps({"argv": [str(a) for a in args], "cwd": os.path.abspath(cwd or os.getcwd()),
                              "env": env}).encode()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(server.address)
        try:
            socket.send_fds(self._conn, [len(request).to_bytes(8, "big") + request], [devnull, out_fd, err_fd])
        finally:
            for fd in (devnull, out_fd, err_fd):
                os.close(fd)
        self._buffer, self._readers = b"", None
        self.pid = int(self._line())

    def poll(self):
        if self.returncode is None:
            line = self._line(timeout=0)
            if line is not None:
                self.returncode = os.waitstatus_to_exitcode(int(line))
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = os.waitstatus_to_exitcode(int(line))
        return self.returncode

    def _line(self, timeout=None):
        """The server's next line, or None when none came within `timeout` seconds (None: wait for it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(256)
            if not chunk:
                raise RuntimeError(f"the command server lost {self.args}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def communicate(self, input=None, timeout=None):  # noqa: A002 — subprocess's name
        """As subprocess's: after a TimeoutExpired, calling it again still returns everything the command wrote."""
        if input is not None:
            raise ValueError("a forked command reads no input; pass stdin=... to run it as a subprocess")
        if self._readers is None:
            self._read = {}
            self._readers = [threading.Thread(target=lambda s=s: self._read.__setitem__(s, s.read()), daemon=True)
                             for s in (self.stdout, self.stderr) if s is not None]
            for r in self._readers:
                r.start()
        self.wait(timeout)
        for r in self._readers:
            r.join()
        for s in (self.stdout, self.stderr):
            if s is not None:
                s.close()
        return self._read.get(self.stdout), self._read.get(self.stderr)

    def send_signal(self, sig):
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it has just exited, and the server has reaped it: as for a subprocess
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for s in (self.stdout, self.stderr):
            if s is not None and not s.closed:
                s.close()
        if self.returncode is None:
            self.wait()
        self._conn.close()


def _stream(where, own_fd: int, devnull: int, text: bool):
    """(the descriptor the child writes to, the file the caller reads, or None) for a stdout/stderr argument."""
    if where == subprocess.PIPE:
        r, w = os.pipe()
        return w, open(r, "r" if text else "rb")
    if where is None:
        return os.dup(own_fd), None  # inherited, as a subprocess's
    if where == subprocess.DEVNULL:
        return os.dup(devnull), None
    return os.dup(where if isinstance(where, int) else where.fileno()), None


def serve(address: str) -> None:
    """The server: import the entry scripts' libraries as they do, then fork a child per request. Ends when its
    stdin closes."""
    import selectors

    sys.path[0] = ROOT  # as for `python train.py`
    from zoo.startup import loading_libraries

    with loading_libraries():  # the entry scripts' imports, then the libraries their commands load on the way
        import hydra  # noqa: F401
        import optuna  # noqa: F401 — the sweeps' search
        from hydra.core.plugins import Plugins

        import zoo.cli  # noqa: F401
        import zoo.command_line  # noqa: F401
        import zoo.config  # noqa: F401
        import zoo.evaluate  # noqa: F401
        import zoo.export.artifact  # noqa: F401
        import zoo.export.predict  # noqa: F401
        import zoo.population.launch  # noqa: F401
        import zoo.population.train  # noqa: F401
        import zoo.train  # noqa: F401

        Plugins.instance()  # Hydra's scan of the installed launchers and sweepers
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    print("ready", flush=True)
    waiting = {}  # pid -> the connection its exit status goes to
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)
    closing = False
    while not closing or waiting:
        for key, _ in events.select(timeout=0.02):
            if key.fileobj is sys.stdin:
                if not sys.stdin.readline():  # no more commands: exit once those running have ended
                    closing = True
                    events.unregister(sys.stdin)
                    events.unregister(listener)
                continue
            conn, _ = listener.accept()
            header, fds, _, _ = socket.recv_fds(conn, 8, 3)
            size, body = int.from_bytes(header, "big"), b""
            while len(body) < size:
                body += conn.recv(size - len(body))
            request = json.loads(body)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                events.close()
                listener.close()
                conn.close()
                for fd in waiting.values():
                    fd.close()
                _run_as_main(request, fds)
                sys.exit(0)  # the script returned: the interpreter ends as after `python script.py`
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{status}\n".encode())
                except OSError:  # the caller gave up on it
                    pass
                conn.close()


def _run_as_main(request: dict, fds: list) -> None:
    """In the forked child: the command's streams, working directory, environment and argv, then its script as
    `__main__`, as `python script.py` runs it."""
    import importlib.machinery
    import types

    import numpy as np

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"][1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    np.random.seed()  # a fresh process's numpy draws its own seed; `random` reseeds itself after a fork
    path = os.path.abspath(sys.argv[0])
    main = types.ModuleType("__main__")
    main.__file__, main.__cached__, main.__spec__ = path, None, None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    exec(code, main.__dict__)


if __name__ == "__main__":
    serve(sys.argv[1])
