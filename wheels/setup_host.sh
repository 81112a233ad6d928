#!/usr/bin/env bash
# Host packages the wheel build and its checks need, installed once:
# apt's arm64 architecture (the arm64 CPython headers and the aarch64 smoke
# test's root), qemu-user (runs that root) and openssl (the smoke test's
# certificate). Idempotent: does nothing when everything is there already.
set -euo pipefail

need_update=
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
  need_update=1
fi
if ! command -v qemu-aarch64 >/dev/null || ! command -v openssl >/dev/null; then
  need_update=1
fi
# Lists a day old may name .debs the mirror no longer has: refresh them daily.
stamp=/var/tmp/pgn-apt-updated
if [ -z "$(find "$stamp" -mmin -1440 2>/dev/null)" ]; then
  need_update=1
fi
if [ -n "$need_update" ]; then
  apt-get update -q >/dev/null
  touch "$stamp"
fi
missing=
command -v qemu-aarch64 >/dev/null || missing="$missing qemu-user"
command -v openssl >/dev/null || missing="$missing openssl"
if [ -n "$missing" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null
fi
