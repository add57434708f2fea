// SPDX-License-Identifier: BSD-3-Clause
// A scripted communicator backend for the error paths of comm/: it fills a
// tpdp_comm_ops table (comm/backend.h) whose split, destroy and work
// callbacks fail when told to, so that the front end's and the mesh's
// handling of backend failures can be tested in one process, without MPI.
// Its allgather plays the other ranks: by default they pass what this rank
// passes; edit_peer makes them differ (agreement checks).
#ifndef TPDP_TESTS_COMM_FAKE_BACKEND_H
#define TPDP_TESTS_COMM_FAKE_BACKEND_H

#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "comm/backend.h"

namespace fake_backend {

// What the fake does and what it saw. One at a time (Script::Current).
struct Script {
  int split_calls = 0;
  int fail_split_call = -1;            // this split call (0, 1, ...) fails
  bool split_gives_nothing = false;    // split answers *out = NULL
  std::set<std::string> fail_destroy;  // comm names whose destroy fails
  std::vector<std::string> destroyed;  // comm names, in destroy order
  int live = 0;                        // comms alive (the parent included)
  // Work handles made by collectives: wait / release fail when set.
  bool fail_wait = false;
  bool fail_release = false;
  int released = 0;
  // Collectives run (agreement exchanges included).
  int collectives = 0;
  // Called on each other rank's block of an allgather (see Collective).
  std::function<void(int peer, void *block)> edit_peer;

  static Script *&Current() {
    static Script *s = nullptr;
    return s;
  }
};

inline tpdp_status Split(tpdp_comm *comm, int color, int key, tpdp_comm **out);
inline tpdp_status Destroy(tpdp_comm *comm);
inline tpdp_status Collective(tpdp_comm *comm, const tpdp_coll_args *args,
                              tpdp_work **out);

inline const tpdp_comm_ops *Ops() {
  static tpdp_comm_ops ops = [] {
    tpdp_comm_ops o = {};
    o.backend = "fake";
    o.device_type = TPDP_DEVICE_CPU;
    o.collective = Collective;
    o.split = Split;
    o.destroy = Destroy;
    return o;
  }();
  return &ops;
}

inline tpdp_status Split(tpdp_comm *comm, int color, int key, tpdp_comm **out) {
  Script *s = Script::Current();
  int call = s->split_calls++;
  if (call == s->fail_split_call)
    return TPDP_ERR(TPDP_ERR_MPI, "fake split call %d of %s failed", call,
                    comm->name);
  if (s->split_gives_nothing || color < 0) {
    *out = nullptr;
    return TPDP_SUCCESS;
  }
  std::string name = std::string(comm->name) + "/split";
  tpdp_status st = comm_alloc(Ops(), key, 1, name.c_str(), out);
  if (st == TPDP_SUCCESS) s->live++;
  return st;
}

inline tpdp_status Destroy(tpdp_comm *comm) {
  Script *s = Script::Current();
  s->destroyed.push_back(comm->name);
  s->live--;
  if (s->fail_destroy.count(comm->name))
    return TPDP_ERR(TPDP_ERR_MPI, "fake destroy of %s failed", comm->name);
  return TPDP_SUCCESS;
}

inline tpdp_status WorkWait(tpdp_work *work) {
  if (Script::Current()->fail_wait)
    return TPDP_ERR(TPDP_ERR_MPI, "fake wait of %s failed",
                    comm_coll_name(work->kind));
  return TPDP_SUCCESS;
}

inline tpdp_status WorkTest(tpdp_work *, int *done) {
  *done = 1;
  return TPDP_SUCCESS;
}

inline tpdp_status WorkRelease(tpdp_work *work) {
  Script *s = Script::Current();
  s->released++;
  if (s->fail_release)
    return TPDP_ERR(TPDP_ERR_MPI, "fake release of %s failed",
                    comm_coll_name(work->kind));
  return TPDP_SUCCESS;
}

inline tpdp_status Collective(tpdp_comm *comm, const tpdp_coll_args *args,
                              tpdp_work **out) {
  tpdp_work *w = static_cast<tpdp_work *>(calloc(1, sizeof(tpdp_work)));
  if (w == nullptr) return TPDP_ERR(TPDP_ERR_OUT_OF_MEMORY, "fake work");
  Script *s = Script::Current();
  s->collectives++;
  if (args->kind == TPDP_COLL_ALLGATHER) {
    // Every rank's block is this rank's send (as if all passed the same),
    // then edit_peer may change the other ranks' blocks.
    size_t bytes = tpdp_tensor_nbytes(args->send);
    char *recv = static_cast<char *>(args->recv->data);
    for (int r = 0; r < comm->size; r++) {
      if (bytes) memcpy(recv + r * bytes, args->send->data, bytes);
      if (r != comm->rank && s->edit_peer) s->edit_peer(r, recv + r * bytes);
    }
  }
  w->comm = comm;
  w->kind = args->kind;
  static const tpdp_work_ops work_ops = {WorkWait, WorkTest, nullptr,
                                         WorkRelease};
  w->ops = &work_ops;
  *out = w;
  return TPDP_SUCCESS;
}

// A parent communicator of `size` ranks seen from `rank`, driven by
// `script` while it lives; destroyed (through the fake) at the end.
class Parent {
 public:
  Parent(Script *script, int rank, int size) {
    Script::Current() = script;
    if (comm_alloc(Ops(), rank, size, "fake", &comm_) != TPDP_SUCCESS)
      comm_ = nullptr;
    else
      script->live++;
  }
  ~Parent() {
    (void)tpdp_comm_destroy(comm_);
    Script::Current() = nullptr;
  }
  tpdp_comm *get() const { return comm_; }

 private:
  tpdp_comm *comm_ = nullptr;
};

}  // namespace fake_backend

#endif  // TPDP_TESTS_COMM_FAKE_BACKEND_H
