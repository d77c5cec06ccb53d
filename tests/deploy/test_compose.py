"""docker-compose.yml and the Dockerfile, checked offline against the code they drive.

No Docker engine runs here, so each fact a container would find out at start-up is checked
against its source instead: the Compose spec schema (vendored by check-jsonschema), the
options ServiceConfig really reads, the CLI parser itself, the URL loaders, pyproject's
packages and console script, and the classes inside the installed PySpark jars.
"""

from __future__ import annotations

import copy
import importlib
import importlib.metadata
import re
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
from check_jsonschema.builtin_schemas import get_builtin_schema
from setuptools import find_packages

from service import cli
from service.config import CONFIG_FILE_ENV, ENV_PREFIX, ServiceConfig, load_config
from tests.deploy import deployfiles as df

TC = "tiercompact"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return df.compose()


@pytest.fixture(scope="module")
def docker() -> list[df.Instruction]:
    return df.dockerfile()


def _tc_image_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the image built from this repo's Dockerfile."""
    services = compose["services"]
    built = services[TC]
    assert "build" in built, "the tiercompact service must build the image from this repo"
    image = built.get("image")
    return {n: s for n, s in services.items() if "build" in s or (image is not None and s.get("image") == image)}


def _instr(docker: list[df.Instruction], keyword: str) -> list[df.Instruction]:
    return [i for i in docker if i.keyword == keyword]


def _container_env(compose: dict[str, Any], docker: list[df.Instruction], name: str) -> dict[str, str]:
    """What the process in service ``name`` sees: the image's ENV overridden by compose's environment."""
    return {**df.dockerfile_env(docker), **df.environment(compose["services"][name])}


# ---------------------------------------------------------------- the Compose file itself

def test_compose_validates_against_the_vendored_compose_spec(compose: dict[str, Any]) -> None:
    schema = get_builtin_schema("vendor.compose-spec")
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    # the schema really checks something: an unknown service key is rejected
    broken = copy.deepcopy(compose)
    broken["services"][TC]["comand"] = ["serve"]
    assert not validator.is_valid(broken)


def test_depends_on_and_volumes_name_things_that_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    named_volumes = set(compose.get("volumes") or {})
    for name, svc in services.items():
        deps = svc.get("depends_on") or []
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in services, f"{name} depends on unknown service {dep!r}"
        for vol in svc.get("volumes") or []:
            source = vol.split(":", 1)[0] if isinstance(vol, str) else vol.get("source", "")
            if source and not source.startswith((".", "/", "~")):
                assert source in named_volumes, f"{name} mounts undeclared volume {source!r}"


# ---------------------------------------------------------------- environment -> ServiceConfig

def test_every_tiercompact_variable_names_a_real_option(compose: dict[str, Any],
                                                         docker: list[df.Instruction]) -> None:
    known = {ENV_PREFIX + name.upper() for name in ServiceConfig.model_fields} | {CONFIG_FILE_ENV}
    sources = {"Dockerfile ENV": df.dockerfile_env(docker)}
    for name in _tc_image_services(compose):
        sources[f"compose service {name}"] = df.environment(compose["services"][name])
    for name, svc in compose["services"].items():  # a TIERCOMPACT_ variable anywhere must be real
        sources.setdefault(f"compose service {name}", df.environment(svc))
    seen = 0
    for where, env in sources.items():
        for var in env:
            if var.startswith(ENV_PREFIX):
                seen += 1
                assert var in known, f"{where} sets {var}, which service/config.py never reads; known: {sorted(known)}"
    assert seen >= 5, "expected the compose file to configure the service through TIERCOMPACT_* variables"


def test_service_environment_loads_into_a_valid_config(compose: dict[str, Any],
                                                       docker: list[df.Instruction]) -> None:
    env = _container_env(compose, docker, TC)
    config = load_config(env=env)  # raises ServiceConfigError naming the bad option
    for name in ServiceConfig.model_fields:
        var = ENV_PREFIX + name.upper()
        if var in env:
            got = getattr(config, name)
            assert str(got) == env[var] or (isinstance(got, Path) and got == Path(env[var])), (var, got)
    assert config.host == "0.0.0.0", "inside a container the API must listen on all interfaces to be published"


# ---------------------------------------------------------------- commands -> the CLI parser

