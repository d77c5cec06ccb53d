"""The README's Kafka section: its protocol table is generated from the handler registry (so it cannot drift from
ApiVersions), and its quick start runs against a real server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from service.kafka.docs import kafka_api_table_markdown, readme_api_summary_markdown
from tests.kafka.conftest import KafkaServe

README = Path(__file__).resolve().parents[2] / "README.md"
KAFKA_DOC = README.parent / "docs" / "kafka.md"


def test_kafka_api_table_matches_the_registry() -> None:
    m = re.search(r"<!-- kafka-apis:begin[^>]*-->\n(.*?)<!-- kafka-apis:end -->", KAFKA_DOC.read_text(), re.S)
    assert m, "docs/kafka.md has no generated kafka-apis section"
    assert m.group(1) == kafka_api_table_markdown(), "regenerate with: python -m service.kafka.docs"


def test_the_readme_api_summary_matches_the_registry() -> None:
    m = re.search(r"<!-- kafka-apis-summary:begin[^>]*-->\n(.*?)<!-- kafka-apis-summary:end -->", README.read_text(),
                  re.S)
    assert m, "README.md has no generated kafka-apis-summary section"
    assert m.group(1) == readme_api_summary_markdown(), "regenerate with: python -m service.kafka.docs --readme"


def test_the_quick_start_snippet_runs(kafka_server: KafkaServe, topic_name: str) -> None:
    text = README.read_text()
    section = text[text.index("## Kafka clients"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[:code.index("```")].replace("127.0.0.1:9092", kafka_server.bootstrap)
    # a user runs it after the tour, on the same node: its topic must not be the tour's
    tour_topic = re.search(r'"name": "([^"]+)"', text[:text.index("## Kafka clients")])
    assert tour_topic and f'"{tour_topic.group(1)}"' not in code, "the quick start reuses the tour's topic"
    code = code.replace('"profiles"', repr(topic_name))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=README.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == """b'{"plan": "pro"}'"""
