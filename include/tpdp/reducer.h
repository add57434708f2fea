/* tpdp reducer: (being written) */
#ifndef TPDP_REDUCER_H
#define TPDP_REDUCER_H

#include "tpdp/core.h"

#endif /* TPDP_REDUCER_H */
