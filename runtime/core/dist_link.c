/*
** dist_link.c — how the ranks of a job reach each other (device.h's qt_dist_link), and how
** a job's local ranks are started (qt_dist_spawn).
**
** The TCP link is a star: rank 0 listens on the master's port, every other rank connects
** to it (retrying until the timeout, as rank 0 may start later) and says who it is. Each
** message carries its length, so ranks that disagree (different collectives or sizes) fail
** with both numbers instead of reading each other's bytes. A closed connection names its
** rank; a failing rank 0 closes every connection, so the others fail at once rather than
** at their timeout. Messages are blocking on the calling thread, each step bounded by the
** link's timeout (poll), and SIGPIPE never fires (MSG_NOSIGNAL).
**
** The local link serves a single process's group of GPUs: rank 0's sends wait in memory
** for the other ranks' receives, which the same thread makes afterwards (comm_open in an
** NCCL group).
*/
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/dist_link.h"

#define LINK_MAGIC 0x514c4431u   /* "QLD1" */

typedef struct tcp_link {
  qt_dist_link base;
  int *fds;            /* rank 0: one per rank (fds[0] unused); others: fds[0] is rank 0 */
  bool broken;
  char why[QT_ERRLEN];
  char why_timeout[24];   /* the timeout, printed */
} tcp_link;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int tcp_fd(tcp_link *t, int peer) { return t->base.rank == 0 ? t->fds[peer] : t->fds[0]; }

/* Rank 0 closes every connection when anything fails, so the others learn it at once. */
static int tcp_fail(tcp_link *t, qt_err *err, const char *fmt, int peer, const char *extra) {
  char msg[QT_ERRLEN];
  snprintf(msg, sizeof msg, fmt, peer, extra);
  if (!t->broken) {
    t->broken = true;
    snprintf(t->why, sizeof t->why, "%s", msg);
    if (t->base.rank == 0)
      for (int r = 1; r < t->base.world; r++)
        if (t->fds[r] >= 0) shutdown(t->fds[r], SHUT_RDWR);
  }
  return qt_errorf(err, "%s", msg);
}

/* Bytes on one socket, each step bounded by deadline (none when timeout is 0): 0, or
** FD_CLOSED (errno says why, 0 for an orderly close), FD_TIMEOUT. */
enum { FD_CLOSED = -1, FD_TIMEOUT = -2 };

static int fd_wait(int fd, short events, double deadline, bool timed) {
  for (;;) {
    double left = deadline - now_s();
    if (timed && left <= 0) return FD_TIMEOUT;
    struct pollfd p = {fd, events, 0};
    int rc = poll(&p, 1, timed ? (int)(left * 1000) + 1 : 1000);
    if (rc > 0) return 0;
    if (rc < 0 && errno != EINTR) return FD_CLOSED;
  }
}

static int fd_send(int fd, const void *buf, size_t n, double deadline, bool timed) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int rc = fd_wait(fd, POLLOUT, deadline, timed);
      if (rc != 0) return rc;
    } else if (!(k < 0 && errno == EINTR)) {
      return FD_CLOSED;
    }
  }
  return 0;
}

static int fd_recv(int fd, void *buf, size_t n, double deadline, bool timed) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k == 0) {
      errno = 0;
      return FD_CLOSED;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = fd_wait(fd, POLLIN, deadline, timed);
      if (rc != 0) return rc;
    } else if (errno != EINTR) {
      return FD_CLOSED;
    }
  }
  return 0;
}

/* A failed step of a link's message, named for the user. */
static int tcp_step_failed(tcp_link *t, int rc, int peer, qt_err *err) {
  if (rc == FD_TIMEOUT)
    return tcp_fail(t, err, "rank %d did not answer within the timeout (%s s): it is stuck, or "
                    "the ranks called different collectives", peer, t->why_timeout);
  return tcp_fail(t, err, "lost rank %d (its connection closed%s: it exited or failed)", peer,
                  errno != 0 ? ", a socket error" : "");
}

static int tcp_send_raw(tcp_link *t, int peer, const void *buf, size_t n, double deadline, qt_err *err) {
  int rc = fd_send(tcp_fd(t, peer), buf, n, deadline, t->base.timeout > 0);
  return rc == 0 ? 0 : tcp_step_failed(t, rc, peer, err);
}

static int tcp_recv_raw(tcp_link *t, int peer, void *buf, size_t n, double deadline, qt_err *err) {
  int rc = fd_recv(tcp_fd(t, peer), buf, n, deadline, t->base.timeout > 0);
  return rc == 0 ? 0 : tcp_step_failed(t, rc, peer, err);
}

static int tcp_broken(tcp_link *t, qt_err *err) {
  if (!t->broken) return 0;
  return qt_errorf(err, "the process group failed earlier (%s)", t->why);
}

