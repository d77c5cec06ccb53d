"""The README's commands, run as a newcomer runs them: on a fresh clone with no .venv; docs/'s commands parse.

One clone of the committed HEAD is shared by the module. ``make serve`` there creates the
venv and installs the project (from pip's cache, so minutes, not seconds: these tests are
``slow`` but part of the default suite), then answers /healthz and stops on SIGTERM;
``make demo`` prints that every key reads back. ``make test`` is not run inside the suite
(it would recurse); its guard against "collected no tests" is exercised instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from service import cli
from tests.deploy import deployfiles as df

# the first make in a fresh clone builds the venv: measured on a 2-core machine at about 100 s with
# pip's cache warm and about 8 minutes with it cold (pyspark's wheel is large)
SETUP_BUDGET_S = 1200
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SETUP_BUDGET_S + 300)]


def _newcomer_env(home: Path) -> dict[str, str]:
    """The environment of a fresh shell: no venv active, no make nesting, no tiercompact settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TIERCOMPACT_", "AWS_", "MAKE", "PYTEST_"))
           and k not in ("VIRTUAL_ENV", "MFLAGS", "PYTHONPATH", "PYTHONHOME")}
    venv_bins = {str(df.ROOT / ".venv" / "bin")}
    if os.environ.get("VIRTUAL_ENV"):
        venv_bins.add(str(Path(os.environ["VIRTUAL_ENV"]) / "bin"))
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p not in venv_bins)
    env["TMPDIR"] = str(home)  # the demo's temporary data dir stays inside the test's tmp dir
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("fresh-clone")
    repo = base / "tiercompact"
    subprocess.run(["git", "clone", "--quiet", str(df.ROOT), str(repo)], check=True, timeout=120)
    assert not (repo / ".venv").exists()
    (base / "tmp").mkdir()
    yield repo
    # the clone's venv is over 1 GB and pytest keeps its last three base temp dirs; the logs stay
    shutil.rmtree(repo, ignore_errors=True)


@pytest.fixture(scope="module")
def env(clone: Path) -> dict[str, str]:
    return _newcomer_env(clone.parent / "tmp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, n: int = 40) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(ln for ln in lines[-n:] if "is ignored: it is neither a file nor a directory" not in ln)


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=2) as r:
        return json.loads(r.read())


