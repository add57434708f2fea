// SPDX-License-Identifier: BSD-3-Clause
// Sharding plans (tools/planning/plan.h): PyTorch FSDP's tree report and unit
// map, placements and local shapes from the style rules, bytes per tp rank
// (shared parameters once), the reducer's reversed bucket list, and errors
// naming the thing at fault. Expected values are worked by hand from the
// fixtures.
#include "tools/planning/plan.h"

#include <string>
#include <vector>

#include "tests/tools/planning/planning_test_util.h"
#include "tools/planning/model_json.h"
#include "tpdp/tp.h"

namespace {

using tpdp_test::Desc;
struct Plan {
  planning_plan *p = nullptr;
  ~Plan() { planning_plan_destroy(p); }
};

const planning_plan_param *Find(const planning_plan *p,
                                const std::string &fqn) {
  for (int k = 0; k < p->nparams; k++)
    if (fqn == p->params[k].param->fqn) return &p->params[k];
  return nullptr;
}

std::vector<int64_t> Local(const planning_plan_param *pp, int t) {
  const int64_t *s = &pp->local_shapes[t * pp->param->ndim];
  return std::vector<int64_t>(s, s + pp->param->ndim);
}

std::vector<std::string> Bucket(const planning_plan *p, int t, int b) {
  std::vector<std::string> v;
  const tpdp_bucket_assignment *a = &p->buckets[t];
  for (int64_t k = a->offsets[b]; k < a->offsets[b + 1]; k++)
    v.push_back(p->params[a->indices[k]].param->fqn);
  return v;
}

TEST(Plan, Seed000TreeAndMap) {
  Desc m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  Plan p;
  ASSERT_PLANNING_OK(planning_plan_compute(
      m.d, R"({"mesh": {"dp": 2}, "units": ["", "u1", "u2"]})", nullptr, 0,
      &p.p));
  // PyTorch FSDP's tree report's docstring, written out independently.
  const char *want =
      "[CompositeModel] FULLY SHARDED\n"
      "    l1[Linear]\n"
      "    u1[UnitModule] FULLY SHARDED\n"
      "        u1.l1[Linear]\n"
      "        u1.seq[Sequential]\n"
      "            u1.seq.0[ReLU]\n"
      "            u1.seq.1[Linear]\n"
      "            u1.seq.2[ReLU]\n"
      "        u1.l2[Linear]\n"
      "    u2[UnitModule] FULLY SHARDED\n"
      "        u2.l1[Linear]\n"
      "        u2.seq[Sequential]\n"
      "            u2.seq.0[ReLU]\n"
      "            u2.seq.1[Linear]\n"
      "            u2.seq.2[ReLU]\n"
      "        u2.l2[Linear]\n"
      "    l2[Linear]\n";
  EXPECT_EQ(std::string(tpdp_tree_report_text(p.p->report)), want);
  EXPECT_EQ(
      std::string(tpdp_tree_report_json(p.p->report)),
      R"({"[CompositeModel]":["l1.weight","l1.bias","l2.weight","l2.bias"],)"
      R"("u1[UnitModule]":["u1.l1.weight","u1.l1.bias","u1.seq.1.weight","u1.seq.1.bias","u1.l2.weight","u1.l2.bias"],)"
      R"("u2[UnitModule]":["u2.l1.weight","u2.l1.bias","u2.seq.1.weight","u2.seq.1.bias","u2.l2.weight","u2.l2.bias"]})");
  EXPECT_EQ(p.p->tp_dim, -1);
  EXPECT_EQ(p.p->tp_size, 1);
  EXPECT_EQ(p.p->world, 2);
  ASSERT_EQ(p.p->nparams, 16);
  EXPECT_EQ(p.p->tp_bytes[0], 2304u);  // 576 f32 elements
  ASSERT_EQ(p.p->buckets[0].nbuckets, 1);
  EXPECT_EQ(p.p->buckets[0].bytes[0], 2304u);
}

TEST(Plan, TensorParallelShapesBytesBuckets) {
  Desc m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  Plan p;
  size_t limits[2] = {256, 512};
  ASSERT_PLANNING_OK(
      planning_plan_compute(m.d,
                            R"({"mesh": {"dp": 2, "tp": 2}, "units": ["", "u1"],
          "tp": {"u1.l1": "colwise", "u1.l2": "rowwise"}})",
                            limits, 2, &p.p));
  EXPECT_EQ(p.p->tp_dim, 1);
  EXPECT_EQ(p.p->tp_size, 2);
  EXPECT_EQ(planning_plan_tp_rank(p.p, 0), 0);
  EXPECT_EQ(planning_plan_tp_rank(p.p, 1), 1);
  EXPECT_EQ(planning_plan_tp_rank(p.p, 2), 0);
  EXPECT_EQ(planning_plan_tp_rank(p.p, 3), 1);
  const planning_plan_param *w1 = Find(p.p, "u1.l1.weight");
  const planning_plan_param *b1 = Find(p.p, "u1.l1.bias");
  const planning_plan_param *w2 = Find(p.p, "u1.l2.weight");
  const planning_plan_param *b2 = Find(p.p, "u1.l2.bias");
  const planning_plan_param *l1 = Find(p.p, "l1.weight");
  ASSERT_TRUE(w1 && b1 && w2 && b2 && l1);
  for (int t = 0; t < 2; t++) {
    EXPECT_EQ(Local(w1, t), (std::vector<int64_t>{4, 8}));
    EXPECT_EQ(Local(b1, t), (std::vector<int64_t>{4}));
    EXPECT_EQ(Local(w2, t), (std::vector<int64_t>{8, 4}));
    EXPECT_EQ(Local(b2, t), (std::vector<int64_t>{8}));
    EXPECT_EQ(Local(l1, t), (std::vector<int64_t>{8, 8}));
    EXPECT_EQ(w1->local_bytes[t], 128u);
    // 2304 - 4 * (32 + 4 + 32)
    EXPECT_EQ(p.p->tp_bytes[t], 2032u);
  }
  EXPECT_EQ(w1->placements[0].kind, TPDP_PLACEMENT_REPLICATE);
  EXPECT_EQ(w1->placements[1].kind, TPDP_PLACEMENT_SHARD);
  EXPECT_EQ(w1->placements[1].dim, 0);
  EXPECT_EQ(w2->placements[1].kind, TPDP_PLACEMENT_SHARD);
  EXPECT_EQ(w2->placements[1].dim, 1);
  EXPECT_EQ(b2->placements[1].kind, TPDP_PLACEMENT_REPLICATE);
  EXPECT_EQ(l1->style, -1);
  EXPECT_EQ(w1->style, TPDP_STYLE_COLWISE);
  // Units: u1.l1 / u1.l2 are TP units, u2 is none.
  const planning_model_module *u1l1 =
      planning_model_desc_find_module(m.d, "u1.l1");
  const planning_model_module *u2 = planning_model_desc_find_module(m.d, "u2");
  EXPECT_EQ(p.p->module_unit[u1l1->index], PLANNING_PLAN_TP_UNIT);
  EXPECT_EQ(p.p->module_unit[u2->index], PLANNING_PLAN_NOT_UNIT);
  // Buckets (worked in plan_cli_test.sh), launch order.
  ASSERT_EQ(p.p->buckets[0].nbuckets, 5);
  EXPECT_EQ(Bucket(p.p, 0, 0), (std::vector<std::string>{"l2.bias"}));
  EXPECT_EQ(Bucket(p.p, 0, 4), (std::vector<std::string>{"l1.weight"}));
  EXPECT_EQ(Bucket(p.p, 0, 3),
            (std::vector<std::string>{"l1.bias", "u1.l1.weight", "u1.l1.bias",
                                      "u1.seq.1.weight", "u1.seq.1.bias",
                                      "u1.l2.weight"}));
  std::vector<size_t> bytes(p.p->buckets[0].bytes, p.p->buckets[0].bytes + 5);
  EXPECT_EQ(bytes, (std::vector<size_t>{32, 576, 576, 592, 256}));
  std::vector<size_t> lims(p.p->buckets[0].limits, p.p->buckets[0].limits + 5);
  EXPECT_EQ(lims, (std::vector<size_t>{512, 512, 512, 512, 256}));
}

