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

/* One event, as pgn_recv describes it. */
typedef struct {
    uint64_t call_id;
    int32_t kind;        /* PGN_EVENT_* */
    int32_t method_id;   /* -1 for PGN_EVENT_LOOKUP */
    uint64_t payload_len; /* bytes pgn_fill writes for it; 0 for PGN_EVENT_CANCEL */
    uint64_t key_len;    /* bytes of its client key; 0 unless with_keys */
} pgn_event;

/* The queues pgn_recv reads. */
#define PGN_QUEUE_MAIN 0
#define PGN_QUEUE_WATCHED 1

/* pgn_recv's arguments and results. A batch is taken in two steps, so that
 * each payload is copied once, from Go's buffers straight into memory the
 * caller allocated for it (a Python bytes object): pgn_recv waits (call it
 * without the GIL) and describes the batch in events; the caller allocates
 * what the sizes say and calls pgn_fill(batch, ...) exactly once for every
 * PGN_RECV_BATCH. */
typedef struct {
    /* in */
    int32_t queue;      /* PGN_QUEUE_MAIN or PGN_QUEUE_WATCHED */
    int32_t max_events; /* room in events, >= 1 */
    int64_t max_bytes;  /* payload bytes per batch, unless the first event alone has more */
    int64_t timeout_ns; /* < 0: wait until an event comes or the front stops */
    int32_t with_keys;  /* describe and copy client keys */
    pgn_event *events;
    /* out, for PGN_RECV_BATCH */
    int32_t count;
    uint64_t keys_len; /* the client keys' bytes, all together */
    uint64_t batch;
} pgn_recv_args;

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
