// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/comm.h on 2 ranks: each case asserts the status and
// that the message names the communicator, the rank, the buffer at fault
// and the expected and actual values. Every case fails the same way on
// every rank (before any communication, or in the agreement that the
// library runs first), so no rank is left waiting.
// Cases:
//  - tpdp_comm_destroy of the world (owned by tpdp)
//  - collectives: NULL communicator, NULL recv / send tensor, NULL work
//    pointer of an async call, send/recv dtype mismatch, invalid dtype,
//    negative size, non-contiguous buffer, NULL data with elements, device
//    memory on the MPI backend, invalid reduce op, broadcast root out of
//    range, count rules of allreduce, allgather, reduce_scatter, alltoall,
//    broadcast on the root
//  - tpdp_work_test / tpdp_comm_split / tpdp_comm_order_after: NULLs
//  - tpdp_comm_agree: NULL communicator, a local_status that is no
//    tpdp_status (agreed: every rank names rank 0)
//  - tpdp_mesh_parse / _create_from_string: no '=', non-integer, zero,
//    negative and huge sizes, empty and bad-character names, duplicates,
//    9 dims, empty text
//  - tpdp_mesh_create: product != communicator size, int overflow of the
//    rank count, 0 dims, NULL names entry, duplicate names
//  - tpdp_mesh_dim_comm(_by_name): dim out of range, unknown dim name
//    (the mesh's dims listed), a layout-only mesh
//  - tpdp_mesh_coords / _rank_of / _group_ranks: out of range
//  - tpdp_comm_create_nccl / tpdp_cuda_device_count without --config=cuda
//  - a mesh's own sub-communicator destroyed; ranks passing different mesh
//    specs; allreduce on one rank while the other calls allgather, on a
//    communicator made with TPDP_DEBUG_COLLECTIVES=1
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "comm/services.h"
#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};

// A 1-D f32 buffer of n elements that frees itself.
struct Buf {
  std::vector<float> v;
  tpdp_tensor t;
  explicit Buf(int64_t n, tpdp_dtype dtype = TPDP_F32)
      : v((size_t)(n > 0 ? n : 1) * 2) {
    t = tpdp_tensor_1d(v.data(), dtype, n);
  }
};

std::string Rank() { return "rank " + std::to_string(tpdp_test::WorldRank()); }

TEST(CommMisuse, DestroyOfTheWorld) {
  EXPECT_TPDP_ERROR(tpdp_comm_destroy(tpdp_test::World()), TPDP_ERR_STATE,
                    "tpdp_comm_destroy: ",
                    "the world communicator is owned by tpdp; tpdp_finalize "
                    "destroys it");
}

