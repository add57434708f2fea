/* tpdp module: (being written) */
#ifndef TPDP_MODULE_H
#define TPDP_MODULE_H

#include "tpdp/core.h"

#endif /* TPDP_MODULE_H */
