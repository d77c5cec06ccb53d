"""The transaction coordinator: transactional ids' state machine, durable in the metadata store, and its COMMIT/ABORT markers."""
