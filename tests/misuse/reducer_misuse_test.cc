// SPDX-License-Identifier: BSD-3-Clause
// Misuse of include/tpdp/reducer.h on 2 ranks: each case asserts the status
// and that the message names the parameter (index and FQN), the option or
// the call order at fault, with the expected and actual values. Every case
// fails alike on both ranks.
// Cases:
//  - tpdp_bucket_assign: empty tensor list, empty limit list, a limit of 0,
//    an order that is not a permutation, an invalid dtype;
//    tpdp_bucket_assignment_reverse: negative bucket count
//  - tpdp_reducer_create: NULL params, no parameters, options of size 0 /
//    too large / unknown version, limits of 0, negative and infinite divide
//    factors, unknown comm hook, user hook without hook_fn, an integer
//    parameter, a non-contiguous parameter, a gradient of another shape or
//    dtype, device memory on the MPI communicator, one tensor registered
//    twice, copy mode without gradient buffers
//  - call order: mark_ready before prepare, prepare twice, finalize without
//    prepare, finalize with parameters never marked (named), a parameter
//    marked twice, set_sync inside an iteration
//  - lookups: mark_ready index out of range, mark_ready_ptr of an unknown
//    (e.g. reallocated) parameter, grad_view and bucket out of range
//  - with options.module: mark_ready inside the module's forward, prepare
//    while the module summons full parameters
//  - the mesh's TP communicator handed to the reducer; options that differ
//    between ranks; the caller's gradients given back by destroy; a module
//    parameter's gradient replaced behind the reducer's back
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

const tpdp_device kCpu = {TPDP_DEVICE_CPU, 0};
const char *const kNames[3] = {"fc.weight", "fc.bias", "head.weight"};

// Three f32 parameters (fc.weight [2, 3], fc.bias [2], head.weight [4]) with
// gradient buffers.
struct Params {
  std::vector<std::vector<float>> data, grad;
  std::vector<tpdp_reducer_param> p;
  Params() {
    const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {2}, {4}};
    data.resize(3);
    grad.resize(3);
    p.resize(3);
    for (int i = 0; i < 3; i++) {
      int64_t n = 1;
      for (auto d : shapes[i]) n *= d;
      data[i].assign((size_t)n, 1.f);
      grad[i].assign((size_t)n, 0.f);
      EXPECT_TPDP_OK(tpdp_tensor_init(&p[i].param, data[i].data(), TPDP_F32,
                                      kCpu, (int)shapes[i].size(),
                                      shapes[i].data()));
      EXPECT_TPDP_OK(tpdp_tensor_init(&p[i].grad, grad[i].data(), TPDP_F32,
                                      kCpu, (int)shapes[i].size(),
                                      shapes[i].data()));
      p[i].fqn = kNames[i];
    }
  }
};

// create's status on the world with the given options.
tpdp_status Create(Params &ps, const tpdp_reducer_options *o,
                   tpdp_reducer **r) {
  return tpdp_reducer_create(tpdp_test::World(), ps.p.data(),
                             (int64_t)ps.p.size(), o, r);
}

// A reducer over Params that destroys itself.
struct Reducer {
  Params ps;
  tpdp_reducer *r = nullptr;
  explicit Reducer(tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT) {
    EXPECT_TPDP_OK(Create(ps, &o, &r));
  }
  ~Reducer() { EXPECT_TPDP_OK(tpdp_reducer_destroy(r)); }
  void MarkAll() {
    for (int64_t i = 2; i >= 0; i--)
      EXPECT_TPDP_OK(tpdp_reducer_mark_ready(r, i));
  }
};

TEST(ReducerMisuse, BucketAssignEmptyListsAndZeroLimit) {
  tpdp_tensor t = tpdp_tensor_1d(nullptr, TPDP_F32, 10);
  size_t limits[2] = {64, 0};
  tpdp_bucket_assignment a;
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(&t, 0, limits, 1, nullptr, &a),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_bucket_assign: ", "empty tensor list (ntensors = 0)");
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(&t, 1, limits, 0, nullptr, &a),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "empty limit list (nlimits = 0)");
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(&t, 1, limits, 2, nullptr, &a),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "bucket size limit 1 is 0 bytes; limits must be > 0");
}

