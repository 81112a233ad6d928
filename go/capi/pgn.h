/* pgn.h: the C API of the Go core (go/capi, built with -buildmode=c-archive
 * as libpgn), as the CPython shim (python/pygrpc_native/_native.c) uses it.
 * Every export is declared here with its contract; cgo's generated libpgn.h
 * declares the same functions from exports.go (the Go build checks that the
 * two agree; see the end of this file), and includes this header.
 *
 * One convention for every export:
 *
 *  - It returns a pgn_result (as an int). PGN_OK means it did what it says;
 *    every other code is listed below with what it means. pgn_release and
 *    pgn_fill return nothing: they cannot fail.
 *  - Values come back through out-parameters, written only on PGN_OK.
 *  - An export whose last parameter is `char **err` sets *err to a message
 *    (malloc'ed; the caller frees it) exactly when it returns a code marked
 *    "with *err" below, and leaves *err alone otherwise. Initialize it to
 *    NULL and free it whatever the code (free(NULL) is a no-op).
 *  - "Fails" below means: a failure of go/front is PGN_INVALID_ARGUMENT (a
 *    bad argument or configuration), PGN_OS_ERROR (the system refused, e.g.
 *    an address that can't be bound) or PGN_FAILED (anything else), with
 *    *err, and nothing was done.
 *  - The first parameter is the front's handle (from pgn_new); a handle that
 *    is not live (released, or never issued) is PGN_BAD_HANDLE, never a
 *    crash. Operations on a call take its id second; Go validates every id
 *    (PGN_UNKNOWN), so no id can reach freed memory.
 *  - Inputs (pgn_bytes, args structs, arrays) are borrowed: Go reads them
 *    during the call and copies what it keeps. Outputs Go allocates
 *    (pgn_buffer, *err) are malloc'ed, and the caller frees them.
 *  - Every export may be called from any thread, concurrently with the
 *    others, except pgn_release, which the caller makes the last call on its
 *    handle. None touches Python. The ones that can wait are marked "may
 *    block": the shim calls them without the GIL.
 *  - Inputs cross as C values (metadata as an array of pairs); only the
 *    front's configuration and TLS credentials are documents, in JSON
 *    (go/front/config.go, tls.go). Structured results (pgn_call_details,
 *    pgn_metrics) come back in the one tagged encoding of go/capi/encode.go,
 *    which the shim turns into Python objects.
 */
#ifndef PGN_H
#define PGN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- results ------------------------------------------------------------ */

/* Results of every export. The first six are front.Result's, in its order
 * (exports.go checks each at compile time); the rest are the C API's own. */
typedef enum {
    PGN_OK = 0,
    /* The call already ended (finished, cancelled, deadline passed); the
     * operation was dropped. A normal race, not an error. */
    PGN_ENDED = 1,
    /* The front never issued this call id. */
    PGN_UNKNOWN = 2,
    /* The call's buffer is full: retry with block = 1 (may block). */
    PGN_WOULD_BLOCK = 3,
    /* The front has stopped: every call has ended (pgn_recv: and every
     * event was taken). */
    PGN_STOPPED = 4,
    /* The message is over grpc.max_send_message_length: it ends the call
     * with RESOURCE_EXHAUSTED, after what was sent before it (only on a
     * front whose config has "raise_send_limit"; others return PGN_OK). */
    PGN_TOO_LARGE = 5,
    /* No live front by this handle. */
    PGN_BAD_HANDLE = 6,
    /* pgn_route: no such method id, no fallback, or the call was not
     * waiting for a route; with *err. */
    PGN_UNKNOWN_METHOD = 7,
    /* Metadata gRPC can't carry; the call was ended with INTERNAL; with
     * *err. */
    PGN_INVALID_METADATA = 8,
    /* A bad argument or configuration; nothing was done; with *err. */
    PGN_INVALID_ARGUMENT = 9,
    /* The operating system refused (binding an address, the event
     * descriptor); with *err. */
    PGN_OS_ERROR = 10,
    /* Anything else that failed (starting twice, ...); with *err. */
    PGN_FAILED = 11,
} pgn_result;