TEST(CommMisuse, NullCommunicatorAndTensors) {
  Buf a(4), b(4);
  EXPECT_TPDP_ERROR(tpdp_allreduce(nullptr, &a.t, &b.t, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_allreduce: ", "communicator is NULL");
  EXPECT_TPDP_ERROR(
      tpdp_allreduce(tpdp_test::World(), &a.t, nullptr, TPDP_OP_SUM),
      TPDP_ERR_NULL_POINTER, "recv tensor is NULL (world)");
  EXPECT_TPDP_ERROR(tpdp_allgather(tpdp_test::World(), nullptr, &b.t),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_allgather: ", "send tensor is NULL (world)");
}

TEST(CommMisuse, AsyncWithoutWorkPointer) {
  Buf a(4), b(4);
  EXPECT_TPDP_ERROR(tpdp_allreduce_async(tpdp_test::World(), &a.t, &b.t,
                                         TPDP_OP_SUM, nullptr),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_allreduce_async: ", "work handle pointer is NULL");
}

TEST(CommMisuse, SendRecvDtypeMismatch) {
  Buf a(4), b(4, TPDP_F64);
  const std::string where = "(world, " + Rank() + ")";
  EXPECT_TPDP_ERROR(tpdp_allreduce(tpdp_test::World(), &a.t, &b.t, TPDP_OP_SUM),
                    TPDP_ERR_DTYPE_MISMATCH, "send dtype f32 != recv dtype f64",
                    where.c_str());
}

TEST(CommMisuse, InvalidDtypeAndNegativeSize) {
  Buf a(4), b(4);
  b.t.dtype = (tpdp_dtype)99;
  EXPECT_TPDP_ERROR(tpdp_allreduce(tpdp_test::World(), &a.t, &b.t, TPDP_OP_SUM),
                    TPDP_ERR_DTYPE_MISMATCH,
                    "recv buffer has invalid dtype 99 on world");
  Buf c(4);
  c.t.shape[0] = -4;
  EXPECT_TPDP_ERROR(tpdp_allreduce(tpdp_test::World(), &a.t, &c.t, TPDP_OP_SUM),
                    TPDP_ERR_BAD_DIM_SIZE,
                    "recv buffer has shape[0] = -4 (world)");
}

TEST(CommMisuse, NonContiguousBuffer) {
  Buf a(8), b(4);
  int64_t shape[2] = {2, 2};
  tpdp_tensor strided;
  ASSERT_TPDP_OK(
      tpdp_tensor_init(&strided, a.v.data(), TPDP_F32, kCpu, 2, shape));
  strided.strides[0] = 4;  // every other row of a 4x2 buffer
  const std::string msg =
      "send buffer is not contiguous (world, " + Rank() + ")";
  EXPECT_TPDP_ERROR(
      tpdp_allreduce(tpdp_test::World(), &strided, &b.t, TPDP_OP_SUM),
      TPDP_ERR_INVALID_ARGUMENT, msg.c_str());
}

TEST(CommMisuse, NullDataWithElements) {
  Buf a(4);
  tpdp_tensor b = tpdp_tensor_1d(nullptr, TPDP_F32, 4);
  EXPECT_TPDP_ERROR(tpdp_allreduce(tpdp_test::World(), &a.t, &b, TPDP_OP_SUM),
                    TPDP_ERR_NULL_POINTER,
                    "recv buffer has NULL data and 4 elements (world)");
}

TEST(CommMisuse, DeviceMemoryOnTheMpiBackend) {
  Buf a(4), b(4);
  a.t.device.type = TPDP_DEVICE_CUDA;
  EXPECT_TPDP_ERROR(
      tpdp_allreduce(tpdp_test::World(), &a.t, &b.t, TPDP_OP_SUM),
      TPDP_ERR_DEVICE_MISMATCH,
      "send buffer is on cuda:0 but communicator world (mpi backend) moves "
      "host memory");
}

TEST(CommMisuse, InvalidReduceOp) {
  Buf a(4), b(4);
  EXPECT_TPDP_ERROR(
      tpdp_allreduce(tpdp_test::World(), &a.t, &b.t, (tpdp_reduce_op)9),
      TPDP_ERR_INVALID_ARGUMENT, "invalid reduce op 9");
}

TEST(CommMisuse, BroadcastRootOutOfRange) {
  Buf a(4);
  EXPECT_TPDP_ERROR(tpdp_broadcast(tpdp_test::World(), &a.t, &a.t, 2),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_broadcast: ", "root 2 outside [0, 2) of world");
  EXPECT_TPDP_ERROR(tpdp_broadcast(tpdp_test::World(), &a.t, &a.t, -1),
                    TPDP_ERR_INVALID_ARGUMENT, "root -1 outside [0, 2)");
}

TEST(CommMisuse, CountRulesNameBothCountsAndTheRanks) {
  tpdp_comm *w = tpdp_test::World();
  Buf s4(4), r3(3), r5(5), s3(3);
  const std::string ranks = "comm world has 2 ranks (" + Rank() + ")";
  EXPECT_TPDP_ERROR(tpdp_allreduce(w, &s4.t, &r3.t, TPDP_OP_SUM),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "numel(send) must equal numel(recv): send has 4 elements, "
                    "recv 3",
                    ranks.c_str());
  EXPECT_TPDP_ERROR(tpdp_allgather(w, &s4.t, &r5.t), TPDP_ERR_SHAPE_MISMATCH,
                    "numel(recv) must be size * numel(send): send has 4 "
                    "elements, recv 5");
  EXPECT_TPDP_ERROR(tpdp_reduce_scatter(w, &s4.t, &r3.t, TPDP_OP_SUM),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "numel(send) must be size * numel(recv): send has 4 "
                    "elements, recv 3");
  Buf r3b(3);
  EXPECT_TPDP_ERROR(tpdp_alltoall(w, &s3.t, &r3b.t), TPDP_ERR_SHAPE_MISMATCH,
                    "numel(send) must equal numel(recv) and divide by size: "
                    "send has 3 elements");
}

TEST(CommMisuse, BroadcastCountOnTheRoot) {
  // Every rank is the root of its own check here: root = own rank would
  // need the same root everywhere, so both ranks use root 0 and only rank
  // 0 can see the mismatch; rank 1 passes matching counts so that neither
  // enters the collective.
  Buf s4(4), r3(3);
  if (tpdp_test::WorldRank() != 0) GTEST_SKIP() << "a root-only check";
  EXPECT_TPDP_ERROR(tpdp_broadcast(tpdp_test::World(), &s4.t, &r3.t, 0),
                    TPDP_ERR_SHAPE_MISMATCH,
                    "numel(send) must equal numel(recv) on the root: send has "
                    "4 elements, recv 3");
}

TEST(CommMisuse, WorkSplitOrderAfterNulls) {
  int done = 0;
  EXPECT_TPDP_ERROR(tpdp_work_test(nullptr, &done), TPDP_ERR_NULL_POINTER,
                    "tpdp_work_test: ", "'work' is NULL");
  EXPECT_TPDP_ERROR(tpdp_comm_split(nullptr, 0, 0, nullptr),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_comm_split: ", "'comm' is NULL");
  EXPECT_TPDP_ERROR(tpdp_comm_order_after(nullptr, nullptr),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_comm_order_after: ", "'comm' is NULL");
}

TEST(CommMisuse, AgreeNullCommunicatorAndBadStatus) {
  EXPECT_TPDP_ERROR(tpdp_comm_agree(nullptr, TPDP_SUCCESS, nullptr),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_comm_agree: argument 'comm' is NULL");
  EXPECT_TPDP_ERROR(tpdp_comm_agree(nullptr, TPDP_ERR_IO, "lost"),
                    TPDP_ERR_NULL_POINTER,
                    "tpdp_comm_agree: argument 'comm' is NULL");
  // Every rank passes a value outside the enum: each rank's is a failure
  // of its own, and rank 0's is agreed.
  EXPECT_TPDP_ERROR(
      tpdp_comm_agree(tpdp_test::World(), static_cast<tpdp_status>(-1),
                      nullptr),
      TPDP_ERR_INVALID_ARGUMENT,
      "tpdp_comm_agree: argument 'local_status' (-1) is not a tpdp_status "
      "value (rank 0 of world)");
  EXPECT_TPDP_ERROR(
      tpdp_comm_agree(tpdp_test::World(), TPDP_STATUS_COUNT, nullptr),
      TPDP_ERR_INVALID_ARGUMENT, "argument 'local_status' (",
      ") is not a tpdp_status value (rank 0 of world)");
}

TEST(CommMisuse, MeshSpecTextErrors) {
  tpdp_comm *w = tpdp_test::World();
  tpdp_mesh *m = nullptr;
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "dp:2", &m), TPDP_ERR_PARSE,
                    "tpdp_mesh_create_from_string: ",
                    "mesh spec 'dp:2': item 0 'dp:2' is not NAME=SIZE");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "dp=two", &m),
                    TPDP_ERR_PARSE, "size 'two' of dim 'dp' is not an integer");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "dp=0", &m),
                    TPDP_ERR_BAD_DIM_SIZE, "dim 'dp' has size 0 (must be > 0)");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "dp=-2", &m),
                    TPDP_ERR_BAD_DIM_SIZE, "dim 'dp' has size -2");
  EXPECT_TPDP_ERROR(
      tpdp_mesh_create_from_string(w, "dp=99999999999999999999", &m),
      TPDP_ERR_BAD_DIM_SIZE, "dim 'dp' has size 99999999999999999999",
      "too large");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "=2", &m),
                    TPDP_ERR_EMPTY_NAME, "dim 0 has an empty name");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "d p=2", &m),
                    TPDP_ERR_PARSE, "dim name 'd p' has character ' '");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "tp=1,tp=2", &m),
                    TPDP_ERR_DUPLICATE, "dim name 'tp' appears twice");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(
                        w, "a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=2", &m),
                    TPDP_ERR_TOO_MANY_DIMS, "has more than 8 dims");
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(w, "  ", &m), TPDP_ERR_PARSE,
                    "empty mesh spec (expected e.g. dp=2,tp=2)");
  EXPECT_EQ(m, nullptr);
}

