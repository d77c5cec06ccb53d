"""Readers for the deployment files (docker-compose.yml, Dockerfile, pyproject.toml, Makefile).

There is no Docker engine on the machines that run the suite, so these files are checked
offline: parsed here, then compared with what the code really accepts. The Dockerfile
reader understands only what a Dockerfile of this project needs (line continuations,
comments, exec-form JSON arrays, ``KEY=value`` ENV pairs).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = ROOT / "pyproject.toml"
MAKEFILE = ROOT / "Makefile"
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict), "docker-compose.yml must be a mapping"
    return doc


def pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's ``environment`` as a dict (it may be a mapping or a KEY=value list)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def as_argv(value: str | list[str] | None) -> list[str]:
    """A compose ``command``/``entrypoint`` (string in shell form or list) as an argv."""
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str
    args: str

    def exec_form(self) -> list[str]:
        """The JSON-array form's argv (``["a", "b"]``); shell form is split like a shell would."""
        text = self.args.strip()
        if text.startswith("["):
            value = json.loads(text)
            assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
            return value
        return shlex.split(text)


def dockerfile() -> list[Instruction]:
    """The Dockerfile's instructions, continuations joined and comments dropped."""
    out: list[Instruction] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a line continuation"
    return out


def dockerfile_env(instrs: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in instrs:
        if ins.keyword != "ENV":
            continue
        parts = shlex.split(ins.args)
        if parts and "=" not in parts[0]:  # legacy "ENV KEY value" form
            env[parts[0]] = " ".join(parts[1:])
            continue
        for p in parts:
            k, _, v = p.partition("=")
            env[k] = v
    return env


def makefile_targets() -> dict[str, str]:
    """Target name -> its recipe text (prerequisites line included), for the simple rules used here."""
    text = MAKEFILE.read_text()
    targets: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-/$()]+)\s*:(?!=)(.*)$", line)
        if m and not line.startswith("\t"):
            current = m.group(1)
            targets[current] = line + "\n"
        elif current is not None and line.startswith("\t"):
            targets[current] += line + "\n"
        elif not line.strip() or line.startswith("#"):
            continue
        else:
            current = None
    return targets
