"""``relayrl.v1``: ``relayrl.proto`` and its generated modules (see the proto for the command)."""