/* ---- argument and result types ------------------------------------------ */

/* Bytes Go reads during the call: UTF-8 text for names and paths. */
typedef struct {
    const char *data; /* may be NULL when len is 0 */
    size_t len;
} pgn_bytes;

/* Bytes Go malloc'ed for the caller, who frees data. */
typedef struct {
    char *data;
    size_t len;
} pgn_buffer;

/* Metadata: (key, value) pairs in order; a key may repeat. */
typedef struct {
    pgn_bytes key;
    pgn_bytes value;
} pgn_pair;

typedef struct {
    pgn_pair *pairs; /* NULL: no metadata */
    size_t count;
} pgn_metadata;

/* Event kinds, as pgn_event.kind and the first item of an event tuple. */
#define PGN_EVENT_CALL 1   /* a call: payload is its request */
#define PGN_EVENT_CANCEL 2 /* a call ended without being finished */
#define PGN_EVENT_LOOKUP 3 /* a call to an unknown path: route it */
#define PGN_EVENT_MESSAGE 4    /* a request message of a client-streaming call */
#define PGN_EVENT_HALF_CLOSE 5 /* a client-streaming call's client sent its last message */
#define PGN_EVENT_ROOM 6       /* a call's buffer has room again (pgn_notify_room) */

/* The method id that routes a call to the fallback server. */
#define PGN_FALLBACK (-1)

/* One event, as pgn_recv describes it. */
typedef struct {
    uint64_t call_id;
    int32_t kind;         /* PGN_EVENT_* */
    int32_t method_id;    /* -1 for PGN_EVENT_LOOKUP */
    uint64_t payload_len; /* bytes pgn_fill writes for it; 0 without a payload */
    uint64_t key_len;     /* bytes of its client key; 0 unless with_keys */
    /* 1: the event carries a payload (a request, a request message, a
     * path); 0: none (PGN_EVENT_CANCEL, PGN_EVENT_HALF_CLOSE, PGN_EVENT_ROOM,
     * and the PGN_EVENT_CALL of a client-streaming call). */
    int32_t has_payload;
} pgn_event;

/* The queues pgn_recv reads. */
#define PGN_QUEUE_MAIN 0
#define PGN_QUEUE_WATCHED 1

/* pgn_recv's arguments and results. A batch is taken in two steps, so that
 * each payload is copied once, from Go's buffers straight into memory the
 * caller allocated for it (a Python bytes object): pgn_recv waits and
 * describes the batch in events; the caller allocates what the sizes say and
 * calls pgn_fill(batch, ...) exactly once for every batch (count > 0). */
typedef struct {
    /* in */
    int32_t queue;      /* PGN_QUEUE_MAIN or PGN_QUEUE_WATCHED */
    int32_t max_events; /* room in events, >= 1 */
    int64_t max_bytes;  /* payload bytes per batch, unless the first event alone has more */
    int64_t timeout_ns; /* < 0: wait until an event comes or the front stops */
    int32_t with_keys;  /* describe and copy client keys */
    pgn_event *events;
    /* out, on PGN_OK: count 0 means the timeout passed */
    int32_t count;
    uint64_t keys_len; /* the client keys' bytes, all together */
    uint64_t batch;
} pgn_recv_args;

