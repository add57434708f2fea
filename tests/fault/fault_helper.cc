// SPDX-License-Identifier: BSD-3-Clause
// The program of the fault tests (fault_test.sh, ckpt_fault_test.sh): a
// small training-like loop whose fault is injected here, by the FAULT
// environment variable, never by the library.
//
//   fault_helper allreduce   20 iterations: allreduce SUM of 1 Mi f32 on
//                            the mesh's dp communicator, then on its tp one
//                            (mesh dp=N/2,tp=2 for an even N > 2, else the
//                            world alone)
//   fault_helper ring        20 allreduces AVG of 1 Mi f32 on the world
//                            (the MPI backend's ring)
//   fault_helper reducer     20 reducer iterations on the world: two 2 Mi
//                            f32 parameters in one bucket, marked, then
//                            tpdp_reducer_finalize
//   fault_helper fsdp        20 steps of two fully sharded units (level 3,
//                            "blocks.0" and "blocks.1", 1 Mi f32 each,
//                            and the root) on the world: forward and
//                            backward hooks, then tpdp_fsdp_finalize;
//                            the fault strikes before block 1's forward
//                            (its all-gather)
//   fault_helper save DIR V  save a checkpoint whose values depend on V
//   fault_helper check DIR V load it and verify the values
//
// FAULT=ACTION:RANK:ITER[:DELAY_MS] acts on rank RANK at iteration ITER
// (save: ITER is ignored), just before the iteration's operation, or
// DELAY_MS into it (from a thread, while the operation runs):
//   kill   SIGKILL        stop   SIGSTOP (stalled, not dead)
//   skip   call tpdp_barrier instead of the iteration's collective
//   unmark (reducer) never mark parameter 1 in that iteration
// FAULT_PID_DIR: each rank writes its pid to DIR/rank.R (the test kills
// whatever is left). Exit 0 on success, 1 with the error on stderr.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tpdp/tpdp.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};
int g_rank = -1;

struct Fault {
  std::string action;
  int rank = -1, iter = -1, delay_ms = -1;
};

Fault ParseFault() {
  Fault f;
  const char *v = std::getenv("FAULT");
  if (v == nullptr || *v == '\0') return f;
  char action[16] = {0};
  int n = std::sscanf(v, "%15[a-z]:%d:%d:%d", action, &f.rank, &f.iter,
                      &f.delay_ms);
  if (n < 3) {
    std::fprintf(stderr, "fault_helper: bad FAULT '%s'\n", v);
    std::exit(2);
  }
  f.action = action;
  return f;
}

int Fail(const char *what) {
  std::fprintf(stderr, "fault_helper: rank %d: %s failed: %s\n", g_rank, what,
               tpdp_last_error());
  return 1;
}

// Act now (delay < 0) or from a thread DELAY_MS later, while `what` runs.
void Strike(const Fault &f, const char *what) {
  int sig = f.action == "kill" ? SIGKILL : SIGSTOP;
  std::fprintf(stderr, "fault_helper: rank %d: %s %s %s\n", g_rank,
               sig == SIGKILL ? "SIGKILL" : "SIGSTOP",
               f.delay_ms < 0 ? "before" : "during", what);
  std::fflush(stderr);
  if (f.delay_ms < 0) {
    kill(getpid(), sig);
    return;
  }
  std::thread([sig, d = f.delay_ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(d));
    kill(getpid(), sig);
  }).detach();
}

// 1 if the fault acts on this rank at iteration `it` (kill/stop: struck).
bool Hits(const Fault &f, int it, const char *what) {
  if (f.rank != g_rank || (f.iter != it && f.iter >= 0)) return false;
  if (f.action == "kill" || f.action == "stop") Strike(f, what);
  return true;
}

tpdp_tensor Vec(std::vector<float> &v) {
  return tpdp_tensor_1d(v.data(), TPDP_F32, (int64_t)v.size());
}

int Collectives(tpdp_comm *world, bool ring, const Fault &f) {
  int n = tpdp_comm_size(world);
  tpdp_mesh *mesh = nullptr;
  std::vector<tpdp_comm *> comms = {world};
  if (!ring && n > 2 && n % 2 == 0) {
    std::string spec = "dp=" + std::to_string(n / 2) + ",tp=2";
    if (tpdp_mesh_create_from_string(world, spec.c_str(), &mesh))
      return Fail("tpdp_mesh_create");
    comms.assign(2, nullptr);
    tpdp_mesh_dim_comm(mesh, 0, &comms[0]);
    tpdp_mesh_dim_comm(mesh, 1, &comms[1]);
  }
  std::vector<float> x((size_t)1 << 20, 1.0f);
  tpdp_tensor t = Vec(x);
  const char *what = ring ? "tpdp_allreduce (avg, ring)" : "tpdp_allreduce";
  for (int it = 0; it < 20; it++) {
    for (tpdp_comm *c : comms) {
      bool hit = c == comms[0] && Hits(f, it, what);
      tpdp_status st =
          hit && f.action == "skip"
              ? tpdp_barrier(c)
              : tpdp_allreduce(c, &t, &t, ring ? TPDP_OP_AVG : TPDP_OP_SUM);
      if (st) return Fail(what);
      if (!ring) std::fill(x.begin(), x.end(), 1.0f);
    }
  }
  if (tpdp_mesh_destroy(mesh)) return Fail("tpdp_mesh_destroy");
  return 0;
}

