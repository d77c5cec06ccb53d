"""The README and docs/ are generated from the code where they can drift: configuration tables, measured figures.

The configuration tables live in docs/configuration.md, the full benchmark tables in
docs/benchmarks.md and a short summary of them in the README, which stays a short page for users
(the two commands first, at most 12 KB). No user page names an issue number or a seed file.
"""

from __future__ import annotations

import re
from pathlib import Path

from log.config import config_reference_markdown
from service.config import options_reference_markdown

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
BENCHMARKS = DOCS / "benchmarks.md"
README_MAX_BYTES = 12 * 1024


def _section(name: str, path: Path) -> str:
    text = path.read_text()
    m = re.search(rf"<!-- {name}:begin[^>]*-->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"{path.relative_to(ROOT)} has no generated {name} section"
    return m.group(1)


def test_topic_config_table_matches_the_config_table():
    assert _section("topic-config", CONFIGURATION) == config_reference_markdown(), \
        "regenerate with: tiercompact config-docs (into docs/configuration.md)"


def test_service_options_table_matches_service_config():
    assert _section("service-options", CONFIGURATION) == options_reference_markdown(), \
        "regenerate with: tiercompact config-docs --service (into docs/configuration.md)"


def test_readme_starts_with_the_two_commands():
    head = README.read_text().splitlines()[:6]
    assert any(line.startswith("make serve") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_readme_is_a_short_page():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; the reference belongs in docs/"


def test_measured_figures_match_bench_results():
    from bench.report import report

    assert _section("bench", BENCHMARKS) == report(), "regenerate with: python -m bench.report --write"


def test_readme_summary_matches_bench_results():
    from bench.report import summary

    assert _section("bench-summary", README) == summary(), "regenerate with: python -m bench.report --write"


def test_readme_links_to_docs_that_exist():
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text())
    assert links, "the README points nowhere in docs/"
    for link in links:
        assert (ROOT / link).is_file(), f"the README links to {link}, which does not exist"


def test_user_pages_name_no_issue_number_or_seed_file():
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            where = f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
            assert not re.search(r"(?<![\w&/])#\d+\b", line), f"names an issue number: {where}"
            assert not re.search(r"\bseeds?\s+0\d\d\b|seeds/", line, re.I), f"names a seed file: {where}"


def test_user_pages_name_files_that_exist():
    """A source file a page names (`cleaner/x.py`, `scripts/y.sh`) must exist: code moves, pages follow."""
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for path in re.findall(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|pyx|pxi|sh|toml|yml))`", page.read_text()):
            assert (ROOT / path).is_file(), f"{page.relative_to(ROOT)} names {path}, which does not exist"