TEST(CommMisuse, MeshSizeDiffersFromTheCommunicator) {
  tpdp_mesh *m = nullptr;
  int64_t sizes[2] = {3, 1};
  const char *names[2] = {"dp", "tp"};
  // Every rank fails alike; every rank carries rank 0's message (the
  // agreement's lowest failing rank).
  const std::string msg =
      "mesh [3, 1] has 3 ranks but communicator world has 2 (rank 0) (rank 0 "
      "of world)";
  EXPECT_TPDP_ERROR(tpdp_mesh_create(tpdp_test::World(), 2, sizes, names, &m),
                    TPDP_ERR_MESH_SIZE, "tpdp_mesh_create: ", msg.c_str());
  EXPECT_EQ(m, nullptr);
}

TEST(CommMisuse, MeshRankCountOverflow) {
  tpdp_mesh *m = nullptr;
  int64_t sizes[2] = {(int64_t)1 << 31, (int64_t)1 << 31};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, sizes, nullptr, &m),
                    TPDP_ERR_BAD_DIM_SIZE,
                    "mesh [2147483648, 2147483648] has more than 2147483647 "
                    "ranks");
}

TEST(CommMisuse, MeshDimsBadCountNullAndDuplicateNames) {
  tpdp_mesh *m = nullptr;
  int64_t sizes[2] = {1, 2};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 0, sizes, nullptr, &m),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "mesh needs at least 1 dim, got 0");
  const char *null_name[2] = {"dp", nullptr};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, sizes, null_name, &m),
                    TPDP_ERR_NULL_POINTER, "mesh dim 1 name is NULL");
  const char *dup[2] = {"tp", "tp"};
  EXPECT_TPDP_ERROR(tpdp_mesh_create(nullptr, 2, sizes, dup, &m),
                    TPDP_ERR_DUPLICATE,
                    "mesh dim name 'tp' used by dims 0 and 1");
}

