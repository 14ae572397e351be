"""Benchmarks of the gRPC plane: ``grpc`` (insert throughput) and ``hostile`` (hostile clients).

The hostile bench's half-open callers are :mod:`.halfopen`; its certificates :mod:`.certs`.
"""
