"""The README's configuration tables are generated from the code, so they cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from log.config import config_reference_markdown
from service.config import options_reference_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def _section(name: str) -> str:
    text = README.read_text()
    m = re.search(rf"<!-- {name}:begin[^>]*-->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"README.md has no generated {name} section"
    return m.group(1)


def test_topic_config_table_matches_the_config_table():
    assert _section("topic-config") == config_reference_markdown(), \
        "regenerate with: tiercompact config-docs"


def test_service_options_table_matches_service_config():
    assert _section("service-options") == options_reference_markdown(), \
        "regenerate with: tiercompact config-docs --service"


def test_readme_starts_with_the_two_commands():
    head = README.read_text().splitlines()[:6]
    assert any(line.startswith("make serve") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_measured_figures_match_bench_results():
    from bench.report import report

    assert _section("bench") == report(), "regenerate with: python -m bench.report --write"