TEST(Plan, SharedParameterCountedOnce) {
  Desc m;
  ASSERT_MODEL_LOADED("tied_model.json", &m.d);
  Plan p;
  ASSERT_PLANNING_OK(planning_plan_compute(
      m.d,
      R"({"mesh": {"tp": 2}, "tp": {"blocks.*.fc": "colwise", "head": "rowwise"}})",
      nullptr, 0, &p.p));
  // scale, emb.weight (= head.weight), 2 x (fc weight, bias), head.bias
  ASSERT_EQ(p.p->nparams, 7);
  const planning_plan_param *emb = Find(p.p, "emb.weight");
  ASSERT_NE(emb, nullptr);
  ASSERT_EQ(emb->nshared, 1);
  EXPECT_STREQ(emb->shared[0]->fqn, "head.weight");
  EXPECT_EQ(emb->style, TPDP_STYLE_ROWWISE);  // through head
  EXPECT_EQ(Local(emb, 1), (std::vector<int64_t>{10, 2}));
  // f32: scale 4 + emb 80 + fc0 (8 + 2) * 4 + head.bias 40; bf16 fc1
  // (8 + 2) * 2.
  EXPECT_EQ(p.p->tp_bytes[0], 4u + 80u + 40u + 40u + 20u);
  // Two dtypes -> two buckets; sorted by smallest index (f32 first), then
  // reversed: the bf16 bucket launches first.
  ASSERT_EQ(p.p->buckets[0].nbuckets, 2);
  EXPECT_EQ(Bucket(p.p, 0, 0), (std::vector<std::string>{"blocks.1.fc.weight",
                                                         "blocks.1.fc.bias"}));
}