int Reducer(tpdp_comm *world, const Fault &f) {
  const int64_t n = (int64_t)1 << 21;
  std::vector<float> p0(n, 1.0f), p1(n, 1.0f), g0(n), g1(n);
  tpdp_reducer_param ps[2];
  ps[0] = {Vec(p0), Vec(g0), "fc.weight"};
  ps[1] = {Vec(p1), Vec(g1), "fc.bias"};
  tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
  o.first_bucket_bytes = TPDP_BUCKET_CAP_BYTES; /* one bucket */
  tpdp_reducer *r = nullptr;
  if (tpdp_reducer_create(world, ps, 2, &o, &r))
    return Fail("tpdp_reducer_create");
  int rc = 0;
  for (int it = 0; it < 20 && rc == 0; it++) {
    if (tpdp_reducer_prepare(r)) {
      rc = Fail("tpdp_reducer_prepare");
      break;
    }
    std::fill(g0.begin(), g0.end(), 1.0f);
    std::fill(g1.begin(), g1.end(), 1.0f);
    bool unmark = f.action == "unmark" && f.rank == g_rank && f.iter == it;
    if (tpdp_reducer_mark_ready(r, 1) ||
        (!unmark && tpdp_reducer_mark_ready(r, 0)))
      rc = Fail("tpdp_reducer_mark_ready");
    else {
      if (f.action != "unmark") Hits(f, it, "tpdp_reducer_finalize");
      if (tpdp_reducer_finalize(r)) rc = Fail("tpdp_reducer_finalize");
    }
  }
  tpdp_status st = tpdp_reducer_destroy(r);
  if (rc == 0 && st) rc = Fail("tpdp_reducer_destroy");
  return rc;
}

// Fully sharded units over the world: a root with a small parameter and
// two blocks of 1 Mi f32 each, level 3.
int Fsdp(tpdp_comm *world, const Fault &f) {
  const int64_t n = (int64_t)1 << 20;
  std::vector<std::vector<float>> data = {std::vector<float>(16, 1.0f),
                                          std::vector<float>(n, 1.0f),
                                          std::vector<float>(n, 1.0f)};
  tpdp_module *root = nullptr, *list = nullptr, *blocks[2] = {};
  std::vector<tpdp_param *> params;
  if (tpdp_module_create("Net", &root) ||
      tpdp_module_create("ModuleList", &list) ||
      tpdp_module_add_child(root, "blocks", list))
    return Fail("tpdp_module_create");
  for (int b = 0; b < 3; b++) {
    tpdp_module *m = root;
    if (b > 0) {
      if (tpdp_module_create("Block", &blocks[b - 1]) ||
          tpdp_module_add_child(list, std::to_string(b - 1).c_str(),
                                blocks[b - 1]))
        return Fail("tpdp_module_create");
      m = blocks[b - 1];
    }
    tpdp_tensor t = Vec(data[b]);
    tpdp_param *q = nullptr;
    if (tpdp_param_create(&t, &q) || tpdp_module_add_param(m, "w", q))
      return Fail("tpdp_param_create");
    params.push_back(q);
  }
  tpdp_fully_shard_options o = tpdp_fully_shard_options_default();
  tpdp_fsdp_unit *unit = nullptr, *top = nullptr;
  for (tpdp_module *b : blocks)
    if (tpdp_fully_shard(b, world, &o, &unit)) return Fail("tpdp_fully_shard");
  if (tpdp_fully_shard(root, world, &o, &top)) return Fail("tpdp_fully_shard");
  int rc = 0;
  for (int it = 0; it < 20 && rc == 0; it++) {
    if (tpdp_module_forward_begin(root)) rc = Fail("forward_begin");
    for (int b = 0; b < 2 && rc == 0; b++) {
      if (b == 1) Hits(f, it, "the forward of blocks.1");
      if (tpdp_module_forward_begin(blocks[b]) ||
          tpdp_module_forward_end(blocks[b]))
        rc = Fail("the forward of a block");
    }
    if (rc == 0 &&
        (tpdp_module_forward_end(root) || tpdp_module_backward_begin(root)))
      rc = Fail("forward_end / backward_begin");
    for (int b = 1; b >= 0 && rc == 0; b--)
      if (tpdp_module_backward_begin(blocks[b]) ||
          tpdp_module_backward_end(blocks[b]))
        rc = Fail("the backward of a block");
    if (rc == 0 && (tpdp_module_backward_end(root) || tpdp_fsdp_finalize(top)))
      rc = Fail("tpdp_fsdp_finalize");
  }
  for (tpdp_param *q : params) tpdp_param_release(q);
  if (tpdp_module_destroy(root) && rc == 0) rc = Fail("tpdp_module_destroy");
  return rc;
}

