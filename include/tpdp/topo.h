/* tpdp topo: (being written) */
#ifndef TPDP_TOPO_H
#define TPDP_TOPO_H

#include "tpdp/core.h"

#endif /* TPDP_TOPO_H */