def _parse(argv: list[str]) -> Any:
    try:
        return cli.build_parser().parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on an unknown subcommand or flag
        raise AssertionError(f"`tiercompact {' '.join(argv)}` does not parse (exit {e.code})") from None


def test_commands_of_the_tiercompact_image_are_real_subcommands(compose: dict[str, Any],
                                                                docker: list[df.Instruction]) -> None:
    entry = _instr(docker, "ENTRYPOINT")[-1].exec_form()
    default_cmd = _instr(docker, "CMD")[-1].exec_form()
    parser = cli.build_parser()
    subcommands = set(next(a for a in parser._actions if a.dest == "command").choices)
    checked = 0
    for name, svc in {"<image default>": {}, **_tc_image_services(compose)}.items():
        entrypoint = df.as_argv(svc["entrypoint"]) if "entrypoint" in svc else entry
        if entrypoint[-1] != TC:
            continue  # another program of the image (spark-class): checked below
        argv = df.as_argv(svc["command"]) if "command" in svc else default_cmd
        assert argv and argv[0] in subcommands, f"{name}: {argv!r} is not one of {sorted(subcommands)}"
        args = _parse(argv)
        assert args.command in cli.COMMANDS
        if args.command in ("serve", "clean"):  # flags + this container's environment must load
            env = _container_env(compose, docker, name) if name in compose["services"] else df.dockerfile_env(docker)
            load_config(cli._flags(args), env=env, config_file=args.config)
        checked += 1
    assert checked >= 2, "the image default and the tiercompact service should both run tiercompact"


def test_a_wrong_subcommand_or_flag_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(AssertionError):
        _parse(["serv"])
    with pytest.raises(AssertionError):
        _parse(["serve", "--no-such-flag", "1"])
    assert "invalid choice: 'serv'" in capsys.readouterr().err


# ---------------------------------------------------------------- ports

def _container_ports(svc: dict[str, Any]) -> set[int]:
    out: set[int] = set()
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            out.add(int(p["target"]))
        else:
            out.add(int(str(p).split("/")[0].rsplit(":", 1)[-1]))
    return out


def test_listen_port_matches_published_exposed_and_healthchecked_port(compose: dict[str, Any],
                                                                     docker: list[df.Instruction]) -> None:
    env = _container_env(compose, docker, TC)
    port = load_config(env=env).port
    assert env.get(ENV_PREFIX + "PORT") == str(port)
    assert port in _container_ports(compose["services"][TC]), "compose publishes another port than the API's"
    exposed = {int(p.split("/")[0]) for i in _instr(docker, "EXPOSE") for p in i.args.split()}
    assert port in exposed, f"Dockerfile EXPOSE {sorted(exposed)} does not include the API port {port}"
    assert df.dockerfile_env(docker).get(ENV_PREFIX + "PORT") == str(port)
    for hc in _instr(docker, "HEALTHCHECK"):
        urls = re.findall(r"https?://[^'\"\s)]+", hc.args)
        assert urls, "the HEALTHCHECK should probe the API over HTTP"
        for url in urls:
            assert urlparse(url).port == port and urlparse(url).path == "/healthz", url


# ---------------------------------------------------------------- backends: URLs the loaders accept

def test_object_store_url_is_accepted_and_points_at_the_bucket_minio_init_creates(
        compose: dict[str, Any], docker: list[df.Instruction]) -> None:
    from remote import load_object_store
    from remote.s3_store import S3ObjectStore

    config = load_config(env=_container_env(compose, docker, TC))
    options = {"endpoint_url": config.s3_endpoint} if config.s3_endpoint else {}
    if config.s3_region:
        options["region"] = config.s3_region
    store = load_object_store(config.remote_url, **options)  # S3 client is created lazily: no network here
    assert isinstance(store, S3ObjectStore)
    services = compose["services"]
    init_cmd = " ".join(df.as_argv(services["minio-init"].get("command")))
    assert re.search(rf"\bmc mb\b[^&;]*\blocal/{re.escape(store.bucket)}\b", init_cmd), \
        f"minio-init does not create bucket {store.bucket!r}: {init_cmd}"
    endpoint = urlparse(config.s3_endpoint or "")
    assert endpoint.hostname == "minio" and endpoint.hostname in services
    assert endpoint.port in _minio_api_ports(services["minio"])
    minio_env = df.environment(services["minio"])
    for name in _tc_image_services(compose):  # the driver and the Spark executors both read S3
        env = df.environment(services[name])
        if name == TC or name == "spark-worker":
            assert env.get("AWS_ACCESS_KEY_ID") == minio_env["MINIO_ROOT_USER"], name
            assert env.get("AWS_SECRET_ACCESS_KEY") == minio_env["MINIO_ROOT_PASSWORD"], name
    assert minio_env["MINIO_ROOT_USER"] in init_cmd and minio_env["MINIO_ROOT_PASSWORD"] in init_cmd


