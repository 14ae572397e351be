"""The experience wire contract: the proto, the zero-copy reader, batch specs and codecs."""
