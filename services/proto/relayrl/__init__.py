"""The ``relayrl`` protobuf package."""