TEST(ReducerMisuse, BucketAssignBadOrderAndDtype) {
  tpdp_tensor t[2] = {tpdp_tensor_1d(nullptr, TPDP_F32, 10),
                      tpdp_tensor_1d(nullptr, TPDP_F32, 10)};
  size_t limit = 64;
  int64_t order[2] = {1, 1};
  tpdp_bucket_assignment a;
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(t, 2, &limit, 1, order, &a),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "order[1] = 1: order must be a permutation of 0..1");
  t[1].dtype = (tpdp_dtype)40;
  EXPECT_TPDP_ERROR(tpdp_bucket_assign(t, 2, &limit, 1, nullptr, &a),
                    TPDP_ERR_DTYPE_MISMATCH, "tensor 1 has invalid dtype 40");
  tpdp_bucket_assignment neg;
  std::memset(&neg, 0, sizeof neg);
  neg.nbuckets = -2;
  EXPECT_TPDP_ERROR(tpdp_bucket_assignment_reverse(&neg),
                    TPDP_ERR_INVALID_ARGUMENT, "nbuckets is -2 (must be >= 0)");
}

TEST(ReducerMisuse, CreateWithoutParameters) {
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(
      tpdp_reducer_create(tpdp_test::World(), nullptr, 3, nullptr, &r),
      TPDP_ERR_NULL_POINTER,
      "tpdp_reducer_create: ", "argument 'params' is NULL");
  Params ps;
  EXPECT_TPDP_ERROR(
      tpdp_reducer_create(tpdp_test::World(), ps.p.data(), 0, nullptr, &r),
      TPDP_ERR_INVALID_ARGUMENT,
      "empty parameter list (nparams = 0): a reducer needs at least one "
      "parameter");
  EXPECT_EQ(r, nullptr);
}

TEST(ReducerMisuse, OptionsOfTheWrongSizeOrVersion) {
  Params ps;
  tpdp_reducer *r = nullptr;
  tpdp_reducer_options o;
  std::memset(&o, 0, sizeof o);  // never initialised
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "options->size is 0: initialise the options with "
                    "TPDP_REDUCER_OPTIONS_INIT");
  o = TPDP_REDUCER_OPTIONS_INIT;
  o.size += 16;  // a caller built against a newer tpdp
  const std::string sizes = "options->size is " + std::to_string(o.size) +
                            " bytes but this library's tpdp_reducer_options "
                            "has " +
                            std::to_string(sizeof o);
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    sizes.c_str());
  o = TPDP_REDUCER_OPTIONS_INIT;
  o.version = 77;
  const std::string versions =
      "options->version is 77 but this library knows versions 1 to " +
      std::to_string(TPDP_REDUCER_OPTIONS_VERSION);
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    versions.c_str());
  EXPECT_EQ(r, nullptr);
}

TEST(ReducerMisuse, OptionValuesOutOfRange) {
  Params ps;
  tpdp_reducer *r = nullptr;
  tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
  o.bucket_cap_bytes = 0;
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "bucket size limits must be > 0 bytes",
                    "bucket_cap_bytes = 0");
  o = TPDP_REDUCER_OPTIONS_INIT;
  o.divide_factor = -2.0;
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "divide_factor -2 must be > 0");
  o.divide_factor = std::numeric_limits<double>::infinity();
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "divide_factor inf is not a finite number",
                    "would all become 0");
  o = TPDP_REDUCER_OPTIONS_INIT;
  o.comm_hook = (tpdp_reducer_hook)9;
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "unknown comm hook 9");
  o.comm_hook = TPDP_REDUCER_HOOK_USER;
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "comm_hook is TPDP_REDUCER_HOOK_USER but hook_fn is NULL");
  EXPECT_EQ(r, nullptr);
}

TEST(ReducerMisuse, IntegerParameterNamesItsFqn) {
  Params ps;
  ps.p[1].param.dtype = TPDP_I32;
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(Create(ps, nullptr, &r), TPDP_ERR_DTYPE_MISMATCH,
                    "parameter 1 'fc.bias' has dtype i32: gradients must be "
                    "floating point");
}