/* A waiter: what a thread waits on in C, with nothing of Go's on its
 * stack, until Go has something for it (pgn_read). Waiting inside Go
 * instead would park the thread's locked goroutine, which costs Go's
 * scheduler a hand-off of its P and two context switches per wait. The
 * caller owns it (on its stack is fine): init, hand it to Go, wait, destroy.
 * Go signals it exactly once for each time it took it, and the signal
 * touches nothing of the waiter once the thread can see it, so the waiter
 * may be destroyed as soon as the wait returns.
 *
 * On Linux it is a futex: the signal sets the word, then wakes the word's
 * address. A mutex and a condition variable (elsewhere) must be signalled
 * under the mutex for that lifetime guarantee, and the woken thread then
 * blocks on the mutex the signaller still holds: a second sleep and wake-up
 * for every message, which a ping-pong stream pays at every exchange. The
 * wake of a futex word whose waiter has already returned is harmless: at
 * worst a spurious wake-up for whatever waits on that address later, and
 * every futex waiter (these included) checks its word again. */
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
    uint32_t signaled;
} pgn_waiter;

static inline void pgn_waiter_init(pgn_waiter *w) { w->signaled = 0; }

static inline void pgn_waiter_wait(pgn_waiter *w) {
    while (__atomic_load_n(&w->signaled, __ATOMIC_ACQUIRE) == 0) {
        syscall(SYS_futex, &w->signaled, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    }
}

static inline void pgn_waiter_signal(pgn_waiter *w) {
    __atomic_store_n(&w->signaled, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &w->signaled, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static inline void pgn_waiter_destroy(pgn_waiter *w) { (void)w; }
#else
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int signaled;
} pgn_waiter;

static inline void pgn_waiter_init(pgn_waiter *w) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->signaled = 0;
}

static inline void pgn_waiter_wait(pgn_waiter *w) {
    pthread_mutex_lock(&w->mu);
    while (!w->signaled) {
        pthread_cond_wait(&w->cond, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

/* Under the mutex, so that the waiter can't return (and be destroyed)
 * before the signal is done with it. */
static inline void pgn_waiter_signal(pgn_waiter *w) {
    pthread_mutex_lock(&w->mu);
    w->signaled = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

static inline void pgn_waiter_destroy(pgn_waiter *w) {
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
}
#endif

/* pgn_read's arguments and results. A message that fits in buf is copied
 * there (one call for the usual small message); a larger one is taken in
 * two steps, as a batch is (pgn_recv), so that it is still copied once,
 * into memory the caller allocated: pgn_read says its length and a batch
 * number; the caller allocates payload_len bytes and calls
 * pgn_fill(batch, &dst, NULL) exactly once. */
typedef struct {
    /* in: when nothing is there yet, Go signals this waiter once something
     * may be (PGN_WOULD_BLOCK); NULL: just PGN_WOULD_BLOCK */
    pgn_waiter *waiter;
    char *buf;      /* where a message of up to buf_cap bytes is copied */
    uint64_t buf_cap;
    /* out, on PGN_OK */
    int32_t eof;          /* the client half-closed and everything was read; no batch */
    uint64_t payload_len; /* the message's length, when not eof */
    uint64_t batch;       /* 0: the message is in buf; else for pgn_fill */
} pgn_read_args;

/* pgn_finish's arguments: the call's status and its last message. */
typedef struct {
    int32_t code;       /* gRPC status code, 0..16 */
    pgn_bytes details;  /* UTF-8 */
    pgn_metadata metadata; /* trailing metadata */
    pgn_bytes payload;  /* the last message; data NULL: none */
} pgn_finish_args;

/* ---- the front ------------------------------------------------------------ */

/* pgn_new makes a front from its JSON configuration (go/front/config.go) and
 * sets *front to its handle. Fails. */
int pgn_new(pgn_bytes config, int64_t *front, char **err);

/* pgn_release stops the front at once and forgets the handle; a handle that
 * is not live is ignored. May block. */
void pgn_release(int64_t front);

/* pgn_bind listens on addr (the configured address when addr.len is 0)
 * without serving yet, and sets *port. Fails. May block. */
int pgn_bind(int64_t front, pgn_bytes addr, int32_t *port, char **err);

/* pgn_start binds if pgn_bind has not, and serves. Fails. May block. */
int pgn_start(int64_t front, char **err);

/* pgn_port sets *port to the bound TCP port, 0 before binding. */
int pgn_port(int64_t front, int32_t *port);

/* pgn_stop stops the front (grace_ns < 0: no grace). With wait it returns
 * once the front has stopped; without, once new calls are refused. May
 * block. */
int pgn_stop(int64_t front, int64_t grace_ns, int32_t wait);

/* pgn_event_fd sets *fd to a descriptor that is readable while the main
 * queue has events (or the front has stopped); the same one every time, and
 * the front owns it. PGN_OS_ERROR (with *err) if none can be made. */
int pgn_event_fd(int64_t front, int32_t *fd, char **err);

/* pgn_set_loop_senders says whether sends on this front's calls come from an
 * event loop (on != 0): a send that doesn't block then leaves its socket
 * write to the connection, where a thread's lone answer is written by the
 * thread itself. Off by default. */
int pgn_set_loop_senders(int64_t front, int32_t on);

/* pgn_flush_held writes out the frames of every PGN_SEND_HELD send on this
 * front so far. Writes never wait for the peer; call without the GIL. */
int pgn_flush_held(int64_t front);

/* pgn_add_method serves a method natively and sets *method_id. A
 * client-streaming method's requests come under credit (pgn_request_messages
 * or pgn_read). Fails. */
int pgn_add_method(int64_t front, pgn_bytes path, int32_t server_streaming, int32_t client_streaming,
                   int32_t *method_id, char **err);

/* pgn_add_fallback_method relays every call of a method to the fallback
 * server. Fails. */
int pgn_add_fallback_method(int64_t front, pgn_bytes path, char **err);

/* pgn_check_tls checks TLS credentials (JSON; the PEM parses, the key
 * matches). Fails if they can't be served. It needs no front and takes no
 * handle. */
int pgn_check_tls(pgn_bytes tls_json, char **err);

/* pgn_set_tls replaces the front's TLS credentials (JSON null: plaintext)
 * before it starts. Fails. */
int pgn_set_tls(int64_t front, pgn_bytes tls_json, char **err);

/* TLS rotation (front/tlsfetch.go). pgn_tls_next_fetch waits up to wait_ms
 * (call it without the GIL) for a handshake that asks a Python fetcher for
 * new key material: 1 and *id, *fetcher set, or 0 if none came. Answer each
 * with pgn_tls_fetch_done: material is {"pairs": [[key, chain], ...],
 * "roots": ...} (base64 PEM), or keep nonzero to keep the current
 * configuration; a late answer is dropped. pgn_tls_update replaces the key
 * material of every TLS port of a front for handshakes from now on. Fails. */
int pgn_tls_next_fetch(int32_t wait_ms, uint64_t *id, int64_t *fetcher);
void pgn_tls_fetch_done(uint64_t id, pgn_bytes material, int32_t keep);
int pgn_tls_update(int64_t front, pgn_bytes material, char **err);

/* pgn_metrics sets *out to the front's counters (encode.go: a dict of str
 * to int). */
int pgn_metrics(int64_t front, pgn_buffer *out);

/* pgn_enable_health answers methods of grpc.health.v1.Health in Go from now
 * on: a mask of PGN_HEALTH_CHECK and PGN_HEALTH_WATCH, added to those already
 * answered. */
#define PGN_HEALTH_CHECK 1
#define PGN_HEALTH_WATCH 2
int pgn_enable_health(int64_t front, int32_t changes_only, uint32_t methods);

/* pgn_set_health sets a service's status. Fails. */
int pgn_set_health(int64_t front, pgn_bytes service, int32_t status, char **err);

/* pgn_enter_health_shutdown sets every service NOT_SERVING for good.
 * Fails. */
int pgn_enter_health_shutdown(int64_t front, char **err);

/* ---- A66 call metrics (go/front/callmetrics.go) ----------------------------- */

/* One ended call, as pgn_metrics_drain hands it over (front.CallRecord). */
typedef struct {
    uint32_t slot;        /* grpc.method: an index into pgn_metrics_methods' names */
    uint32_t code;        /* grpc.status: the status code */
    uint64_t duration_ns; /* first HEADERS to trailers (or reset) */
    uint64_t sent;        /* compressed message bytes sent */
    uint64_t rcvd;        /* compressed message bytes received */
} pgn_metrics_record;

/* pgn_metrics_enable measures every call from pgn_start on (once, before
 * it): address (empty: none) serves the Prometheus endpoint, whose port goes
 * to *port (0 without one); all_methods names every path, not only those
 * pgn_metrics_register names; records keeps a pgn_metrics_record per ended
 * call for pgn_metrics_drain. Fails (PGN_OS_ERROR: the address). */
int pgn_metrics_enable(int64_t front, pgn_bytes address, int32_t all_methods, int32_t records, int32_t *port,
                       char **err);

/* pgn_metrics_register names a method path's calls in grpc.method (they
 * are "other" otherwise). Fails (PGN_FAILED: metrics are off). */
int pgn_metrics_register(int64_t front, pgn_bytes path, char **err);

/* pgn_metrics_methods sets *out to a list of (name, calls started) tuples
 * by slot (encode.go); an empty list while metrics are off. */
int pgn_metrics_methods(int64_t front, pgn_buffer *out);

/* pgn_metrics_drain moves up to cap ended calls' records into dst, waiting
 * up to wait_ns (< 0: no limit) for the first, and sets *count: PGN_OK
 * (*count 0: the wait passed), PGN_STOPPED once the front has stopped and
 * no record is left. May block. */
int pgn_metrics_drain(int64_t front, pgn_metrics_record *dst, int32_t cap, int64_t wait_ns, int32_t *count);

/* ---- events ----------------------------------------------------------------- */

/* pgn_recv waits up to a->timeout_ns for events of queue a->queue and
 * describes up to a->max_events of them in a->events (see pgn_recv_args):
 * PGN_OK (a->count 0: the timeout passed), PGN_STOPPED once the front has
 * stopped and the queue is empty. May block. */
int pgn_recv(int64_t front, pgn_recv_args *a);

/* pgn_fill copies the payloads of a batch into payloads[i] (exactly
 * payload_len bytes each; NULL for events without one) and the client keys,
 * one after the other, into keys, then forgets the batch. A call whose
 * payloads[i] is NULL could not be delivered: it is ended with
 * RESOURCE_EXHAUSTED, so no call is lost unseen. */
void pgn_fill(uint64_t batch, char **payloads, char *keys);

/* ---- operations on a call ------------------------------------------------------ */

/* Each returns PGN_OK, PGN_ENDED, PGN_UNKNOWN, PGN_STOPPED or PGN_BAD_HANDLE,
 * plus what its comment adds. Those that take `block` (a pgn_sending) return
 * PGN_WOULD_BLOCK when the call's buffer is full and block is not
 * PGN_SEND_WAIT, and wait for room (may block) when it is. */

/* How a send waits, and who writes its frames (front.Sending, in its order;
 * exports.go checks each at compile time). */
typedef enum {
    /* Never waits. Its frames are written by the caller when the connection
     * is idle, or by the connection's flusher on an event loop's front
     * (pgn_set_loop_senders). */
    PGN_SEND_NO_WAIT = 0,
    /* Waits for room in the call's buffer until the call ends. */
    PGN_SEND_WAIT = 1,
    /* Never waits; its frames stay in the connection's buffer until the
     * caller, an event loop, calls pgn_flush_held (once per turn of the
     * loop, before it waits for I/O again). */
    PGN_SEND_HELD = 2,
} pgn_sending;

/* pgn_route continues a PGN_EVENT_LOOKUP call as method method_id, or relays
 * it to the fallback server (PGN_FALLBACK). PGN_UNKNOWN_METHOD. May block. */
int pgn_route(int64_t front, uint64_t call, int32_t method_id, char **err);

/* pgn_respond answers a unary call with one message and status OK.
 * PGN_TOO_LARGE. */
int pgn_respond(int64_t front, uint64_t call, pgn_bytes message, int32_t block);

/* pgn_send sends one message of a server-streaming call. PGN_TOO_LARGE. */
int pgn_send(int64_t front, uint64_t call, pgn_bytes message, int32_t block);

/* pgn_send_header sends initial metadata. PGN_INVALID_METADATA. */
int pgn_send_header(int64_t front, uint64_t call, pgn_metadata metadata, int32_t block, char **err);

/* pgn_finish ends a call with a status and an optional last message.
 * PGN_INVALID_METADATA. */
int pgn_finish(int64_t front, uint64_t call, pgn_finish_args *a, int32_t block, char **err);

/* pgn_set_compression sets the call's response compression: "" (none),
 * "deflate" or "gzip". PGN_INVALID_ARGUMENT for another name, the call left
 * as it was. */
int pgn_set_compression(int64_t front, uint64_t call, pgn_bytes name, int32_t block, char **err);

/* pgn_disable_next_compression sends the call's next message uncompressed. */
int pgn_disable_next_compression(int64_t front, uint64_t call, int32_t block);

/* pgn_request_messages lets Go read n (>= 1) more request messages of a
 * client-streaming call, each queued as a PGN_EVENT_MESSAGE, then one
 * PGN_EVENT_HALF_CLOSE (which takes a credit too). PGN_INVALID_ARGUMENT (with
 * *err): not a client-streaming call, n < 1, or the call's messages are read
 * with pgn_read. */
int pgn_request_messages(int64_t front, uint64_t call, int32_t n, char **err);

/* pgn_read takes the next request message of a client-streaming call (see
 * pgn_read_args), never waiting: PGN_WOULD_BLOCK when none is there yet
 * (a->waiter, if given, is then signalled once when the caller should read
 * again: wait on it without the GIL); PGN_ENDED once the call has ended.
 * PGN_INVALID_ARGUMENT (with *err): not a client-streaming call, or its
 * messages come as events (pgn_request_messages). */
int pgn_read(int64_t front, uint64_t call, pgn_read_args *a, char **err);

/* pgn_handler_done tells a front created with "hold_slots" that the
 * handler of a call it handed over has returned: the call's place under
 * maximum_concurrent_rpcs is free once the call has ended too. PGN_ENDED:
 * the call holds no place any more (said twice, or no hold_slots). */
int pgn_handler_done(int64_t front, uint64_t call);

/* pgn_wait_room waits until the call's buffer has room for another
 * operation (after PGN_WOULD_BLOCK); PGN_ENDED if the call ends first. May
 * block. */
int pgn_wait_room(int64_t front, uint64_t call);

/* pgn_notify_room queues one PGN_EVENT_ROOM for the call once its buffer has
 * room (at once if it has now): an event loop's wait for room. */
int pgn_notify_room(int64_t front, uint64_t call);

/* pgn_watch sends the call's PGN_EVENT_CANCEL, if it ends without being
 * finished, to PGN_QUEUE_WATCHED. */
int pgn_watch(int64_t front, uint64_t call);

/* pgn_cancel ends the call with CANCELLED. May block. */
int pgn_cancel(int64_t front, uint64_t call);

/* pgn_is_active sets *active to whether the call is live. */
int pgn_is_active(int64_t front, uint64_t call, int32_t *active);

/* pgn_time_remaining sets *ns to the time left before the call's deadline,
 * -1 without one. */
int pgn_time_remaining(int64_t front, uint64_t call, int64_t *ns);

/* pgn_call_details sets *out to the call's details (encode.go): a dict of
 * method, invocation_metadata ((key, value) tuples; bytes values for -bin
 * keys), peer, authority, client_key, time_remaining (float seconds or
 * None), auth_context (str to list of bytes, grpcio's keys) and
 * peer_identity_key (str or None). */
int pgn_call_details(int64_t front, uint64_t call, pgn_buffer *out);

#endif
