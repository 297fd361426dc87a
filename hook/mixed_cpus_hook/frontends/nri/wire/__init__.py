"""NRI's wire: ttrpc framing, the connection multiplexer and the protobuf messages."""