TEST(ReducerMisuse, NonContiguousParameter) {
  Params ps;
  ps.p[0].param.strides[0] = 1;  // [2, 3] with strides [1, 1]
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(Create(ps, nullptr, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "parameter 0 'fc.weight' is not contiguous");
}

TEST(ReducerMisuse, GradientUnlikeItsParameter) {
  Params ps;
  ps.p[0].grad.shape[1] = 2;
  ps.p[0].grad.strides[0] = 2;
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(Create(ps, nullptr, &r), TPDP_ERR_SHAPE_MISMATCH,
                    "parameter 0 'fc.weight' has shape [2, 3] but its "
                    "gradient [2, 2]");
  Params ps2;
  ps2.p[2].grad.dtype = TPDP_F64;
  EXPECT_TPDP_ERROR(Create(ps2, nullptr, &r), TPDP_ERR_DTYPE_MISMATCH,
                    "parameter 2 'head.weight' is f32 but its gradient is f64");
}

TEST(ReducerMisuse, DeviceParametersOnTheMpiCommunicator) {
  if (tpdp_nccl_available()) GTEST_SKIP() << "a --config=cuda build";
  Params ps;
  for (auto &p : ps.p) {
    p.param.device.type = TPDP_DEVICE_CUDA;
    p.grad.device.type = TPDP_DEVICE_CUDA;
  }
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(Create(ps, nullptr, &r), TPDP_ERR_UNSUPPORTED,
                    "parameter 0 'fc.weight'", "--config=cuda");
  Params mixed;
  mixed.p[1].grad.device.type = TPDP_DEVICE_CUDA;
  EXPECT_TPDP_ERROR(Create(mixed, nullptr, &r), TPDP_ERR_DEVICE_MISMATCH,
                    "parameter 1 'fc.bias' is on cpu but its gradient on "
                    "cuda:0");
}

TEST(ReducerMisuse, OneTensorRegisteredTwice) {
  Params ps;
  ps.p[2].param.data = ps.p[0].param.data;
  ps.p[2].param.shape[0] = 4;
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(Create(ps, nullptr, &r), TPDP_ERR_DUPLICATE,
                    "duplicate parameter: parameters", "0 ('fc.weight')",
                    "2 ('head.weight')", "share the same tensor data");
}

TEST(ReducerMisuse, CopyModeWithoutGradientBuffers) {
  Params ps;
  ps.p[1].grad.data = nullptr;
  tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
  o.gradient_as_bucket_view = 0;
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_NULL_POINTER,
                    "parameter 1 'fc.bias' has a NULL gradient (copy mode "
                    "needs the caller's gradient buffers)");
}

TEST(ReducerMisuse, MarkReadyBeforePrepare) {
  Reducer red;
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(red.r, 1), TPDP_ERR_STATE,
                    "tpdp_reducer_mark_ready: ",
                    "parameter 1 ('fc.bias') marked ready outside an "
                    "iteration: call tpdp_reducer_prepare before backward");
}

TEST(ReducerMisuse, FinalizeWithoutPrepare) {
  Reducer red;
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(red.r), TPDP_ERR_STATE,
                    "tpdp_reducer_finalize: ", "finalize without prepare",
                    "actual state IDLE");
}

TEST(ReducerMisuse, PrepareTwiceNamesTheUnmarkedParameters) {
  Reducer red;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(red.r));
  ASSERT_TPDP_OK(tpdp_reducer_mark_ready(red.r, 2));
  EXPECT_TPDP_ERROR(tpdp_reducer_prepare(red.r), TPDP_ERR_STATE,
                    "a new iteration started before the previous reduction "
                    "finished: 2 parameter(s) were never marked ready",
                    "fc.weight", "fc.bias", "find_unused_parameters = 1");
  for (int64_t i = 1; i >= 0; i--)
    EXPECT_TPDP_OK(tpdp_reducer_mark_ready(red.r, i));
  EXPECT_TPDP_OK(tpdp_reducer_finalize(red.r));
}

TEST(ReducerMisuse, FinalizeWithParametersNeverMarked) {
  Reducer red;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(red.r));
  ASSERT_TPDP_OK(tpdp_reducer_mark_ready(red.r, 2));
  ASSERT_TPDP_OK(tpdp_reducer_mark_ready(red.r, 0));
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(red.r), TPDP_ERR_STATE,
                    "1 parameter(s) were never marked ready in this "
                    "iteration",
                    "fc.bias", "find_unused_parameters = 1");
  // The reducer stays in the iteration: the late mark still completes it.
  EXPECT_TPDP_OK(tpdp_reducer_mark_ready(red.r, 1));
  EXPECT_TPDP_OK(tpdp_reducer_finalize(red.r));
}

TEST(ReducerMisuse, MarkedTwiceInOneIteration) {
  Reducer red;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(red.r));
  ASSERT_TPDP_OK(tpdp_reducer_mark_ready(red.r, 2));
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(red.r, 2), TPDP_ERR_ALREADY,
                    "parameter 2 ('head.weight') was marked ready twice in "
                    "one iteration",
                    "Likely causes");
  EXPECT_TPDP_ERROR(
      tpdp_reducer_set_sync(red.r, 0), TPDP_ERR_STATE,
      "tpdp_reducer_set_sync: ", "cannot change sync inside an iteration");
  for (int64_t i = 1; i >= 0; i--)
    EXPECT_TPDP_OK(tpdp_reducer_mark_ready(red.r, i));
  EXPECT_TPDP_OK(tpdp_reducer_finalize(red.r));
}