def _minio_api_ports(svc: dict[str, Any]) -> set[int]:
    argv = df.as_argv(svc.get("command"))
    address = argv[argv.index("--address") + 1] if "--address" in argv else ":9000"  # MinIO's default
    return {int(address.rsplit(":", 1)[1])}


def test_metadata_url_is_accepted_and_points_at_the_postgres_service(
        compose: dict[str, Any], docker: list[df.Instruction], monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlalchemy

    import metadata.sql
    from metadata import load_metadata_manager

    opened: list[str] = []

    class Recorder:
        def __init__(self, url: str, **options: Any) -> None:
            opened.append(url)

    # the real scheme dispatch runs; only the connection to a server that is not here is replaced
    monkeypatch.setattr(metadata.sql, "SqlRemoteLogMetadataManager", Recorder)
    url = load_config(env=_container_env(compose, docker, TC)).metadata_url
    load_metadata_manager(url)
    assert opened == [url]
    parsed = sqlalchemy.engine.make_url(metadata.sql.normalize_url(url))
    engine = sqlalchemy.create_engine(parsed)  # loads the dialect and the psycopg driver; connects lazily
    try:
        assert engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
    finally:
        engine.dispose()
    services = compose["services"]
    pg = df.environment(services["postgres"])
    assert parsed.host == "postgres" and (parsed.port or 5432) == 5432
    assert (parsed.username, parsed.password, parsed.database) == (
        pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])
    deps = services[TC].get("depends_on") or {}
    assert "postgres" in deps and "minio-init" in deps, "the service must start after its backends"


# ---------------------------------------------------------------- the Dockerfile vs pyproject

def test_dockerfile_copies_every_package_pyproject_installs(docker: list[df.Instruction]) -> None:
    project = df.pyproject()
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    top = {p.split(".")[0] for p in find_packages(where=str(df.ROOT), include=include)}
    assert {"log", "remote", "metadata", "cleaner", "service"} <= top
    copied: set[str] = set()
    for ins in _instr(docker, "COPY"):
        parts = [p for p in ins.exec_form() if not p.startswith("--")]
        copied.update(Path(src).as_posix().strip("./").split("/")[0] for src in parts[:-1])
    missing = top - copied
    assert not missing, f"Dockerfile does not COPY packages {sorted(missing)} that pyproject installs"
    # what the build of the project itself needs: pyproject and the readme it declares
    assert "pyproject.toml" in copied
    readme = project["project"].get("readme")
    if readme:
        assert (readme if isinstance(readme, str) else readme["file"]) in copied


def test_entrypoint_runs_the_console_script(docker: list[df.Instruction]) -> None:
    scripts = df.pyproject()["project"]["scripts"]
    entry = _instr(docker, "ENTRYPOINT")[-1].exec_form()
    assert entry[-1] in scripts, f"ENTRYPOINT {entry} does not run a console script of {sorted(scripts)}"
    if entry[0] == "tini":  # tini reaps zombies and forwards SIGTERM; it must be installed
        assert any(re.search(r"\btini\b", i.args) for i in _instr(docker, "RUN"))
    module, _, func = scripts[entry[-1]].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    assert _parse(_instr(docker, "CMD")[-1].exec_form()).command == "serve"


# ---------------------------------------------------------------- Spark from the same image

