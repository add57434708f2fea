// SPDX-License-Identifier: BSD-3-Clause
/* tpdp: tensor parallelism + data parallelism for training frameworks.
 * Umbrella header: includes every public module header. */
#ifndef TPDP_TPDP_H
#define TPDP_TPDP_H

#include "tpdp/checkpoint.h" /* sharded checkpoints (ckpt/) */
#include "tpdp/comm.h"       /* communicators, device mesh (comm/) */
#include "tpdp/core.h"       /* status, logging, tensor views (core/) */
#include "tpdp/dtensor.h"    /* DTensor specs, redistribute (tp/) */
#include "tpdp/fsdp.h"       /* fully sharded units, ZeRO 1-3 (dp/) */
#include "tpdp/module.h"     /* module tree, reports (core/) */
#include "tpdp/reducer.h"    /* DDP-style gradient reducer (dp/) */
#include "tpdp/topo.h"       /* topology, binding (topo/) */
#include "tpdp/tp.h"         /* TP+DP transform, styles, layouts (tp/) */

#endif /* TPDP_TPDP_H */