TEST(ReducerMisuse, LookupsOutOfRange) {
  Reducer red;
  ASSERT_TPDP_OK(tpdp_reducer_prepare(red.r));
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(red.r, 3), TPDP_ERR_NOT_FOUND,
                    "unknown parameter index 3: the reducer has 3 parameters");
  std::vector<float> moved(6);  // fc.weight reallocated by the framework
  EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready_ptr(red.r, moved.data()),
                    TPDP_ERR_NOT_FOUND, "tpdp_reducer_mark_ready_ptr: ",
                    "no parameter of this reducer has data pointer",
                    "reallocated since needs a new reducer");
  red.MarkAll();
  EXPECT_TPDP_OK(tpdp_reducer_finalize(red.r));
  tpdp_tensor v;
  EXPECT_TPDP_ERROR(tpdp_reducer_grad_view(red.r, -1, &v), TPDP_ERR_NOT_FOUND,
                    "unknown parameter index -1");
  EXPECT_TPDP_ERROR(
      tpdp_reducer_bucket(red.r, 5, nullptr, nullptr, nullptr, nullptr),
      TPDP_ERR_NOT_FOUND, "unknown bucket 5: the reducer has 1 buckets");
}

TEST(ReducerMisuse, MarkReadyInsideTheModulesForward) {
  tpdp_module *root = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Net", &root));
  {
    tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
    o.module = root;
    Reducer red(o);
    ASSERT_TPDP_OK(tpdp_reducer_prepare(red.r));
    ASSERT_TPDP_OK(tpdp_module_forward_begin(root));
    EXPECT_TPDP_ERROR(tpdp_reducer_mark_ready(red.r, 0), TPDP_ERR_STATE,
                      "parameter 0 ('fc.weight') marked ready inside the "
                      "forward of module '[Net]'");
    ASSERT_TPDP_OK(tpdp_module_forward_end(root));
    red.MarkAll();
    EXPECT_TPDP_OK(tpdp_reducer_finalize(red.r));
  }
  EXPECT_TPDP_OK(tpdp_module_destroy(root));
}

TEST(ReducerMisuse, PrepareWhileTheModuleSummonsFullParams) {
  tpdp_module *root = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Net", &root));
  {
    tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
    o.module = root;
    Reducer red(o);
    ASSERT_TPDP_OK(tpdp_module_set_state(root, TPDP_STATE_SUMMON_FULL_PARAMS));
    EXPECT_TPDP_ERROR(tpdp_reducer_prepare(red.r), TPDP_ERR_STATE,
                      "tpdp_reducer_prepare: ", "module '[Net]'",
                      "current state is SUMMON_FULL_PARAMS");
  }
  EXPECT_TPDP_OK(tpdp_module_destroy(root));
}

// Fixed: a reducer created on the mesh's TP communicator used to overwrite
// rank 1's TP shard with rank 0's; it is refused, naming the parameter, the
// ranks that differ and the communicator to use, and the shards are kept.
TEST(ReducerMisuse, TheTpCommunicatorHandedToTheReducer) {
  tpdp_mesh *mesh = nullptr;
  ASSERT_TPDP_OK(
      tpdp_mesh_create_from_string(tpdp_test::World(), "dp=1,tp=2", &mesh));
  tpdp_comm *tp = nullptr;
  ASSERT_TPDP_OK(tpdp_mesh_dim_comm_by_name(mesh, "tp", &tp));
  Params ps;  // shards: different values on each TP rank
  for (auto &d : ps.data)
    for (auto &x : d) x = (float)tpdp_test::WorldRank() + 1.f;
  tpdp_reducer *r = nullptr;
  EXPECT_TPDP_ERROR(tpdp_reducer_create(tp, ps.p.data(), 3, nullptr, &r),
                    TPDP_ERR_INVALID_ARGUMENT,
                    "parameter 0 'fc.weight' holds different values on the "
                    "ranks of mesh.tp: rank 0's differ from those of rank(s) 1",
                    "tpdp_mesh_dim_comm_by_name(mesh, \"dp\", &comm)");
  EXPECT_EQ(ps.data[0][0], (float)tpdp_test::WorldRank() + 1.f);
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  EXPECT_TPDP_OK(tpdp_mesh_destroy(mesh));
}

