"""Running the API with uvicorn: in the foreground (``tiercompact serve``) or in a thread.

:func:`serve_in_foreground` is ``tiercompact serve``: SIGTERM or SIGINT starts a graceful
stop that is over within :data:`STOP_BUDGET_S` seconds whatever the node is doing.
In-flight requests get :data:`REQUEST_DRAIN_S` to finish, then the app's lifespan shuts the
node down (``Node.shutdown``: every wait bounded, abandoned work recovered at the next start)
and the process exits with status 0. uvicorn's own handler would re-raise the signal after
the stop, so the process would end *by* the signal (a shell prints "Terminated"); ours does
not. A request thread still blocked in the node at the end cannot hold the exit up either,
and a watchdog ends the process with status 1 (after dumping every thread's stack) should a
stop ever overrun the budget. A second signal forces uvicorn to stop waiting for requests.

:class:`ServerThread` embeds a real uvicorn server in a background thread of the
current process, bound to a loopback port (0 = a free one), for tests, the bench and
Python embedding. Stopping it is uvicorn's graceful shutdown (``should_exit``): in-flight
requests finish, then the app's lifespan shuts the node down.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn

from service.app import create_app
from service.errors import ServiceUnavailableError
from service.node import Node

logger = logging.getLogger(__name__)

#: SIGTERM to exit, at most (the node's own shutdown takes at most Node.shutdown's timeout)
STOP_BUDGET_S = 10.0
#: how long in-flight requests may take to finish once a stop begins
REQUEST_DRAIN_S = 2
#: when the watchdog gives up on a stop and exits with status 1
WATCHDOG_S = 9.5


class _ForegroundServer(uvicorn.Server):
    """uvicorn's server with signal handling that stops gracefully and then exits normally."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stop_requested_at: float | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
        # unlike uvicorn's, no re-raise of the captured signal: the stop was graceful

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
            logger.info("received %s: stopping (within %.0f s)", signal.Signals(sig).name, STOP_BUDGET_S)
            threading.Thread(target=_watchdog, name="tiercompact-stop-watchdog", daemon=True).start()
        self.handle_exit(sig, frame)


def _watchdog() -> None:
    time.sleep(WATCHDOG_S)
    logger.error("the graceful stop did not finish within %.1f s; exiting now. Threads:", WATCHDOG_S)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    _hard_exit(1)


def _hard_exit(status: int) -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def serve_in_foreground(app: Any, *, host: str, port: int, log_level: str) -> int:
    """Run ``app`` until SIGTERM/SIGINT; returns the exit status (0 after a graceful stop)."""
    server = _ForegroundServer(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                              lifespan="on", timeout_graceful_shutdown=REQUEST_DRAIN_S))
    server.run()
    if server.started is False and server.stop_requested_at is None:
        return 1  # did not start (uvicorn logged why)
    # A request thread (AnyIO workers and the job pool are not daemons) still blocked in the
    # node would make the interpreter wait for it at exit: give such threads a second (within
    # the budget), then leave without them (the node is already shut down).
    deadline = min((server.stop_requested_at or time.monotonic()) + STOP_BUDGET_S - 2.0, time.monotonic() + 1.0)
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join(max(deadline - time.monotonic(), 0.0))
    stuck = [t.name for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]
    if stuck:
        logger.warning("exiting without %d request thread(s) still blocked: %s", len(stuck), stuck)
        _hard_exit(0)
    return 0


class ServerThread:
    def __init__(self, node: Node, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.node = node
        app = create_app(node, manage_lifecycle=True)
        self._config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                      lifespan="on", timeout_graceful_shutdown=30)
        self.server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self.server.run, name="tiercompact-uvicorn", daemon=True)

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServiceUnavailableError("the HTTP server did not start; see the log for the reason")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        sock = self.server.servers[0].sockets[0]
        return int(sock.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self._config.host}:{self.port}"

    def stop(self, timeout: float = 60.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