static int tcp_send(qt_dist_link *l, int peer, const void *buf, size_t n, qt_err *err) {
  tcp_link *t = (tcp_link *)l;
  if (tcp_broken(t, err) != 0) return -1;
  double deadline = now_s() + l->timeout;
  uint64_t head[2] = {LINK_MAGIC, (uint64_t)n};
  if (tcp_send_raw(t, peer, head, sizeof head, deadline, err) != 0) return -1;
  return tcp_send_raw(t, peer, buf, n, deadline, err);
}

static int tcp_recv(qt_dist_link *l, int peer, void *buf, size_t n, qt_err *err) {
  tcp_link *t = (tcp_link *)l;
  if (tcp_broken(t, err) != 0) return -1;
  double deadline = now_s() + l->timeout;
  uint64_t head[2];
  if (tcp_recv_raw(t, peer, head, sizeof head, deadline, err) != 0) return -1;
  if (head[0] != LINK_MAGIC) return tcp_fail(t, err, "rank %d sent bytes out of step%s", peer, "");
  if (head[1] != (uint64_t)n) {
    char extra[96];
    snprintf(extra, sizeof extra, "%llu bytes where %zu were expected",
             (unsigned long long)head[1], n);
    return tcp_fail(t, err, "rank %d sent %s: the ranks called different collectives or "
                    "passed tensors of different sizes", peer, extra);
  }
  return tcp_recv_raw(t, peer, buf, n, deadline, err);
}

static int tcp_check(qt_dist_link *l, qt_err *err) {
  tcp_link *t = (tcp_link *)l;
  if (tcp_broken(t, err) != 0) return -1;
  int from = l->rank == 0 ? 1 : 0, to = l->rank == 0 ? l->world : 1;
  for (int i = from; i < to; i++) {
    char c;
    ssize_t k = recv(t->fds[i], &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return tcp_fail(t, err, "lost rank %d (its connection closed%s: it exited or failed)",
                      l->rank == 0 ? i : 0, "");
  }
  return 0;
}

static void tcp_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int link_resolve(const char *addr, int port, struct addrinfo **out, qt_err *err) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(addr, service, &hints, out);
  if (rc != 0) return qt_errorf(err, "cannot resolve MASTER_ADDR %s: %s", addr, gai_strerror(rc));
  return 0;
}

/* Rank 0: listen, and take world - 1 hellos. */
static int tcp_serve(tcp_link *t, const char *addr, int port, qt_err *err) {
  struct addrinfo *ai;
  if (link_resolve(addr, port, &ai, err) != 0) return -1;
  int ls = -1;
  char why[128] = "";
  for (struct addrinfo *a = ai; a != NULL && ls < 0; a = a->ai_next) {
    ls = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (ls < 0) continue;
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* listen on every interface of the address's family: other hosts reach rank 0 at
    ** MASTER_ADDR, which may be any of its names */
    struct sockaddr_storage any;
    memset(&any, 0, sizeof any);
    memcpy(&any, a->ai_addr, a->ai_addrlen);
    if (a->ai_family == AF_INET) ((struct sockaddr_in *)&any)->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (a->ai_family == AF_INET6) ((struct sockaddr_in6 *)&any)->sin6_addr = in6addr_any;
    if (bind(ls, (struct sockaddr *)&any, a->ai_addrlen) != 0 || listen(ls, 128) != 0) {
      snprintf(why, sizeof why, "%s", strerror(errno));
      close(ls);
      ls = -1;
    }
  }
  freeaddrinfo(ai);
  if (ls < 0) return qt_errorf(err, "rank 0 cannot listen on port %d: %s", port, why);
  double deadline = now_s() + t->base.timeout;
  int joined = 1, rc = 0;
  while (joined < t->base.world && rc == 0) {
    struct pollfd p = {ls, POLLIN, 0};
    double left = deadline - now_s();
    if (left <= 0) {
      rc = qt_errorf(err, "rank 0: only %d of %d ranks joined within the timeout (%g s)", joined,
                     t->base.world, t->base.timeout);
      break;
    }
    int k = poll(&p, 1, (int)(left * 1000) + 1);
    if (k <= 0) continue;
    int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tcp_nodelay(fd);
    int32_t hello[3];
    if (fd_recv(fd, hello, sizeof hello, now_s() + 10, true) != 0 || (uint32_t)hello[0] != LINK_MAGIC) {
      close(fd);   /* a stray connection (a port scanner, a stale rank): not ours */
      continue;
    }
    int r = hello[1], w = hello[2];
    int32_t answer = 0;
    if (w != t->base.world || r < 1 || r >= t->base.world || t->fds[r] >= 0) {
      answer = w != t->base.world ? 1 : 2;
      send(fd, &answer, sizeof answer, MSG_NOSIGNAL);
      close(fd);
      rc = w != t->base.world
               ? qt_errorf(err, "rank %d joined with WORLD_SIZE %d, rank 0 has %d", r, w, t->base.world)
               : qt_errorf(err, "two processes joined as rank %d (or a rank out of 1..%d)", r,
                           t->base.world - 1);
      break;
    }
    send(fd, &answer, sizeof answer, MSG_NOSIGNAL);
    t->fds[r] = fd;
    joined++;
  }
  close(ls);
  return rc;
}

