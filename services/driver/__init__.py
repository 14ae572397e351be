"""The driver: the controller, its loops, the gRPC inbox, fault recovery and placement."""
