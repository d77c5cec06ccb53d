"""The Kafka wire protocol front door: importing this package registers every API handler module."""

from service.kafka import api_versions  # noqa: F401
from service.kafka import metadata_api  # noqa: F401
from service.kafka import admin  # noqa: F401
from service.kafka import admin_configs  # noqa: F401
from service.kafka import fetch  # noqa: F401
from service.kafka import offsets  # noqa: F401
from service.kafka import produce  # noqa: F401
from service.kafka import init_producer_id  # noqa: F401
from service.kafka import find_coordinator  # noqa: F401
from service.kafka import groups  # noqa: F401
from service.kafka import group_offsets  # noqa: F401
from service.kafka import group_admin  # noqa: F401