/* Any other rank: connect (retrying while rank 0 is not up yet) and say who it is. */
static int tcp_join(tcp_link *t, const char *addr, int port, qt_err *err) {
  double deadline = now_s() + t->base.timeout;
  char why[128] = "no address";
  for (;;) {
    struct addrinfo *ai;
    if (link_resolve(addr, port, &ai, err) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
      fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        snprintf(why, sizeof why, "%s", strerror(errno));
        close(fd);
        fd = -1;
      }
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
      tcp_nodelay(fd);
      t->fds[0] = fd;
      int32_t hello[3] = {(int32_t)LINK_MAGIC, t->base.rank, t->base.world}, answer = -1;
      if (fd_send(fd, hello, sizeof hello, deadline, true) != 0 ||
          fd_recv(fd, &answer, sizeof answer, deadline, true) != 0)
        return qt_errorf(err, "rank %d: rank 0 at %s:%d closed the connection at rendezvous",
                         t->base.rank, addr, port);
      if (answer == 1)
        return qt_errorf(err, "rank %d: rank 0 has another WORLD_SIZE than %d", t->base.rank,
                         t->base.world);
      if (answer != 0)
        return qt_errorf(err, "rank %d: another process joined as rank %d already", t->base.rank,
                         t->base.rank);
      return 0;
    }
    if (now_s() > deadline)
      return qt_errorf(err, "rank %d cannot reach rank 0 at %s:%d within the timeout (%g s): %s",
                       t->base.rank, addr, port, t->base.timeout, why);
    struct timespec nap = {0, 50 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
}

qt_dist_link *qt_dist_link_tcp(int rank, int world, const char *addr, int port, double timeout,
                               qt_err *err) {
  tcp_link *t = calloc(1, sizeof *t);
  int *fds = calloc((size_t)world, sizeof *fds);
  if (t == NULL || fds == NULL) {
    free(t);
    free(fds);
    qt_errorf(err, "out of host memory");
    return NULL;
  }
  for (int i = 0; i < world; i++) fds[i] = -1;
  t->fds = fds;
  t->base.rank = rank;
  t->base.world = world;
  t->base.timeout = timeout;
  t->base.send = tcp_send;
  t->base.recv = tcp_recv;
  t->base.check = tcp_check;
  snprintf(t->why_timeout, sizeof t->why_timeout, "%g", timeout);
  int rc = world == 1 ? 0 : rank == 0 ? tcp_serve(t, addr, port, err) : tcp_join(t, addr, port, err);
  if (rc != 0) {
    qt_dist_link_free(&t->base);
    return NULL;
  }
  return &t->base;
}

/* ---------------------------------------------------------------- the local link */

typedef struct local_link {
  qt_dist_link base;
  struct local_box *box;
} local_link;

typedef struct local_box {
  int world, refs;
  void **msg;        /* rank 0's message to rank r, until r takes it */
  size_t *len;
} local_box;

static int local_send(qt_dist_link *l, int peer, const void *buf, size_t n, qt_err *err) {
  local_box *b = ((local_link *)l)->box;
  if (l->rank != 0) return qt_errorf(err, "a local group sends from rank 0 only");
  free(b->msg[peer]);
  b->msg[peer] = malloc(n > 0 ? n : 1);
  if (b->msg[peer] == NULL) return qt_errorf(err, "out of host memory");
  memcpy(b->msg[peer], buf, n);
  b->len[peer] = n;
  return 0;
}

static int local_recv(qt_dist_link *l, int peer, void *buf, size_t n, qt_err *err) {
  local_box *b = ((local_link *)l)->box;
  (void)peer;
  if (b->msg[l->rank] == NULL || b->len[l->rank] != n)
    return qt_errorf(err, "local group: rank %d has no message of %zu bytes", l->rank, n);
  memcpy(buf, b->msg[l->rank], n);
  free(b->msg[l->rank]);
  b->msg[l->rank] = NULL;
  return 0;
}

static int local_check(qt_dist_link *l, qt_err *err) {
  (void)l;
  (void)err;
  return 0;
}

int qt_dist_links_local(int world, qt_dist_link **out, qt_err *err) {
  local_box *b = calloc(1, sizeof *b);
  if (b != NULL) {
    b->msg = calloc((size_t)world, sizeof *b->msg);
    b->len = calloc((size_t)world, sizeof *b->len);
  }
  if (b == NULL || b->msg == NULL || b->len == NULL) goto oom;
  b->world = world;
  for (int r = 0; r < world; r++) out[r] = NULL;
  for (int r = 0; r < world; r++) {
    local_link *l = calloc(1, sizeof *l);
    if (l == NULL) goto oom;
    l->base.rank = r;
    l->base.world = world;
    l->base.timeout = 0;
    l->base.send = local_send;
    l->base.recv = local_recv;
    l->base.check = local_check;
    l->box = b;
    b->refs++;
    out[r] = &l->base;
  }
  return 0;
oom:
  if (b != NULL && b->refs > 0) {
    for (int r = 0; r < world; r++) qt_dist_link_free(out[r]);
    return qt_errorf(err, "out of host memory");
  }
  if (b != NULL) {
    free(b->msg);
    free(b->len);
  }
  free(b);
  return qt_errorf(err, "out of host memory");
}

void qt_dist_link_free(qt_dist_link *l) {
  if (l == NULL) return;
  if (l->send == local_send) {
    local_box *b = ((local_link *)l)->box;
    free(l);
    if (--b->refs == 0) {
      for (int r = 0; r < b->world; r++) free(b->msg[r]);
      free(b->msg);
      free(b->len);
      free(b);
    }
    return;
  }
  tcp_link *t = (tcp_link *)l;
  for (int i = 0; i < l->world; i++)
    if (t->fds[i] >= 0) close(t->fds[i]);
  free(t->fds);
  free(t);
}

/* ---------------------------------------------------------------- starting local ranks */

int qt_dist_free_port(qt_err *err) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return qt_errorf(err, "cannot pick a port: %s", strerror(errno));
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    close(fd);
    return qt_errorf(err, "cannot pick a port: %s", strerror(errno));
  }
  close(fd);
  return ntohs(a.sin_port);
}

