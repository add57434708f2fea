// SPDX-License-Identifier: BSD-3-Clause
/* `tpdp ckpt`: inspect a sharded checkpoint (tensors, global shapes,
 * placements, slices, bytes, checksums) or consolidate it into one
 * safetensors file. One process, no MPI needed. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tpdp/tpdp.h"

static void cmd_ckpt_usage(void) {
  printf(
      "usage: tpdp ckpt inspect DIR [--json] [--verify]\n"
      "       tpdp ckpt consolidate DIR OUT.safetensors\n\n"
      "inspect: the checkpoint in DIR (its index.json): generation, the\n"
      "  number of ranks that saved it, metadata, and per tensor its dtype,\n"
      "  global shape, mesh and placements at save time, slices (file,\n"
      "  offsets, shape, bytes, xxhash64, writer rank) and bytes.\n"
      "  --verify  re-read every slice and check its xxhash64 (and its\n"
      "            file's header against the index)\n"
      "  --json    one JSON object: {\"dir\",\"generation\",\"world_size\",\n"
      "            "
      "\"metadata\":{..},\"bytes\",\"tensors\":[{\"name\",\"dtype\",\n"
      "            "
      "\"shape\",\"mesh\":{\"names\",\"shape\"}|null,\"placements\":\n"
      "            "
      "[..]|null,\"bytes\",\"slices\":[{\"file\",\"offsets\",\"shape\",\n"
      "            \"bytes\",\"xxh64\",\"rank\",\"checksum\":\"ok\"|\"bad\"|\n"
      "            \"unchecked\"}]}],\"bad_slices\":N}\n"
      "consolidate: write every global tensor, under its saved name, into\n"
      "  one unsharded safetensors file (\"__metadata__\": format pt and the\n"
      "  checkpoint's metadata); checksums are verified on the way. The\n"
      "  saver's consolidate_exclude / consolidate_shapes metadata leave\n"
      "  training state out and give views their model's shapes (a\n"
      "  train_gpt2 checkpoint becomes a Hugging Face GPT-2 file); a\n"
      "  checkpoint with \"hf_config\" metadata also gets config.json\n"
      "  written next to OUT, so OUT's folder is a --model DIR.\n\n"
      "exit status: 0 ok, 1 failure or a bad checksum, 2 bad arguments\n");
}

static int fail(const char *what) {
  fprintf(stderr, "tpdp ckpt: %s: %s\n", what, tpdp_last_error());
  return 1;
}

static cJSON *dims_json(int n, const int64_t *v) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; d < n; d++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[d]));
  return a;
}

/* "dp=2,tp=2 (R, S0)" from a spec's JSON, or "no spec". */
static void placements_text(const cJSON *spec, char *buf, size_t len) {
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(spec, "mesh");
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(mesh, "names");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(mesh, "shape");
  const cJSON *pl = cJSON_GetObjectItemCaseSensitive(spec, "placements");
  size_t at = 0;
  buf[0] = '\0';
  if (spec == NULL) {
    snprintf(buf, len, "no spec (whole on every rank)");
    return;
  }
  for (int d = 0; d < cJSON_GetArraySize(shape) && at < len; d++) {
    const cJSON *nm = cJSON_GetArrayItem(names, d);
    at += (size_t)snprintf(buf + at, len - at, "%s%s=%d", d ? "," : "",
                           cJSON_IsString(nm) ? nm->valuestring : "?",
                           cJSON_GetArrayItem(shape, d)->valueint);
  }
  for (int d = 0; d < cJSON_GetArraySize(pl) && at < len; d++) {
    const cJSON *p = cJSON_GetArrayItem(pl, d);
    at += (size_t)snprintf(buf + at, len - at, "%s%s", d ? ", " : " (",
                           cJSON_IsString(p) ? p->valuestring : "?");
  }
  if (at < len) snprintf(buf + at, len - at, ")");
}