// A checkpoint of 2 Mi f32 per rank (w, sharded) and 5 (b, replicated)
// whose values depend on `value`, so that a check tells which one a
// directory holds.
int Checkpoint(tpdp_comm *world, bool save, const char *dir, const char *v,
               const Fault &f) {
  double value = std::atof(v);
  int n = tpdp_comm_size(world);
  tpdp_mesh *mesh = nullptr;
  tpdp_spec *spec = nullptr;
  tpdp_state_dict *sd = nullptr;
  int64_t g[2] = {(int64_t)n << 17, 16}, bs[1] = {5};
  tpdp_placement s0 = tpdp_shard(0);
  std::string mspec = "tp=" + std::to_string(n);
  if (tpdp_mesh_create_from_string(world, mspec.c_str(), &mesh) ||
      tpdp_spec_create(mesh, &s0, 1, 2, g, TPDP_F32, kCpu, &spec) ||
      tpdp_state_dict_create(&sd))
    return Fail("checkpoint setup");
  int64_t ls[2], off[2];
  tpdp_spec_local_shape(spec, g_rank, ls, off);
  std::vector<float> w((size_t)(ls[0] * ls[1])), b(5);
  tpdp_tensor tw, tb;
  tpdp_tensor_init(&tw, w.data(), TPDP_F32, kCpu, 2, ls);
  tpdp_tensor_init(&tb, b.data(), TPDP_F32, kCpu, 1, bs);
  if (tpdp_state_dict_add(sd, "w", &tw, spec) ||
      tpdp_state_dict_add(sd, "b", &tb, nullptr))
    return Fail("tpdp_state_dict_add");
  auto want = [&](int64_t k) {
    return (float)(value + (double)((off[0] * 16 + k) % 1000));
  };
  int rc = 0;
  if (save) {
    for (int64_t k = 0; k < (int64_t)w.size(); k++) w[k] = want(k);
    for (int k = 0; k < 5; k++) b[k] = (float)(value * 10 + k);
    tpdp_state_dict_set_meta(sd, "value", v);
    Hits(f, f.iter, "tpdp_checkpoint_save"); /* ITER is ignored */
    if (tpdp_checkpoint_save(sd, dir, world, nullptr))
      rc = Fail("tpdp_checkpoint_save");
  } else if (tpdp_checkpoint_load(sd, dir, world, nullptr)) {
    rc = Fail("tpdp_checkpoint_load");
  } else {
    int bad = 0;
    for (int64_t k = 0; k < (int64_t)w.size(); k++) bad += w[k] != want(k);
    for (int k = 0; k < 5; k++) bad += b[k] != (float)(value * 10 + k);
    const char *m = tpdp_state_dict_get_meta(sd, "value");
    if (bad || m == nullptr || std::atof(m) != value) {
      std::fprintf(stderr,
                   "fault_helper: %d values differ from checkpoint %s "
                   "(metadata value %s)\n",
                   bad, v, m ? m : "none");
      rc = 1;
    }
  }
  tpdp_state_dict_destroy(sd);
  tpdp_spec_destroy(spec);
  tpdp_mesh_destroy(mesh);
  return rc;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  Fault f = ParseFault();
  if (tpdp_init(&argc, &argv) != TPDP_SUCCESS) return Fail("tpdp_init");
  tpdp_comm *world = nullptr;
  tpdp_comm_world(&world);
  g_rank = tpdp_comm_rank(world);
  if (const char *d = std::getenv("FAULT_PID_DIR")) {
    std::string path = std::string(d) + "/rank." + std::to_string(g_rank);
    if (FILE *fp = std::fopen(path.c_str(), "w")) {
      std::fprintf(fp, "%d\n", (int)getpid());
      std::fclose(fp);
    }
  }
  int rc = 2;
  if (mode == "allreduce" || mode == "ring")
    rc = Collectives(world, mode == "ring", f);
  else if (mode == "reducer")
    rc = Reducer(world, f);
  else if (mode == "fsdp")
    rc = Fsdp(world, f);
  else if ((mode == "save" || mode == "check") && argc == 4)
    rc = Checkpoint(world, mode == "save", argv[2], argv[3], f);
  // As a training program would: report, finalize, exit non-zero.
  if (tpdp_finalize() && rc == 0) rc = Fail("tpdp_finalize");
  return rc;
}