struct Mesh {
  tpdp_mesh *m = nullptr;
  Mesh(tpdp_comm *c, const char *spec) {
    EXPECT_TPDP_OK(tpdp_mesh_create_from_string(c, spec, &m));
  }
  ~Mesh() { EXPECT_TPDP_OK(tpdp_mesh_destroy(m)); }
};

TEST(CommMisuse, MeshDimCommOutOfRangeOrUnknown) {
  Mesh mesh(tpdp_test::World(), "dp=2,tp=1");
  tpdp_comm *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm(mesh.m, 2, &c),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_mesh_dim_comm: ", "dim 2 outside [0, 2)");
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm_by_name(mesh.m, "pt", &c),
                    TPDP_ERR_NOT_FOUND, "tpdp_mesh_dim_comm_by_name: ",
                    "mesh has no dim named 'pt' (its dims: dp, tp)");
  EXPECT_EQ(c, nullptr);
}

TEST(CommMisuse, LayoutOnlyMeshHasNoCommunicators) {
  Mesh mesh(nullptr, "dp=4,tp=2");
  tpdp_comm *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_mesh_dim_comm_by_name(mesh.m, "tp", &c),
                    TPDP_ERR_STATE,
                    "mesh is layout-only (created without a communicator)");
}

TEST(CommMisuse, MeshCoordinatesOutOfRange) {
  Mesh mesh(nullptr, "dp=4,tp=2");
  int64_t coords[2];
  EXPECT_TPDP_ERROR(tpdp_mesh_coords(mesh.m, 8, coords),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "rank 8 outside [0, 8) of the mesh");
  int64_t bad[2] = {1, 2};
  int r = -1;
  EXPECT_TPDP_ERROR(tpdp_mesh_rank_of(mesh.m, bad, &r),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "coordinate 2 outside [0, 2) of dim 'tp'");
  int ranks[4];
  EXPECT_TPDP_ERROR(tpdp_mesh_group_ranks(mesh.m, 0, -1, ranks),
                    TPDP_ERR_INVALID_ARGUMENT, "rank -1 outside [0, 8)");
}

