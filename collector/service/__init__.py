"""The collector's gRPC service: query lifecycle, assignment, ingestion and phase closing."""
