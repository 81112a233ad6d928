"""Differential test helpers: run one scenario against grpc.server() and
pygrpc_native.server() with the same servicer and the same grpcio client,
and compare what was observed."""

import os

TRANSPORT = os.environ.get("PGN_TRANSPORT") or "h2"
"""The HTTP/2 transport of the servers under test: "h2" (the front's own,
the default) or "grpcgo" (grpc-go's), from PGN_TRANSPORT as the Go front
reads it. Differences listed only because of grpc-go's transport are
asserted as differences on grpc-go's and as equalities on h2."""
