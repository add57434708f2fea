// SPDX-License-Identifier: BSD-3-Clause
/*
 * JSON helpers of the planning library, over cJSON: parsing with the
 * position of a syntax error, and integers read with range checks. Both
 * record planning errors (tools/planning/error.h).
 */
#ifndef TPDP_TOOLS_PLANNING_JSON_H
#define TPDP_TOOLS_PLANNING_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "tpdp/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest integer a JSON number carries exactly: cJSON reads numbers
 * as doubles, so above 2^53 - 1 distinct integers read the same (RFC 8259,
 * section 6: the interoperable range). */
#define PLANNING_JSON_INT_MAX ((int64_t)9007199254740991)

/* Parse NUL-terminated `text` into *out (free with cJSON_Delete). Errors:
 * TPDP_ERR_PARSE "not valid JSON (line L, column C)" at the first byte
 * cJSON could not take; TPDP_ERR_OUT_OF_MEMORY is reported as a parse
 * error too (cJSON does not tell them apart). */
tpdp_status planning_json_parse(const char *text, cJSON **out);

/* Read `item` as an integer in [min, max] (max <= PLANNING_JSON_INT_MAX)
 * into *out. On failure record `status` with a message naming `what` (the
 * JSON path): "<what> must be a positive integer (got 2.5)" (for min 1;
 * "a non-negative integer" for min 0, "an integer >= min" otherwise; the
 * value as written, or "a non-number"), or "<what> is too large (max N)". */
tpdp_status planning_json_int(const cJSON *item, const char *what, int64_t min,
                              int64_t max, tpdp_status status, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* TPDP_TOOLS_PLANNING_JSON_H */
