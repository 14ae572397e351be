"""Protocol buffers of relayrl's gRPC API (generated modules under ``relayrl/v1``)."""