def _make(clone: Path, env: dict[str, str], target: str, args: str, log: Path,
          timeout: float = SETUP_BUDGET_S, extra: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``make TARGET ARGS="..."`` as typed in a shell (``extra``: more variables); output also kept in ``log``."""
    argv = ["make", target] + ([f"ARGS={args}"] if args else []) + (extra or [])
    proc = subprocess.run(argv, cwd=clone, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    log.write_text(proc.stdout)
    return proc


@pytest.fixture(scope="module")
def served(clone: Path, env: dict[str, str]) -> Iterator[dict[str, object]]:
    """`make serve ARGS="--port N --kafka-port K --data-dir DIR"` until /healthz answers (and the Kafka listener
    accepts), then SIGTERM to its group."""
    port, kafka_port, data = _free_port(), _free_port(), clone.parent / "serve-data"
    log = clone.parent / "make-serve.log"
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(["make", "serve", f"ARGS=--port {port} --kafka-port {kafka_port} --data-dir {data}"],
                                cwd=clone, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    result: dict[str, object] = {"url": url, "data": data, "log": log}
    try:
        health: object = None
        while time.monotonic() - t0 < SETUP_BUDGET_S:
            assert proc.poll() is None, f"make serve exited {proc.returncode}:\n{_tail(log)}"
            try:
                health = _get_json(f"{url}/healthz")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        result["startup_s"] = round(time.monotonic() - t0, 1)
        print(f"\nfresh clone: `make serve` answered /healthz after {result['startup_s']} s (venv created)")
        result["health"] = health
        assert health is not None, f"no /healthz answer within {SETUP_BUDGET_S} s:\n{_tail(log)}"
        socket.create_connection(("127.0.0.1", kafka_port), timeout=10).close()  # the Kafka listener is open too
        # a partition, so a graceful stop leaves its clean-shutdown marker behind
        req = urllib.request.Request(f"{url}/v1/topics", data=json.dumps({"name": "newcomer"}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            result["create_status"] = r.status
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            result["rc"] = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            result["rc"] = "killed after 60 s"
    yield result


def test_make_serve_on_a_fresh_clone_answers_healthz_and_stops_on_sigterm(served: dict[str, object]) -> None:
    log = served["log"]
    assert isinstance(log, Path)
    assert served["health"] == {"status": "ok"}
    assert served["create_status"] == 201
    # make and tiercompact both got SIGTERM; either may report it (make: -15 or 2; uvicorn: re-raised)
    assert isinstance(served["rc"], int), f"make serve did not stop on SIGTERM:\n{_tail(log)}"
    port = int(str(served["url"]).rsplit(":", 1)[1])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the service still listens after SIGTERM"
    data = served["data"]
    assert isinstance(data, Path)
    assert (data / "newcomer-0" / ".clean-shutdown").exists(), f"not a graceful stop:\n{_tail(log)}"


def test_make_demo_on_the_fresh_clone_reads_every_key_back(clone: Path, env: dict[str, str],
                                                           served: dict[str, object]) -> None:
    args = "--records 2000 --keys 100"
    cli.build_parser().parse_args(["demo", *shlex.split(args)])  # the flags the README's example uses exist
    proc = _make(clone, env, "demo", args, clone.parent / "make-demo.log")
    assert proc.returncode == 0, proc.stdout[-4000:]
    verdict = [ln for ln in proc.stdout.splitlines() if "every key's latest value reads back" in ln]
    assert len(verdict) == 1, proc.stdout[-4000:]
    assert re.search(r"\(100 keys, \d+ live\): OK$", verdict[0]), verdict[0]


def test_make_test_fails_when_pytest_collects_nothing(clone: Path, env: dict[str, str],
                                                      served: dict[str, object]) -> None:
    """make test's recipe turns pytest's exit 5 into a failure. It runs with this suite's own venv (and
    a stamp that says it is set up): installing the dev extra into the fresh clone took ~70 s, and
    what it would check, make test setting itself up on a fresh clone, is what CI does on every run."""
    stamp = clone.parent / "dev-installed.stamp"
    stamp.touch()
    os.utime(stamp, (time.time() + 60, time.time() + 60))  # newer than the clone's pyproject.toml
    # one directory's collection is enough to reach pytest's exit 5 (the whole suite's took ~25 s more)
    proc = _make(clone, env, "test", "tests/deploy -k this_matches_nothing_at_all -p no:cacheprovider",
                 clone.parent / "make-test-empty.log", extra=[f"VENV={sys.prefix}", f"DEV_STAMP={stamp}"])
    assert proc.returncode != 0, proc.stdout[-4000:]
    assert "collected no tests" in proc.stdout, proc.stdout[-4000:]


def test_ci_runs_make_test() -> None:
    script = (df.ROOT / ".ci" / "run").read_text()
    commands = [ln.strip() for ln in script.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert any(re.fullmatch(r"(exec\s+)?make\s+test", c) for c in commands), commands
    assert re.search(r"^set -[a-z]*e[a-z]*o pipefail|^set -e", script, re.M), ".ci/run must stop on a failure"
    assert commands[-1] in ("make test", "exec make test"), "make test's exit code must be .ci/run's"


def test_makefile_has_the_readme_targets_and_fails_on_no_tests() -> None:
    targets = df.makefile_targets()
    for t in ("serve", "demo", "test", "bench", "lint"):
        assert t in targets, f"Makefile has no {t} target"
    recipe = targets["test"]
    assert re.search(r"-eq 5", recipe) and re.search(r"exit 1", recipe), recipe
    assert (df.ROOT / "bench" / "__main__.py").is_file(), "make bench runs python -m bench"
    for path in re.findall(r"ruff check ([^\n]+)", targets["lint"])[0].split():
        assert (df.ROOT / path).is_dir(), f"make lint checks {path}, which does not exist"


def test_readme_opens_with_make_serve_and_make_test() -> None:
    assert df.README.is_file(), "README.md is missing"
    text = df.README.read_text()
    head = "\n".join(text.splitlines()[:25])
    assert "make serve" in head and "make test" in head, "the README's first lines must give `make serve` and `make test`"
    for cmd in ("make demo", "make bench", "make lint"):
        assert cmd in text, f"the README does not mention `{cmd}`"
    _check_commands_of(df.README)


def test_docs_commands_exist() -> None:
    pages = sorted(df.DOCS.glob("*.md"))
    assert pages, "docs/ has no pages"
    assert any(_readme_command_lines(p.read_text()) for p in pages), "docs/ shows no command at all"
    for page in pages:
        _check_commands_of(page)


def _check_commands_of(page: Path) -> None:
    """Every make / tiercompact command the page shows, in a code block or inline, must exist."""
    name = page.relative_to(df.ROOT)
    targets = df.makefile_targets()
    for line in _readme_command_lines(page.read_text()):
        where = f"{name}'s `{line}`"
        argv = shlex.split(line)
        if argv[0] == "make":
            assert argv[1] in targets, f"{where}: the Makefile has no target {argv[1]!r}"
            extra = [a.split("=", 1)[1] for a in argv[2:] if a.startswith("ARGS=")]
            if argv[1] in ("serve", "demo") and extra:
                _check_cli(f"tiercompact {argv[1]} {extra[0]}", where)
        else:
            _check_cli(line, where)


def _readme_command_lines(text: str) -> list[str]:
    """``make``/``tiercompact`` commands of a page: lines of code blocks (a ``$ `` prompt and a
    trailing ``# comment`` dropped) and inline code spans."""
    out, in_block = [], False
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            out.append(raw.strip().removeprefix("$ ").split(" #", 1)[0].strip())
        else:
            out += re.findall(r"`([^`]+)`", raw)
    return [c for c in out if re.match(r"^(make|tiercompact)\s+\S", c)]


def _check_cli(command: str, where: str) -> None:
    """A concrete command must parse; a synopsis (``[--opt X]``, ``TOPIC``, ``...``) must name a real
    subcommand and only flags that subcommand has."""
    parser = cli.build_parser()
    argv = shlex.split(command)[1:]
    sub = next(a for a in parser._actions if a.dest == "command").choices
    assert argv and argv[0] in sub, f"{where}: no subcommand {argv[:1]} in {sorted(sub)}"
    if re.search(r"[\[\]<>]|\.\.\.|\b[A-Z]{2,}\b", command):
        flags = set(sub[argv[0]]._option_string_actions)
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command):
            assert flag in flags, f"{where}: {argv[0]} has no flag {flag}"
        return
    try:
        parser.parse_args(argv)
    except SystemExit:
        raise AssertionError(f"{where} does not parse") from None
