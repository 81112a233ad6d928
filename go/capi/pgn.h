/* Shared constants of the Go core's C API (exports.go) and the CPython
 * shim (python/pygrpc_native/_native.c). Go checks at compile time that the
 * event kinds and results match its own. */
#ifndef PGN_H
#define PGN_H

#include <stddef.h>
#include <stdint.h>

/* Event kinds, as the first item of an event tuple. */
#define PGN_EVENT_CALL 1
#define PGN_EVENT_CANCEL 2
#define PGN_EVENT_LOOKUP 3

/* The method id that routes a call to the fallback server. */
#define PGN_FALLBACK (-1)

/* Results of operations on a call (front.Result), plus PGN_BAD_HANDLE,
 * PGN_UNKNOWN_METHOD (pgn_route to a method id the front lacks),
 * PGN_INVALID_METADATA (the call was ended with INTERNAL; see errOut) and
 * PGN_INVALID_ARGUMENT (nothing was done; see errOut). */
#define PGN_OK 0
#define PGN_ENDED 1
#define PGN_UNKNOWN 2
#define PGN_WOULD_BLOCK 3
#define PGN_STOPPED 4
#define PGN_BAD_HANDLE 5
#define PGN_UNKNOWN_METHOD 6
#define PGN_INVALID_METADATA 7
#define PGN_INVALID_ARGUMENT 8

/* Results of pgn_recv. */
#define PGN_RECV_BATCH 1
#define PGN_RECV_TIMEOUT 0
#define PGN_RECV_CLOSED (-1)
#define PGN_RECV_BAD_HANDLE (-2)

/* Error kinds of pgn_new and pgn_start: which Python exception to raise. */
#define PGN_ERR_VALUE 1
#define PGN_ERR_OS 2
#define PGN_ERR_RUNTIME 3

#endif
