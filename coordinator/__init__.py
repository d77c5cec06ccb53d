"""Kafka's coordinators over the metadata store: slot ownership (coordinator epochs), the group coordinator, the transaction coordinator."""
