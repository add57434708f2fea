// SPDX-License-Identifier: BSD-3-Clause
// A helper process of save_crash_test.sh: saves or checks a small sharded
// checkpoint whose values depend on VALUE, so that a check tells which
// checkpoint a directory holds.
//   crash_helper save DIR VALUE    (collective over the world, mesh tp=N)
//   crash_helper check DIR VALUE   (loads on the world's ranks, verifies)
// Exit 0 on success, 1 with the error on stderr.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tpdp/tpdp.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

int Fail(const char *what) {
  std::fprintf(stderr, "crash_helper: %s: %s\n", what, tpdp_last_error());
  return 1;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  std::string mode = argv[1], dir = argv[2];
  double value = std::atof(argv[3]);
  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS) return Fail("tpdp_init");
  tpdp_comm *world = nullptr;
  tpdp_comm_world(&world);
  int n = tpdp_comm_size(world), rc = 0;
  tpdp_mesh *mesh = nullptr;
  tpdp_spec *spec = nullptr;
  tpdp_state_dict *sd = nullptr;
  // w: [2 MiB of f32 rows, 16] sharded over all ranks (big enough that a
  // kill in the middle of the data leaves a partial file); b: plain.
  int64_t g[2] = {32768, 16}, bs[1] = {5};
  tpdp_placement s0 = tpdp_shard(0);
  std::string mspec = "tp=" + std::to_string(n);
  if (tpdp_mesh_create_from_string(world, mspec.c_str(), &mesh) ||
      tpdp_spec_create(mesh, &s0, 1, 2, g, TPDP_F32, kCpu, &spec) ||
      tpdp_state_dict_create(&sd))
    return Fail("setup");
  int64_t ls[2], off[2];
  tpdp_spec_local_shape(spec, tpdp_comm_rank(world), ls, off);
  std::vector<float> w((size_t)(ls[0] * ls[1]) + 1), b(5);
  tpdp_tensor tw, tb;
  tpdp_tensor_init(&tw, w.data(), TPDP_F32, kCpu, 2, ls);
  tpdp_tensor_init(&tb, b.data(), TPDP_F32, kCpu, 1, bs);
  if (tpdp_state_dict_add(sd, "w", &tw, spec) ||
      tpdp_state_dict_add(sd, "b", &tb, nullptr))
    return Fail("state dict");
  auto want_w = [&](int64_t k) {
    return (float)(value + (double)((off[0] * 16 + k) % 1000));
  };
  if (mode == "save") {
    for (int64_t k = 0; k < ls[0] * ls[1]; k++) w[k] = want_w(k);
    for (int k = 0; k < 5; k++) b[k] = (float)(value * 10 + k);
    tpdp_state_dict_set_meta(sd, "value", argv[3]);
    if (tpdp_checkpoint_save(sd, dir.c_str(), world, nullptr))
      rc = Fail("save");
  } else {
    if (tpdp_checkpoint_load(sd, dir.c_str(), world, nullptr)) {
      rc = Fail("load");
    } else {
      int bad = 0;
      for (int64_t k = 0; k < ls[0] * ls[1]; k++) bad += w[k] != want_w(k);
      for (int k = 0; k < 5; k++) bad += b[k] != (float)(value * 10 + k);
      const char *v = tpdp_state_dict_get_meta(sd, "value");
      if (bad || v == nullptr || std::atof(v) != value) {
        std::fprintf(stderr,
                     "crash_helper: %d values differ from checkpoint %s "
                     "(metadata value %s)\n",
                     bad, argv[3], v ? v : "none");
        rc = 1;
      }
    }
  }
  tpdp_state_dict_destroy(sd);
  tpdp_spec_destroy(spec);
  tpdp_mesh_destroy(mesh);
  tpdp_finalize();
  return rc;
}
