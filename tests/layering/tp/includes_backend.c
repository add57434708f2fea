// SPDX-License-Identifier: BSD-3-Clause
/* Layering probe: tp/ reaching comm/'s backend interface (struct tpdp_comm)
 * instead of comm/services.h; Bazel must refuse to compile it. */
#include "comm/backend.h"

int layering_probe_backend_rank(const tpdp_comm *c) { return c->rank; }
