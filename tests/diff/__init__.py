"""Differential test helpers: run one scenario against grpc.server() and
pygrpc_native.server() with the same servicer and the same grpcio client,
and compare what was observed."""
