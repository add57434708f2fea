// SPDX-License-Identifier: BSD-3-Clause
/* JSON helpers of the planning library (json.h). */
#include "tools/planning/json.h"

#include <stdio.h>
#include <stdlib.h>

#include "tools/planning/error.h"

tpdp_status planning_json_parse(const char *text, cJSON **out) {
  const char *end = NULL;
  *out = cJSON_ParseWithOpts(text, &end, 1);
  if (*out != NULL) return TPDP_SUCCESS;
  int line = 1, col = 1;
  for (const char *s = text; end != NULL && s < end && *s; s++) {
    if (*s == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  return planning_error(TPDP_ERR_PARSE, "not valid JSON (line %d, column %d)",
                        line, col);
}

/* The shortest decimal text that reads back as v ("2.5", not "2.50000"). */
static void number_text(double v, char *buf, size_t len) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
}

tpdp_status planning_json_int(const cJSON *item, const char *what, int64_t min,
                              int64_t max, tpdp_status status, int64_t *out) {
  char got[40] = "a non-number";
  if (cJSON_IsNumber(item)) {
    double v = item->valuedouble;
    if (v > (double)max)
      return planning_error(status, "%s is too large (max %lld)", what,
                            (long long)max);
    if (v >= (double)min && v == (double)(int64_t)v) {
      *out = (int64_t)v;
      return TPDP_SUCCESS;
    }
    number_text(v, got, sizeof got);
  }
  if (min == 1)
    return planning_error(status, "%s must be a positive integer (got %s)",
                          what, got);
  if (min == 0)
    return planning_error(status, "%s must be a non-negative integer (got %s)",
                          what, got);
  return planning_error(status, "%s must be an integer >= %lld (got %s)", what,
                        (long long)min, got);
}
