// wake_floor.c: the cheapest thread-per-stream ping-pong server this machine allows.
// usage: gcc -O2 -pthread -o /tmp/wake_floor bench/probes/wake_floor.c && /tmp/wake_floor MODE STREAMS EXCHANGES
//   MODE direct : one server thread per connection, blocking read then write
//                 (one wake-up per exchange: the socket's)
//   MODE handoff: one reader thread (epoll over all connections) hands each
//                 message to its stream's handler thread through a futex; the
//                 handler writes the answer (two wake-ups: socket, futex)
// Prints the server process's CPU per exchange (user+sys).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 32
static int nstreams, nexch;

static void futex_wait(atomic_int *a, int v) { syscall(SYS_futex, a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0); }
static void futex_wake(atomic_int *a) { syscall(SYS_futex, a, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }

static int readfull(int fd, char *b, int n) {
    int got = 0;
    while (got < n) { int r = read(fd, b + got, n - got); if (r <= 0) return -1; got += r; }
    return 0;
}

static void *direct(void *arg) {
    int fd = (int)(long)arg; char b[MSG];
    while (readfull(fd, b, MSG) == 0) write(fd, b, MSG);
    return NULL;
}

struct stream { int fd; atomic_int seq; char b[MSG]; pthread_t t; };
static struct stream *ss;

/* A stream's handler thread: waits for the reader's signal, answers, and
 * waits again (it lives until the server process exits). */
static __attribute__((noreturn)) void *handler(void *arg) {
    struct stream *s = arg; int seen = 0;
    for (;;) {
        int v;
        while ((v = atomic_load(&s->seq)) == seen) futex_wait(&s->seq, seen);
        seen = v;
        write(s->fd, s->b, MSG);
    }
}

static void *client(void *arg) {
    int fd = (int)(long)arg; char b[MSG]; memset(b, 7, MSG);
    for (int i = 0; i < nexch; i++) { write(fd, b, MSG); if (readfull(fd, b, MSG)) break; }
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argv[1]; nstreams = atoi(argv[2]); nexch = atoi(argv[3]);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(ls, (void *)&a, sizeof a); listen(ls, 128);
    socklen_t al = sizeof a; getsockname(ls, (void *)&a, &al);
    int cfd[256], sfd[256];
    for (int i = 0; i < nstreams; i++) {
        cfd[i] = socket(AF_INET, SOCK_STREAM, 0);
        connect(cfd[i], (void *)&a, sizeof a);
        sfd[i] = accept(ls, NULL, NULL);
        setsockopt(cfd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(sfd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    pid_t pid = fork();
    if (pid == 0) {  // server
        for (int i = 0; i < nstreams; i++) close(cfd[i]);
        if (!strcmp(mode, "direct")) {
            pthread_t t[256];
            for (int i = 0; i < nstreams; i++) pthread_create(&t[i], NULL, direct, (void *)(long)sfd[i]);
            for (int i = 0; i < nstreams; i++) pthread_join(t[i], NULL);
        } else {
            ss = calloc(nstreams, sizeof *ss);
            int ep = epoll_create1(0);
            for (int i = 0; i < nstreams; i++) {
                ss[i].fd = sfd[i];
                pthread_create(&ss[i].t, NULL, handler, &ss[i]);
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
                epoll_ctl(ep, EPOLL_CTL_ADD, sfd[i], &ev);
            }
            int open = nstreams;
            while (open > 0) {
                struct epoll_event evs[64];
                int n = epoll_wait(ep, evs, 64, -1);
                for (int k = 0; k < n; k++) {
                    struct stream *s = &ss[evs[k].data.u32];
                    if (readfull(s->fd, s->b, MSG)) { epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL); open--; continue; }
                    atomic_fetch_add(&s->seq, 1);
                    futex_wake(&s->seq);
                }
            }
        }
        struct rusage ru; getrusage(RUSAGE_SELF, &ru);
        double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        printf("%s streams=%d server CPU per exchange %.1f us (vol ctxsw %.2f per exchange)\n", mode, nstreams,
               cpu * 1e6 / ((double)nstreams * nexch), (double)ru.ru_nvcsw / ((double)nstreams * nexch));
        fflush(stdout);
        _exit(0);
    }
    for (int i = 0; i < nstreams; i++) close(sfd[i]);
    pthread_t t[256];
    for (int i = 0; i < nstreams; i++) pthread_create(&t[i], NULL, client, (void *)(long)cfd[i]);
    for (int i = 0; i < nstreams; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < nstreams; i++) shutdown(cfd[i], SHUT_WR);
    waitpid(pid, NULL, 0);
    return 0;
}
