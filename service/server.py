"""Running the API with uvicorn: in the foreground (``tiercompact serve``) or in a thread.

:class:`ServerThread` embeds a real uvicorn server in a background thread of the
current process, bound to a loopback port (0 = a free one), for tests, the bench and
Python embedding. Stopping it is uvicorn's graceful shutdown (``should_exit``): in-flight
requests finish, then the app's lifespan shuts the node down.
"""

from __future__ import annotations

import threading
import time

import uvicorn

from service.app import create_app
from service.errors import ServiceUnavailableError
from service.node import Node


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
