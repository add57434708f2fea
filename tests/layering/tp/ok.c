// SPDX-License-Identifier: BSD-3-Clause
/* Layering probe: what tp/ may do, reach comm/ through its services. */
#include "comm/services.h"

int layering_probe_ok(const tpdp_comm *c) { return comm_debug_collectives(c); }
