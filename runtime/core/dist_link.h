/*
** dist_link.h — the links of process groups (dist_link.c), for ops_dist.c: a TCP star
** joined at rendezvous, or a single process's in-memory links. Errors come without an op's
** name; the collective that failed prefixes its own.
*/
#ifndef QLUA_DIST_LINK_H
#define QLUA_DIST_LINK_H

#include "device.h"
#include "ops.h"

/* Joins rank of world at addr:port (rank 0 listens there), waiting up to timeout seconds
** for the others; world 1 opens nothing. NULL with err on failure. */
qt_dist_link *qt_dist_link_tcp(int rank, int world, const char *addr, int port, double timeout,
                               qt_err *err);
/* world links of one process (out[r] is rank r's), sharing one mailbox. */
int qt_dist_links_local(int world, qt_dist_link **out, qt_err *err);
void qt_dist_link_free(qt_dist_link *l);

#endif