// Fixed: options that differ between ranks (bucket caps here) used to go
// unnoticed until a heap-buffer-overflow in MPI_Allreduce or wrong
// gradients; create fails on every rank naming the option and both ranks'
// values.
TEST(ReducerMisuse, OptionsThatDifferBetweenRanks) {
  Params ps;
  tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
  o.first_bucket_bytes = 16;
  o.bucket_cap_bytes = tpdp_test::WorldRank() == 0 ? 16 : 1024;
  tpdp_reducer *r = nullptr;
  const std::string me =
      "(this is rank " + std::to_string(tpdp_test::WorldRank()) + ")";
  EXPECT_TPDP_ERROR(Create(ps, &o, &r), TPDP_ERR_INVALID_ARGUMENT,
                    "tpdp_reducer_create: ",
                    "option bucket_cap_bytes differs across the ranks of "
                    "world: rank 0 has 16, rank 1 has 1024",
                    me.c_str());
  EXPECT_EQ(r, nullptr);
}

// Fixed: in view mode a module parameter's gradient re-pointed at a buffer
// of the framework's own (through options.module's tree) used to be left
// out of the reduction silently; finalize fails naming the parameter and
// what to do, after a reduction that every rank completed.
TEST(ReducerMisuse, GradientReplacedBehindTheReducersBack) {
  tpdp_module *root = nullptr;
  ASSERT_TPDP_OK(tpdp_module_create("Net", &root));
  Params ps;
  tpdp_param *w = nullptr;
  ASSERT_TPDP_OK(tpdp_param_create(&ps.p[0].param, &w));
  ASSERT_TPDP_OK(tpdp_module_add_param(root, "weight", w));
  tpdp_reducer_options o = TPDP_REDUCER_OPTIONS_INIT;
  o.module = root;
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(Create(ps, &o, &r));
  ASSERT_TPDP_OK(tpdp_param_set_grad(w, &ps.p[0].grad));  // a view of ours
  std::vector<float> own(6, 5.f);
  tpdp_tensor mine = ps.p[0].grad;
  mine.data = own.data();
  ASSERT_TPDP_OK(tpdp_param_set_grad(w, &mine));
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  for (int64_t i = 2; i >= 0; i--)
    ASSERT_TPDP_OK(tpdp_reducer_mark_ready(r, i));
  EXPECT_TPDP_ERROR(tpdp_reducer_finalize(r), TPDP_ERR_STATE,
                    "tpdp_reducer_finalize: ",
                    "the gradient of parameter 0 ('fc.weight') (module "
                    "parameter 'weight') was replaced",
                    "left out of the reduction",
                    "write gradients into the reducer's views "
                    "(tpdp_reducer_grad_view");
  EXPECT_EQ(own[0], 5.f);  // not reduced
  // The iteration ended as on the other rank: the next one starts.
  EXPECT_EQ(tpdp_module_get_state(root), TPDP_STATE_IDLE);
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));  // rebuilds: the views move
  tpdp_tensor view;
  ASSERT_TPDP_OK(tpdp_reducer_grad_view(r, 0, &view));
  ASSERT_TPDP_OK(tpdp_param_set_grad(w, &view));
  for (int64_t i = 2; i >= 0; i--)
    ASSERT_TPDP_OK(tpdp_reducer_mark_ready(r, i));
  EXPECT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  tpdp_param_release(w);
  EXPECT_TPDP_OK(tpdp_module_destroy(root));
}

// Fixed: destroying a view-mode reducer used to leave params[i].grad
// pointing into its freed buckets; destroy points it back at the caller's
// own buffer, holding the reduced values.
TEST(ReducerMisuse, DestroyGivesTheGradientsBack) {
  Params ps;
  float *own = ps.grad[0].data();
  tpdp_reducer *r = nullptr;
  ASSERT_TPDP_OK(Create(ps, nullptr, &r));
  EXPECT_NE(ps.p[0].grad.data, (void *)own);  // a bucket slot now
  ASSERT_TPDP_OK(tpdp_reducer_prepare(r));
  ((float *)ps.p[0].grad.data)[0] = 2.f * (tpdp_test::WorldRank() + 1);
  for (int64_t i = 2; i >= 0; i--)
    ASSERT_TPDP_OK(tpdp_reducer_mark_ready(r, i));
  ASSERT_TPDP_OK(tpdp_reducer_finalize(r));
  EXPECT_TPDP_OK(tpdp_reducer_destroy(r));
  EXPECT_EQ(ps.p[0].grad.data, (void *)own);
  EXPECT_EQ(own[0], 3.f);  // (2 + 4) / 2
}

}  // namespace