static int inspect(const char *dir, int json, int verify) {
  tpdp_checkpoint *ck = NULL;
  if (tpdp_checkpoint_open(dir, NULL, &ck) != TPDP_SUCCESS)
    return fail("cannot open the checkpoint");
  int nt = tpdp_checkpoint_num_tensors(ck), bad = 0, nslices = 0;
  uint64_t total = 0;
  cJSON *root = cJSON_CreateObject(), *tensors = cJSON_CreateArray();
  cJSON *meta = cJSON_CreateObject();
  for (int i = 0; i < tpdp_checkpoint_num_meta(ck); i++) {
    const char *k, *v;
    tpdp_checkpoint_meta_at(ck, i, &k, &v);
    cJSON_AddStringToObject(meta, k, v);
  }
  for (int i = 0; i < nt; i++) {
    tpdp_checkpoint_tensor_info ti;
    tpdp_checkpoint_tensor_at(ck, i, &ti);
    total += ti.nbytes;
    nslices += ti.nslices;
  }
  if (!json) {
    printf("checkpoint %s: generation %" PRId64
           ", saved by %d ranks, %d tensors in %d slices, %" PRIu64 " bytes\n",
           dir, tpdp_checkpoint_generation(ck), tpdp_checkpoint_world_size(ck),
           nt, nslices, total);
    for (int i = 0; i < tpdp_checkpoint_num_meta(ck); i++) {
      const char *k, *v;
      tpdp_checkpoint_meta_at(ck, i, &k, &v);
      printf("%s%s = %s\n", i ? "  " : "metadata:\n  ", k, v);
    }
  }
  for (int i = 0; i < nt; i++) {
    tpdp_checkpoint_tensor_info ti;
    tpdp_checkpoint_tensor_at(ck, i, &ti);
    cJSON *spec = ti.spec_json ? cJSON_Parse(ti.spec_json) : NULL;
    char shape[160], where[256];
    tpdp_shape_format(ti.ndim, ti.shape, shape, sizeof shape);
    placements_text(spec, where, sizeof where);
    cJSON *jt = cJSON_CreateObject(), *jslices = cJSON_CreateArray();
    cJSON_AddStringToObject(jt, "name", ti.name);
    cJSON_AddStringToObject(jt, "dtype", tpdp_dtype_name(ti.dtype));
    cJSON_AddItemToObject(jt, "shape", dims_json(ti.ndim, ti.shape));
    const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(spec, "mesh");
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(spec, "placements");
    cJSON_AddItemToObject(jt, "mesh",
                          mesh ? cJSON_Duplicate(mesh, 1) : cJSON_CreateNull());
    cJSON_AddItemToObject(jt, "placements",
                          pl ? cJSON_Duplicate(pl, 1) : cJSON_CreateNull());
    cJSON_AddNumberToObject(jt, "bytes", (double)ti.nbytes);
    if (!json)
      printf("%s %s %s on %s: %d slices, %" PRIu64 " bytes\n", ti.name,
             tpdp_dtype_name(ti.dtype), shape, where, ti.nslices, ti.nbytes);
    for (int j = 0; j < ti.nslices; j++) {
      tpdp_checkpoint_slice_info si;
      tpdp_checkpoint_slice_at(ck, i, j, &si);
      const char *check = "unchecked";
      char msg[1024] = "";
      if (verify) {
        if (tpdp_checkpoint_verify_slice(ck, i, j) == TPDP_SUCCESS) {
          check = "ok";
        } else {
          check = "bad";
          snprintf(msg, sizeof msg, ": %s", tpdp_last_error());
          bad++;
        }
      }
      char off[160], sh[160], hash[17];
      tpdp_shape_format(ti.ndim, si.offsets, off, sizeof off);
      tpdp_shape_format(ti.ndim, si.shape, sh, sizeof sh);
      snprintf(hash, sizeof hash, "%016" PRIx64, si.xxh64);
      cJSON *js = cJSON_CreateObject();
      cJSON_AddStringToObject(js, "file", si.file);
      cJSON_AddItemToObject(js, "offsets", dims_json(ti.ndim, si.offsets));
      cJSON_AddItemToObject(js, "shape", dims_json(ti.ndim, si.shape));
      cJSON_AddNumberToObject(js, "bytes", (double)si.nbytes);
      cJSON_AddStringToObject(js, "xxh64", hash);
      cJSON_AddNumberToObject(js, "rank", si.rank);
      cJSON_AddStringToObject(js, "checksum", check);
      cJSON_AddItemToArray(jslices, js);
      if (!json)
        printf("  slice %d: %s at %s, %s, %" PRIu64
               " bytes, xxh64 %s, rank %d, checksum %s%s\n",
               j, sh, off, si.file, si.nbytes, hash, si.rank, check, msg);
    }
    cJSON_AddItemToObject(jt, "slices", jslices);
    cJSON_AddItemToArray(tensors, jt);
    cJSON_Delete(spec);
  }
  if (json) {
    cJSON_AddStringToObject(root, "dir", dir);
    cJSON_AddNumberToObject(root, "generation",
                            (double)tpdp_checkpoint_generation(ck));
    cJSON_AddNumberToObject(root, "world_size", tpdp_checkpoint_world_size(ck));
    cJSON_AddItemToObject(root, "metadata", meta);
    meta = NULL;
    cJSON_AddNumberToObject(root, "bytes", (double)total);
    cJSON_AddItemToObject(root, "tensors", tensors);
    tensors = NULL;
    cJSON_AddNumberToObject(root, "bad_slices", bad);
    char *text = cJSON_PrintUnformatted(root);
    printf("%s\n", text ? text : "{}");
    cJSON_free(text);
  } else if (verify) {
    printf("checksums: %d of %d slices bad\n", bad, nslices);
  }
  cJSON_Delete(meta);
  cJSON_Delete(tensors);
  cJSON_Delete(root);
  tpdp_checkpoint_close(ck);
  return bad ? 1 : 0;
}