def _pyspark_jars() -> list[Path]:
    """The jars PySpark runs from, spark-core first (where the deploy classes live)."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"),
                  key=lambda j: (not j.name.startswith("spark-core"), j.name))
    assert jars, "pyspark ships no jars"
    return jars


def _class_in_jars(cls: str, jars: list[Path]) -> bool:
    entry = cls.replace(".", "/") + ".class"
    for jar in jars:
        with zipfile.ZipFile(jar) as z:
            try:
                z.getinfo(entry)
                return True
            except KeyError:
                continue
    return False


def test_spark_services_run_classes_in_the_installed_pyspark(compose: dict[str, Any],
                                                             docker: list[df.Instruction]) -> None:
    services = compose["services"]
    spark = {n: s for n, s in _tc_image_services(compose).items()
             if df.as_argv(s.get("entrypoint"))[-1:] == ["spark-class"]}
    assert {"spark-master", "spark-worker"} <= set(spark)
    # spark-class is a script the pyspark distribution installs into the venv's bin (on PATH)
    files = [str(f) for f in importlib.metadata.files("pyspark") or []]
    assert any(re.fullmatch(r"(\.\./)+bin/spark-class", f) for f in files)
    jars = _pyspark_jars()
    for name, svc in spark.items():
        argv = df.as_argv(svc["command"])
        assert _class_in_jars(argv[0], jars), f"{name}: class {argv[0]} is not in the pyspark jars"
    assert not _class_in_jars("org.apache.spark.deploy.master.NoSuchMaster", jars[:1])  # the check can fail

    master = df.as_argv(services["spark-master"]["command"])
    assert master[0] == "org.apache.spark.deploy.master.Master"
    port = int(master[master.index("--port") + 1]) if "--port" in master else 7077
    worker = df.as_argv(services["spark-worker"]["command"])
    assert worker[0] == "org.apache.spark.deploy.worker.Worker"
    assert f"spark://spark-master:{port}" in worker[1:]
    assert port in _container_ports(services["spark-master"])

    # the Java the image installs must run this Spark (Spark 4 needs Java 17+, Spark 3 Java 8+)
    import pyspark

    needs = 17 if int(pyspark.__version__.split(".")[0]) >= 4 else 8
    java = [int(v) for i in _instr(docker, "RUN") for v in re.findall(r"openjdk-(\d+)-jre", i.args)]
    assert java and min(java) >= needs, f"Dockerfile installs Java {java}, pyspark {pyspark.__version__} needs {needs}+"


def test_spark_worker_work_dir_is_writable_by_the_image_user(compose: dict[str, Any],
                                                             docker: list[df.Instruction]) -> None:
    """The Worker makes its work dir at start and exits when it cannot; by default that is
    $SPARK_HOME/work, inside the root-owned site-packages, while the image runs as a system user."""
    users = [i.args.split()[0] for i in _instr(docker, "USER")]
    svc = compose["services"]["spark-worker"]
    argv, env = df.as_argv(svc.get("command")), df.environment(svc)
    work = argv[argv.index("--work-dir") + 1] if "--work-dir" in argv else env.get("SPARK_WORKER_DIR")
    if not users or users[-1] in ("root", "0"):
        return
    assert work, "spark-worker needs SPARK_WORKER_DIR (or --work-dir): $SPARK_HOME/work is not writable by " + users[-1]
    owned = [p for i in _instr(docker, "RUN") for p in re.findall(rf"chown\s+(?:-R\s+)?{users[-1]}\S*\s+(\S+)", i.args)]
    assert PurePosixPath(work).is_relative_to("/tmp") or any(
        PurePosixPath(work).is_relative_to(o) for o in owned), f"{work} is not writable by {users[-1]}"
    # the variable is one this Spark reads
    core = next(j for j in _pyspark_jars() if j.name.startswith("spark-core"))
    with zipfile.ZipFile(core) as z:
        assert b"SPARK_WORKER_DIR" in z.read("org/apache/spark/deploy/worker/WorkerArguments.class")


def test_other_programs_of_the_image_do_not_inherit_the_api_healthcheck(compose: dict[str, Any],
                                                                        docker: list[df.Instruction]) -> None:
    """The image's HEALTHCHECK probes the API's /healthz; a container of the same image running
    something else (spark-class) must disable or replace it, or it shows as unhealthy forever."""
    if not _instr(docker, "HEALTHCHECK"):
        return
    entry = _instr(docker, "ENTRYPOINT")[-1].exec_form()
    for name, svc in _tc_image_services(compose).items():
        entrypoint = df.as_argv(svc["entrypoint"]) if "entrypoint" in svc else entry
        if entrypoint[-1] == TC:
            continue
        hc = svc.get("healthcheck") or {}
        assert hc.get("disable") is True or "test" in hc, f"{name} inherits the API's HEALTHCHECK"