TEST(CommMisuse, NcclWithoutCudaBuild) {
  if (tpdp_nccl_available()) GTEST_SKIP() << "a --config=cuda build";
  tpdp_comm *c = nullptr;
  EXPECT_TPDP_ERROR(tpdp_comm_create_nccl(tpdp_test::World(), 0, &c),
                    TPDP_ERR_UNSUPPORTED,
                    "tpdp_comm_create_nccl: ", "built without --config=cuda");
  int n = -1;
  EXPECT_TPDP_ERROR(tpdp_cuda_device_count(&n), TPDP_ERR_UNSUPPORTED,
                    "built without --config=cuda");
}

// Fixed: destroying one of a mesh's own sub-communicators used to succeed
// (the mesh then freed it again); it is refused, naming the owner, and the
// mesh still destroys it cleanly.
TEST(CommMisuse, DestroyOfAMeshSubCommunicator) {
  Mesh mesh(tpdp_test::World(), "dp=2,tp=1");
  tpdp_comm *dp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh.m, "dp", &dp));
  const std::string msg =
      "communicator mesh.dp (" + Rank() + ") belongs to a mesh";
  EXPECT_TPDP_ERROR(tpdp_comm_destroy(dp), TPDP_ERR_STATE,
                    "tpdp_comm_destroy: ", msg.c_str(),
                    "tpdp_mesh_destroy destroys it");
}

// Fixed: ranks passing different mesh specs used to hang or build
// communicators that disagree with the mesh; every rank now fails, naming
// each rank and its spec.
TEST(CommMisuse, RanksPassDifferentMeshSpecs) {
  tpdp_mesh *m = nullptr;
  const char *spec = tpdp_test::WorldRank() == 0 ? "dp=2,tp=1" : "dp=1,tp=2";
  const std::string head =
      "ranks of world passed different meshes (this is " + Rank() + "): ";
  EXPECT_TPDP_ERROR(tpdp_mesh_create_from_string(tpdp_test::World(), spec, &m),
                    TPDP_ERR_MESH_MISMATCH, head.c_str(),
                    "rank 0 passed dp=2,tp=1, rank 1 dp=1,tp=2",
                    "every rank must pass the same dims");
  EXPECT_EQ(m, nullptr);
}

// Fixed: with TPDP_DEBUG_COLLECTIVES=1 set when a communicator is made, an
// allreduce on one rank against an allgather on the other no longer hangs:
// both ranks fail, the message showing each rank's call.
TEST(CommMisuse, DifferentCollectivesOnTwoRanks) {
  setenv("TPDP_DEBUG_COLLECTIVES", "1", 1);
  tpdp_comm *c = nullptr;
  tpdp_status made =
      tpdp_comm_split(tpdp_test::World(), 0, tpdp_test::WorldRank(), &c);
  unsetenv("TPDP_DEBUG_COLLECTIVES");
  ASSERT_TPDP_OK(made);
  // Without fingerprints the mismatch below would hang both ranks.
  ASSERT_EQ(comm_debug_collectives(c), 1);
  Buf a(4), b(8);
  const std::string want = "collective mismatch on world/split(0) (this is " +
                           Rank() +
                           "): rank 0 called tpdp_allreduce sum f32 x 4 (#1), "
                           "rank 1 tpdp_allgather f32 x 4 (#1)";
  if (tpdp_test::WorldRank() == 0)
    EXPECT_TPDP_ERROR(tpdp_allreduce(c, &a.t, &a.t, TPDP_OP_SUM),
                      TPDP_ERR_INVALID_ARGUMENT,
                      "tpdp_allreduce: ", want.c_str());
  else
    EXPECT_TPDP_ERROR(tpdp_allgather(c, &a.t, &b.t), TPDP_ERR_INVALID_ARGUMENT,
                      "tpdp_allgather: ", want.c_str());
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

}  // namespace