/* How a rank ended, as a shell would say it. */
static int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int qt_dist_spawn(int n, char *const argv[], double grace, int *status, qt_err *err) {
  char port[16], world[16];
  const char *addr = getenv("MASTER_ADDR");
  if (getenv("MASTER_PORT") == NULL || getenv("MASTER_PORT")[0] == '\0') {
    int p = qt_dist_free_port(err);
    if (p < 0) return -1;
    snprintf(port, sizeof port, "%d", p);
  } else {
    snprintf(port, sizeof port, "%s", getenv("MASTER_PORT"));
  }
  snprintf(world, sizeof world, "%d", n);
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  if (pids == NULL) return qt_errorf(err, "out of host memory");
  fflush(NULL);
  int started = 0;
  for (; started < n; started++) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) {
      char rank[16];
      snprintf(rank, sizeof rank, "%d", started);
      setenv("RANK", rank, 1);
      setenv("LOCAL_RANK", rank, 1);
      setenv("WORLD_SIZE", world, 1);
      setenv("LOCAL_WORLD_SIZE", world, 1);
      setenv("MASTER_ADDR", addr != NULL && addr[0] != '\0' ? addr : "127.0.0.1", 1);
      setenv("MASTER_PORT", port, 1);
      execv(argv[0], argv);
      fprintf(stderr, "qlua: rank %d: cannot run %s: %s\n", started, argv[0], strerror(errno));
      _exit(127);
    }
    pids[started] = pid;
  }
  int first = -1, code = 0, left = started;
  double failed_at = 0;
  bool termed = false, killed = false;
  if (started < n) {
    qt_errorf(err, "cannot start rank %d of %d: %s", started, n, strerror(errno));
    first = started;
    code = 1;
    failed_at = now_s();
  }
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int i = 0; i < started; i++)
        if (pids[i] == pid) {
          pids[i] = 0;
          left--;
          if (exit_code(st) != 0 && first < 0) {
            first = i;
            code = exit_code(st);
            failed_at = now_s();
            fprintf(stderr, "qlua: rank %d of %d exited with status %d\n", i, n, code);
          }
        }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    /* a rank failed: the others see it (their links close) and end; those still running
    ** after the grace period are stopped */
    if (first >= 0 && !killed && now_s() - failed_at > grace) {
      int sig = termed ? SIGKILL : SIGTERM;
      for (int i = 0; i < started; i++)
        if (pids[i] > 0) kill(pids[i], sig);
      if (termed) killed = true;
      termed = true;
      failed_at = now_s() - grace + 5;   /* SIGKILL five seconds after SIGTERM */
    }
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  free(pids);
  *status = code;
  return started < n ? -1 : 0;
}