TEST(Plan, Errors) {
  Desc m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  planning_plan *p = nullptr;
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(
          m.d, R"({"mesh": {"tp": 2}, "tp": {"*.nope": "colwise"}})", nullptr,
          0, &p),
      TPDP_ERR_NOT_FOUND, "\"*.nope\"", "matches no module");
  EXPECT_EQ(p, nullptr);
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(
          m.d, R"({"mesh": {"dp": 2}, "units": ["zz", "u1"]})", nullptr, 0, &p),
      TPDP_ERR_NOT_FOUND, "\"zz\"");
  EXPECT_PLANNING_ERROR(planning_plan_compute(m.d, "[1, 2]", nullptr, 0, &p),
                        TPDP_ERR_PARSE, "JSON object");
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(m.d, R"({"mesh": {"dp": 1.5}})", nullptr, 0, &p),
      TPDP_ERR_BAD_DIM_SIZE, "mesh.dp");
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(m.d, R"({"mesh": {}})", nullptr, 0, &p),
      TPDP_ERR_PARSE, "at least one dim");
  // Meshes above PLANNING_PLAN_MAX_RANKS (2^20), with the numbers as written.
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(m.d, R"({"mesh": {"tp": 100000000}})", nullptr, 0,
                            &p),
      TPDP_ERR_BAD_DIM_SIZE,
      "planning_plan_compute: mesh.tp is too large (max 1048576)");
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(m.d, R"({"mesh": {"dp": 4611686018427387904}})",
                            nullptr, 0, &p),
      TPDP_ERR_BAD_DIM_SIZE, "mesh.dp is too large (max 1048576)");
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(m.d, R"({"mesh": {"dp": 1024, "tp": 2048}})",
                            nullptr, 0, &p),
      TPDP_ERR_BAD_DIM_SIZE,
      "mesh: 2097152 ranks up to dim \"tp\" is too large (max 1048576)");
  EXPECT_EQ(p, nullptr);
  size_t zero = 0;
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(m.d, R"({"mesh": {"dp": 2}})", &zero, 1, &p),
      TPDP_ERR_INVALID_ARGUMENT, "limit 0");

  // Two parameters of 2^63 - 2^33 bytes each (f64 [2^30, 2^30 - 1]): each
  // fits in int64, their sum, tp rank 0's bytes, does not.
  Desc huge;
  ASSERT_PLANNING_OK(planning_model_desc_parse(
      R"({"class": "M", "params": {
          "a": {"shape": [1073741824, 1073741823], "dtype": "f64"},
          "b": {"shape": [1073741824, 1073741823], "dtype": "f64"}}})",
      &huge.d));
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(huge.d, R"({"mesh": {"dp": 2}})", nullptr, 0, &p),
      TPDP_ERR_INVALID_ARGUMENT,
      "the local parameters of tp rank 0 overflow: their byte size is above "
      "INT64_MAX at 'b'");
  EXPECT_EQ(p, nullptr);

  // A colwise style on a module whose weight is not 2-D.
  Desc ln;
  ASSERT_PLANNING_OK(planning_model_desc_parse(
      R"({"class": "M", "children": {"norm": {"class": "LayerNorm",
          "params": {"weight": {"shape": [8]}, "bias": {"shape": [8]}}}}})",
      &ln.d));
  EXPECT_PLANNING_ERROR(
      planning_plan_compute(ln.d,
                            R"({"mesh": {"tp": 2}, "tp": {"norm": "colwise"}})",
                            nullptr, 0, &p),
      TPDP_ERR_SHAPE_MISMATCH, "norm.weight", "2-D");
  // The library's rule refused it: its message, which names the libtpdp
  // function, after the planning function called.
  EXPECT_EQ(std::string(planning_last_error())
                .rfind("planning_plan_compute: tpdp_tp_style_placement: ", 0),
            0u)
      << planning_last_error();
  // ... but fine as sequence_parallel (Replicate).
  Plan ok;
  ASSERT_PLANNING_OK(planning_plan_compute(
      ln.d, R"({"mesh": {"tp": 2}, "tp": {"norm": "sequence_parallel"}})",
      nullptr, 0, &ok.p));
  EXPECT_EQ(ok.p->params[0].placements[0].kind, TPDP_PLACEMENT_REPLICATE);
}

}  // namespace
