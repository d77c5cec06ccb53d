"""The Kafka wire protocol front door: importing this package registers every API handler module."""

from service.kafka import api_versions  # noqa: F401
