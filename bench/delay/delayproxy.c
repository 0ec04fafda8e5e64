/* A TCP proxy that holds every byte for a fixed time in each direction: a network a
 * round trip of 2 x DELAY away, for benchmarks on a machine without netem
 * (bench/delay/__init__.py builds and runs it).
 *
 *     delayproxy LISTEN_PORT TARGET_PORT DELAY_MICROSECONDS
 *
 * It listens on 127.0.0.1:LISTEN_PORT and connects each client to 127.0.0.1:TARGET_PORT.
 * Each chunk read is forwarded DELAY after it was read, in order, and so is the end of
 * a stream; one thread on epoll and a timerfd (nanosecond deadlines: epoll's own timeout
 * counts whole milliseconds). A direction holding more than CAP bytes stops reading
 * until its reader takes some, so that TCP's flow control still reaches the sender.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define READ 65536
#define CAP (4 << 20)

struct chunk {
    struct chunk *next;
    int64_t due;      /* CLOCK_MONOTONIC, ns */
    size_t len, off;
    char data[];
};

struct dir {          /* one direction: bytes read from fd[s], written to fd[1 - s] */
    struct chunk *head, *tail;
    size_t queued;    /* bytes held */
    int64_t eof_due;  /* when the end of the stream is passed on; 0: not read yet */
    int shut, blocked;
};

struct conn {
    int fd[2];         /* 0: the client, 1: the target */
    struct dir dir[2]; /* dir[s]: what fd[s] sent, on its way to fd[1 - s] */
    struct end { struct conn *conn; int side; } end[2];
    uint32_t watched[2]; /* the events epoll has for fd[s]; 0: not registered */
    struct conn *next, **prev;
    int dead;
};

static int64_t delay_ns;
static int ep;
static struct conn *conns, *dead; /* the dead are freed once no event can name them */
static char buffer[READ];

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* What fd[side] is watched for: input while its stream goes on and its direction holds
 * less than CAP, output while the other direction waits to write to it. With neither, it
 * leaves epoll, which would report a closed socket's hang-up on every call. */
static void watch(struct conn *c, int side) {
    struct dir *in = &c->dir[side];
    uint32_t want = (!in->eof_due && in->queued < CAP) ? EPOLLIN : 0;
    if (c->dir[1 - side].blocked) want |= EPOLLOUT;
    if (want == c->watched[side]) return;
    struct epoll_event ev = {.events = want, .data.ptr = &c->end[side]};
    int op = !want ? EPOLL_CTL_DEL : c->watched[side] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    epoll_ctl(ep, op, c->fd[side], &ev);
    c->watched[side] = want;
}

static void drop(struct conn *c) {
    if (c->dead) return;
    c->dead = 1;
    for (int s = 0; s < 2; s++) {
        close(c->fd[s]);
        for (struct chunk *k = c->dir[s].head, *n; k; k = n) { n = k->next; free(k); }
        c->dir[s].head = c->dir[s].tail = NULL;
    }
    *c->prev = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = dead;
    dead = c;
}

/* Write what is due of direction s; 0 once the connection is over or broken. */
static int flush(struct conn *c, int s, int64_t now) {
    struct dir *d = &c->dir[s];
    int dst = c->fd[1 - s];
    d->blocked = 0;
    while (d->head && d->head->due <= now) {
        struct chunk *k = d->head;
        ssize_t n = write(dst, k->data + k->off, k->len - k->off);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { d->blocked = 1; break; }
        if (n < 0) return 0;
        k->off += (size_t)n;
        d->queued -= (size_t)n;
        if (k->off < k->len) continue;
        d->head = k->next;
        if (!d->head) d->tail = NULL;
        free(k);
    }
    if (d->eof_due && d->eof_due <= now && !d->head && !d->shut) {
        shutdown(dst, SHUT_WR);
        d->shut = 1;
    }
    watch(c, s);     /* it may read again */
    watch(c, 1 - s); /* its destination, for output */
    return !(c->dir[0].shut && c->dir[1].shut);
}

