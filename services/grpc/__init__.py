"""The driver's gRPC plane: server, servicers, driver-path and direct inserts, client."""