/* The checkpoint's "hf_config" metadata (a Hugging Face config.json) as
 * config.json in OUT's folder, written to a temporary name and renamed. 0
 * (also when there is none) or 1. */
static int write_hf_config(const char *dir, const char *out) {
  tpdp_checkpoint *ck = NULL;
  if (tpdp_checkpoint_open(dir, NULL, &ck) != TPDP_SUCCESS)
    return fail("cannot open the checkpoint");
  const char *cfg = tpdp_checkpoint_meta(ck, "hf_config");
  int rc = 0;
  if (cfg != NULL) {
    char path[4096], tmp[4200];
    const char *slash = strrchr(out, '/');
    int n = slash ? (int)(slash - out) : 1;
    snprintf(path, sizeof path, "%.*s/config.json", n, slash ? out : ".");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL && fputs(cfg, f) >= 0 && fputc('\n', f) != EOF;
    if (f != NULL && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) {
      printf("wrote %s (the checkpoint's hf_config)\n", path);
    } else {
      fprintf(stderr, "tpdp ckpt: cannot write %s\n", path);
      remove(tmp);
      rc = 1;
    }
  }
  tpdp_checkpoint_close(ck);
  return rc;
}

static int cmd_ckpt(int argc, char **argv) {
  if (argc < 2)
    return cli_usage_error("ckpt", "%s", "missing inspect or consolidate");
  const char *sub = argv[1];
  if (strcmp(sub, "consolidate") == 0) {
    if (argc != 4)
      return cli_usage_error("ckpt", "%s",
                             "consolidate takes DIR OUT.safetensors");
    if (tpdp_checkpoint_consolidate(argv[2], argv[3]) != TPDP_SUCCESS)
      return fail("consolidate");
    printf("wrote %s\n", argv[3]);
    return write_hf_config(argv[2], argv[3]);
  }
  if (strcmp(sub, "inspect") != 0)
    return cli_usage_error("ckpt", "unknown subcommand '%s'", sub);
  const char *dir = NULL;
  int json = 0, verify = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (strcmp(argv[i], "--verify") == 0)
      verify = 1;
    else if (argv[i][0] == '-' || dir != NULL)
      return cli_usage_error("ckpt", "unexpected argument '%s'", argv[i]);
    else
      dir = argv[i];
  }
  if (dir == NULL)
    return cli_usage_error("ckpt", "%s", "inspect needs a directory");
  return inspect(dir, json, verify);
}

const cli_command cli_cmd_ckpt = {"ckpt",
                                  "inspect or consolidate a sharded checkpoint",
                                  cmd_ckpt, cmd_ckpt_usage};