static int take(struct conn *c, int s) {
    struct dir *d = &c->dir[s];
    while (!d->eof_due && d->queued < CAP) {
        ssize_t n = read(c->fd[s], buffer, READ);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0) return 0;
        if (n == 0) { d->eof_due = now_ns() + delay_ns; break; }
        struct chunk *k = malloc(sizeof *k + (size_t)n);
        memcpy(k->data, buffer, (size_t)n);
        k->next = NULL;
        k->due = now_ns() + delay_ns;
        k->len = (size_t)n;
        k->off = 0;
        if (d->tail) d->tail->next = k; else d->head = k;
        d->tail = k;
        d->queued += (size_t)n;
        if (n < READ) break;
    }
    watch(c, s);
    return 1;
}

static int listen_on(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1024)) {
        perror("delayproxy: listen");
        exit(1);
    }
    return fd;
}

static void accept_all(int lfd, int target) {
    for (;;) {
        int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        if (cfd < 0) return;
        int tfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(target)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(tfd, (struct sockaddr *)&a, sizeof a)) { close(cfd); close(tfd); continue; }
        fcntl(tfd, F_SETFL, O_NONBLOCK);
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        c->fd[0] = cfd;
        c->fd[1] = tfd;
        for (int s = 0; s < 2; s++) {
            c->end[s] = (struct end){c, s};
            watch(c, s);
        }
        c->next = conns;
        c->prev = &conns;
        if (conns) conns->prev = &c->next;
        conns = c;
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: delayproxy LISTEN_PORT TARGET_PORT DELAY_MICROSECONDS\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a peer gone is a write that fails, not the proxy's end */
    int target = atoi(argv[2]);
    delay_ns = atoll(argv[3]) * 1000;
    int lfd = listen_on(atoi(argv[1]));
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    ep = epoll_create1(0);
    struct end listener = {NULL, -1}, timer = {NULL, -2};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listener};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.ptr = &timer;
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
    printf("ready\n");
    fflush(stdout);
    struct epoll_event events[256];
    for (;;) {
        int64_t now = now_ns(), next = INT64_MAX;
        for (struct conn *c = conns, *n; c; c = n) {
            n = c->next;
            for (int s = 0; s < 2 && !c->dead; s++) {
                if (!c->dir[s].blocked && !flush(c, s, now)) drop(c);
            }
            for (int s = 0; s < 2 && !c->dead; s++) {
                struct dir *d = &c->dir[s];
                if (d->blocked) continue; /* it waits for output, not for time */
                if (d->head && d->head->due < next) next = d->head->due;
                if (!d->head && d->eof_due && !d->shut && d->eof_due < next) next = d->eof_due;
            }
        }
        struct itimerspec t = {0};
        if (next != INT64_MAX) {
            t.it_value.tv_sec = next / 1000000000;
            t.it_value.tv_nsec = next % 1000000000;
        }
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &t, NULL);
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; i++) {
            struct end *e = events[i].data.ptr;
            if (e->side == -1) { accept_all(lfd, target); continue; }
            if (e->side == -2) { uint64_t x; ssize_t r = read(tfd, &x, sizeof x); (void)r; continue; }
            struct conn *c = e->conn;
            if (c->dead) continue;
            uint32_t got = events[i].events;
            if ((got & (EPOLLIN | EPOLLHUP | EPOLLERR)) && (c->watched[e->side] & EPOLLIN)
                && !take(c, e->side)) {
                drop(c);
                continue;
            }
            if ((got & (EPOLLOUT | EPOLLHUP | EPOLLERR)) && c->dir[1 - e->side].blocked
                && !flush(c, 1 - e->side, now_ns()))
                drop(c);
        }
        for (struct conn *c; (c = dead); free(c)) dead = c->next;
    }
}
