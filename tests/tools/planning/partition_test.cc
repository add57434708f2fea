// SPDX-License-Identifier: BSD-3-Clause
// The stage partitioners (tools/planning/partition.h). Optimal: against an
// independent brute force over every placement of the cut points, on random
// small cases, plus hand-worked cases on PyTorch FSDP's tree report's toy model and the error
// messages. Greedy: PyTorch's fx shard_model's _split_nodes worked by hand on the fixtures,
// one test per way it differs from the optimal method.
#include "tools/planning/partition.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/tools/planning/planning_test_util.h"
#include "tools/planning/model_json.h"

namespace {

using tpdp_test::DataPath;
using tpdp_test::LeafParams;

struct Edge {
  int src, dst;
};

// Brute force, straight from the definition: try every set of k-1 cut
// points among 1..n-1, give each leaf its stage number, keep the partitions
// where stage(dst) - stage(src) <= 1 for every edge, and among the best
// (smallest largest stage sum) the lexicographically largest bounds.
struct Brute {
  bool feasible = false;
  int64_t best = 0;
  std::vector<int> bounds;
};

Brute BruteForce(const std::vector<int64_t> &w, int k,
                 const std::vector<Edge> &edges) {
  const int n = (int)w.size();
  Brute r;
  if (k < 1 || k > n) return r;
  for (uint32_t mask = 0; mask < (1u << (n - 1)); mask++) {
    if (__builtin_popcount(mask) != k - 1) continue;
    // bit p-1 set: a cut between leaf p-1 and leaf p.
    std::vector<int> stage(n);
    std::vector<int> bounds = {0};
    int s = 0;
    for (int i = 0; i < n; i++) {
      if (i > 0 && (mask >> (i - 1) & 1u)) {
        s++;
        bounds.push_back(i);
      }
      stage[i] = s;
    }
    bounds.push_back(n);
    bool ok = true;
    for (const Edge &e : edges)
      if (stage[e.dst] - stage[e.src] > 1) ok = false;
    if (!ok) continue;
    std::vector<int64_t> sums(k, 0);
    for (int i = 0; i < n; i++) sums[stage[i]] += w[i];
    int64_t mx = *std::max_element(sums.begin(), sums.end());
    if (!r.feasible || mx < r.best || (mx == r.best && bounds > r.bounds)) {
      r.feasible = true;
      r.best = mx;
      r.bounds = bounds;
    }
  }
  return r;
}

std::vector<planning_partition_edge> ToC(const std::vector<Edge> &edges) {
  std::vector<planning_partition_edge> v;
  for (const Edge &e : edges) v.push_back({e.src, e.dst, nullptr, nullptr});
  return v;
}

TEST(Partition, MatchesBruteForceOnRandomCases) {
  std::mt19937 rng(20240606);
  int solved = 0, impossible = 0;
  for (int c = 0; c < 3000; c++) {
    const int n = 1 + (int)(rng() % 9);
    std::vector<int64_t> w(n);
    // Small ranges make many ties (exercising the tie-break); sometimes
    // large values; sometimes zeros (parameterless leaves).
    const int64_t range = (c % 3 == 0) ? 4 : (c % 3 == 1) ? 100 : 1000000;
    for (auto &x : w) x = (int64_t)(rng() % (uint32_t)range);
    std::vector<Edge> edges;
    if (n >= 2) {
      int ne = (int)(rng() % 5);
      for (int e = 0; e < ne; e++) {
        int a = (int)(rng() % (uint32_t)n), b = (int)(rng() % (uint32_t)n);
        if (a == b) continue;
        edges.push_back({std::min(a, b), std::max(a, b)});
      }
    }
    const int k = 1 + (int)(rng() % 4);
    auto ce = ToC(edges);
    std::vector<int> bounds(k + 1, -7);
    int64_t mx = -7;
    SCOPED_TRACE("case " + std::to_string(c) + " n=" + std::to_string(n) +
                 " k=" + std::to_string(k) +
                 " edges=" + std::to_string(edges.size()));
    Brute b = BruteForce(w, k, edges);
    tpdp_status st = planning_partition_solve(
        w.data(), n, k, ce.data(), (int)ce.size(), bounds.data(), &mx);
    if (k > n) {
      EXPECT_EQ(st, TPDP_ERR_INVALID_ARGUMENT) << planning_last_error();
      continue;
    }
    if (!b.feasible) {
      impossible++;
      EXPECT_EQ(st, TPDP_ERR_UNSUPPORTED) << planning_last_error();
      // The blamed edge: the first, in list order, after which the brute
      // force finds no partition.
      size_t blame = 0;
      for (size_t l = 1; l <= edges.size(); l++) {
        std::vector<Edge> pre(edges.begin(), edges.begin() + (long)l);
        if (!BruteForce(w, k, pre).feasible) {
          blame = l - 1;
          break;
        }
      }
      std::string needle = "edges[" + std::to_string(blame) + "] leaf " +
                           std::to_string(edges[blame].src) + " -> leaf " +
                           std::to_string(edges[blame].dst);
      EXPECT_NE(std::string(planning_last_error()).find(needle),
                std::string::npos)
          << planning_last_error() << " lacks " << needle;
      EXPECT_EQ(bounds, std::vector<int>(k + 1, -7));  // untouched
      EXPECT_EQ(mx, -7);
    } else {
      solved++;
      ASSERT_EQ(st, TPDP_SUCCESS) << planning_last_error();
      EXPECT_EQ(mx, b.best);
      EXPECT_EQ(bounds, b.bounds);
    }
    // Max stage count vs the brute force over every k.
    int maxk = 0;
    for (int kk = 1; kk <= n; kk++)
      if (BruteForce(w, kk, edges).feasible) maxk = kk;
    int got = -1;
    ASSERT_PLANNING_OK(
        planning_partition_max_stages(n, ce.data(), (int)ce.size(), &got));
    EXPECT_EQ(got, maxk);
  }
  // The random mix really covers both outcomes.
  EXPECT_GT(solved, 1000);
  EXPECT_GT(impossible, 50);
}

TEST(Partition, HandWorked) {
  // Leaves 3 1 4 1 5 into 2 stages: a cut after 1, 2, 3, 4 leaves gives
  // largest sums 11, 10, 8, 9 -> [3 1 4 | 1 5], 8.
  std::vector<int64_t> w = {3, 1, 4, 1, 5};
  std::vector<int> b(3);
  int64_t mx = 0;
  ASSERT_PLANNING_OK(
      planning_partition_solve(w.data(), 5, 2, nullptr, 0, b.data(), &mx));
  EXPECT_EQ(mx, 8);
  EXPECT_EQ(b, (std::vector<int>{0, 3, 5}));
  // 3 stages, cut pairs (a, b): (1,2) 10, (1,3) 6, (1,4) 6, (2,3) 6,
  // (2,4) 5, (3,4) 8 -> [3 1 | 4 1 | 5], 5.
  std::vector<int> b3(4);
  ASSERT_PLANNING_OK(
      planning_partition_solve(w.data(), 5, 3, nullptr, 0, b3.data(), &mx));
  EXPECT_EQ(mx, 5);
  EXPECT_EQ(b3, (std::vector<int>{0, 2, 4, 5}));
  // Edge leaf 1 -> leaf 4 allows one cut among boundaries 2..4, so a = 1:
  // (1,2) 10, (1,3) 6, (1,4) 6. Tie: the first stages as long as possible
  // -> [3 | 1 4 1 | 5].
  planning_partition_edge e = {1, 4, "x", "y"};
  ASSERT_PLANNING_OK(
      planning_partition_solve(w.data(), 5, 3, &e, 1, b3.data(), &mx));
  EXPECT_EQ(mx, 6);
  EXPECT_EQ(b3, (std::vector<int>{0, 1, 4, 5}));
}

TEST(Partition, ArgumentErrors) {
  std::vector<int64_t> w = {1, 2, 3};
  std::vector<int> b(5);
  int64_t mx = 0;
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 3, 0, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "number of stages is 0");
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 3, 4, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "cannot split 3 leaf modules into 4");
  std::vector<int64_t> neg = {1, -2, 3};
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(neg.data(), 3, 2, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "weights[1] is -2");
  std::vector<int64_t> big = {INT64_MAX, 1};
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(big.data(), 2, 2, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "overflows");
  planning_partition_edge back = {2, 1, "c", "b"};
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 3, 2, &back, 1, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0] [\"c\", \"b\"]", "src < dst");
  planning_partition_edge out = {0, 3, nullptr, nullptr};
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 3, 2, &out, 1, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0] leaf 0 -> leaf 3");
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(nullptr, 3, 2, nullptr, 0, b.data(), &mx),
      TPDP_ERR_NULL_POINTER, "weights");
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 0, 1, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "no leaf modules");
  int m = 0;
  EXPECT_PLANNING_ERROR(planning_partition_max_stages(3, nullptr, 2, &m),
                        TPDP_ERR_NULL_POINTER, "edges");
}

// A model and its edges (freed first).
struct Loaded : tpdp_test::Desc {
  planning_partition_edge *e = nullptr;
  int ne = 0;
  ~Loaded() { planning_partition_edges_free(e, ne); }
};

// PyTorch FSDP's tree report's leaves carry 72 0 72 params in the pattern
// l1 72, u1.l1 72, u1.seq.0 0, u1.seq.1 72, u1.seq.2 0, u1.l2 72,
// u2.l1 72, u2.seq.0 0, u2.seq.1 72, u2.seq.2 0, u2.l2 72, l2 72.
TEST(Partition, Seed000HandWorked) {
  Loaded m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  auto w = LeafParams(m.d);
  std::vector<int> b(5);
  int64_t mx = 0;
  // 8 Linears of 72 into 4 stages: 144 each; stages as long as possible
  // from the front: [l1 u1.l1 u1.seq.0] [u1.seq.1 u1.seq.2 u1.l2]
  // [u2.l1 u2.seq.0 u2.seq.1 u2.seq.2] [u2.l2 l2].
  ASSERT_PLANNING_OK(
      planning_partition_solve(w.data(), 12, 4, nullptr, 0, b.data(), &mx));
  EXPECT_EQ(mx, 144);
  EXPECT_EQ(b, (std::vector<int>{0, 3, 6, 10, 12}));

  // Skip u1 -> l2: from u1's last leaf (u1.l2, 5) to l2 (11); at most one
  // cut among boundaries 6..11, so two cuts fall in 1..5 and the last two
  // stages hold leaves 5.. (5 Linears, 360): best 216.
  ASSERT_PLANNING_OK(planning_partition_edges_parse(m.d, R"([["u1", "l2"]])",
                                                    nullptr, &m.e, &m.ne));
  ASSERT_EQ(m.ne, 1);
  EXPECT_EQ(m.e[0].src, 5);
  EXPECT_EQ(m.e[0].dst, 11);
  EXPECT_STREQ(m.e[0].src_name, "u1");
  ASSERT_PLANNING_OK(
      planning_partition_solve(w.data(), 12, 4, m.e, m.ne, b.data(), &mx));
  EXPECT_EQ(mx, 216);
  EXPECT_EQ(b, (std::vector<int>{0, 4, 5, 10, 12}));
  int maxk = 0;
  ASSERT_PLANNING_OK(planning_partition_max_stages(12, m.e, m.ne, &maxk));
  EXPECT_EQ(maxk, 7);  // cuts 1..5 plus one in 6..11
  std::vector<int> b8(9);
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 12, 8, m.e, m.ne, b8.data(), &mx),
      TPDP_ERR_UNSUPPORTED, "cannot split 12 leaf modules into 8 stages",
      "edges[0] [\"u1\", \"l2\"]", "at most 7 stages");
}

TEST(Partition, CombinationOfEdgesNamesTheLastNeeded) {
  Loaded m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  ASSERT_PLANNING_OK(planning_partition_edges_load(
      m.d, DataPath("composite_edges_two.json").c_str(), &m.e, &m.ne));
  ASSERT_EQ(m.ne, 2);
  EXPECT_EQ(m.e[0].src, 0);  // l1
  EXPECT_EQ(m.e[0].dst, 5);  // u1.l2
  auto w = LeafParams(m.d);
  std::vector<int> b(5);
  int64_t mx = 0;
  // Edge 0 alone: one cut in 1..5 -> 7 stages; edge 1 alone: 6; both: one
  // cut in 1..5 and one in 6..11 -> 3 stages.
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 12, 4, m.e, m.ne, b.data(), &mx),
      TPDP_ERR_UNSUPPORTED, "edges[1] [\"u1\", \"l2\"]", "given edges[0];",
      "at most 3 stages");
  ASSERT_PLANNING_OK(
      planning_partition_solve(w.data(), 12, 3, m.e, m.ne, b.data(), &mx));
}

TEST(Partition, EdgesParseErrors) {
  Loaded m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  planning_partition_edge *e = nullptr;
  int n = -1;
  // A non-leaf destination means its first leaf.
  ASSERT_PLANNING_OK(planning_partition_edges_parse(m.d, R"([["l1", "u2"]])",
                                                    nullptr, &e, &n));
  EXPECT_EQ(e[0].src, 0);
  EXPECT_EQ(e[0].dst, 6);
  planning_partition_edges_free(e, n);
  EXPECT_PLANNING_ERROR(planning_partition_edges_parse(
                            m.d, R"([["l1", "u1.l9"]])", "E.json", &e, &n),
                        TPDP_ERR_NOT_FOUND,
                        "E.json: edges[0][1]: no module named \"u1.l9\"");
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(n, 0);
  EXPECT_PLANNING_ERROR(
      planning_partition_edges_parse(
          m.d, R"([["l1", "l2"], ["l1.weight", "l2"]])", nullptr, &e, &n),
      TPDP_ERR_NOT_FOUND, "edges[1][0]", "\"l1.weight\"", "is a parameter");
  EXPECT_PLANNING_ERROR(
      planning_partition_edges_parse(m.d, R"([["l2", "l1"]])", nullptr, &e, &n),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0] [\"l2\", \"l1\"]",
      "must go forward");
  EXPECT_PLANNING_ERROR(  // u1's last leaf is u1.l2, after u1.l1
      planning_partition_edges_parse(m.d, R"([["u1", "u1.l2"]])", nullptr, &e,
                                     &n),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0]", "must go forward");
  EXPECT_PLANNING_ERROR(
      planning_partition_edges_parse(m.d, R"([["l1"]])", nullptr, &e, &n),
      TPDP_ERR_PARSE, "edges[0] must be an array of two module FQNs");
  EXPECT_PLANNING_ERROR(
      planning_partition_edges_parse(m.d, R"({"l1": "l2"})", nullptr, &e, &n),
      TPDP_ERR_PARSE, "must be a JSON array");
  EXPECT_PLANNING_ERROR(
      planning_partition_edges_parse(m.d, "[[", nullptr, &e, &n),
      TPDP_ERR_PARSE, "not valid JSON");
  EXPECT_PLANNING_ERROR(
      planning_partition_edges_load(m.d, "/nonexistent/E.json", &e, &n),
      TPDP_ERR_IO, "/nonexistent/E.json");
}

// ------------------------------------------------------ greedy (PyTorch's fx shard_model)

struct Greedy {
  planning_partition_greedy_result r = {};
  ~Greedy() { planning_partition_greedy_free(&r); }
  // Stage s's calls as "fqn" (node names are checked separately).
  std::vector<std::vector<std::string>> Stages(
      const planning_model_desc *d) const {
    std::vector<std::vector<std::string>> v;
    for (int s = 0; s < r.nstages; s++) {
      v.emplace_back();
      for (int c = r.bounds[s]; c < r.bounds[s + 1]; c++)
        v.back().push_back(d->calls[c]->fqn);
    }
    return v;
  }
  std::vector<int64_t> Params() const {
    return std::vector<int64_t>(r.stage_params, r.stage_params + r.nstages);
  }
};

using Names = std::vector<std::vector<std::string>>;

// Optimal bounds over the leaves, for the side-by-side tests.
std::vector<int> Optimal(const Loaded &m, int k, int64_t *mx) {
  auto w = LeafParams(m.d);
  std::vector<int> b(k + 1);
  EXPECT_EQ(planning_partition_solve(w.data(), m.d->nleaves, k, m.e, m.ne,
                                     b.data(), mx),
            TPDP_SUCCESS)
      << planning_last_error();
  return b;
}

// Difference 1, stage count and cut rule: 003 cuts right after the call that
// takes the running count above total // K. PyTorch FSDP's tree report, K = 4: total 576,
// threshold 576 // 4 = 144. Running counts: l1 72, u1.l1 144 (not > 144),
// u1.seq.0 144, u1.seq.1 216 > 144: cut. Then u1.seq.2 0, u1.l2 72, u2.l1
// 144, u2.seq.0 144, u2.seq.1 216: cut. Then u2.seq.2 0, u2.l2 72, l2 144:
// the model ends. 3 stages (216, 216, 144) for K = 4; optimal gives 4 x 144.
TEST(PartitionGreedy, CutAfterThresholdGivesFewerStages) {
  Loaded m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 4, nullptr, 0, &g.r));
  EXPECT_EQ(g.r.threshold, 144);
  EXPECT_EQ(g.Stages(m.d),
            (Names{{"l1", "u1.l1", "u1.seq.0", "u1.seq.1"},
                   {"u1.seq.2", "u1.l2", "u2.l1", "u2.seq.0", "u2.seq.1"},
                   {"u2.seq.2", "u2.l2", "l2"}}));
  EXPECT_EQ(g.Params(), (std::vector<int64_t>{216, 216, 144}));
  // Node names: FQN with '.' -> '_', as fx names call_module nodes.
  EXPECT_STREQ(g.r.node_names[2], "u1_seq_0");
  EXPECT_EQ(g.r.call_params[2], 0);
  int64_t mx = 0;
  EXPECT_EQ(Optimal(m, 4, &mx), (std::vector<int>{0, 3, 6, 10, 12}));
  EXPECT_EQ(mx, 144);

  // K = 2: threshold 288. l1 72, u1.l1 144, u1.seq.0 144, u1.seq.1 216,
  // u1.seq.2 216, u1.l2 288 (not > 288), u2.l1 360 > 288: cut after u2.l1;
  // the rest 216. Optimal: 288 | 288, cut after u1.l2.
  Greedy g2;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 2, nullptr, 0, &g2.r));
  EXPECT_EQ(g2.Params(), (std::vector<int64_t>{360, 216}));
  EXPECT_EQ(g2.r.bounds[1], 7);
  EXPECT_EQ(Optimal(m, 2, &mx), (std::vector<int>{0, 6, 12}));
  EXPECT_EQ(mx, 288);
}

// Difference 2: a stage count above the leaf count is fine for 003 (the
// optimal method refuses it). K = 13: threshold 576 // 13 = 44, so every
// Linear (72) ends its stage: [l1] [u1.l1] [u1.seq.0 u1.seq.1]
// [u1.seq.2 u1.l2] [u2.l1] [u2.seq.0 u2.seq.1] [u2.seq.2 u2.l2] [l2].
TEST(PartitionGreedy, AnyStageCountAccepted) {
  Loaded m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 13, nullptr, 0, &g.r));
  EXPECT_EQ(g.r.threshold, 44);
  EXPECT_EQ(g.Stages(m.d), (Names{{"l1"},
                                  {"u1.l1"},
                                  {"u1.seq.0", "u1.seq.1"},
                                  {"u1.seq.2", "u1.l2"},
                                  {"u2.l1"},
                                  {"u2.seq.0", "u2.seq.1"},
                                  {"u2.seq.2", "u2.l2"},
                                  {"l2"}}));
  auto w = LeafParams(m.d);
  std::vector<int> b(14);
  int64_t mx = 0;
  EXPECT_PLANNING_ERROR(
      planning_partition_solve(w.data(), 12, 13, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "cannot split 12 leaf modules into 13");
}

// Difference 3, zero-parameter modules: after a cut the next call opens the
// new stage even with no parameters; the optimal tie-break (earlier stages
// as long as possible) ends a stage with them instead. Tied model, K = 3:
// threshold 91 // 3 = 30. emb 40 > 30: cut. blocks.0.fc 20, blocks.0.act 20,
// blocks.1.fc 40 > 30: cut. blocks.1.act 0 opens stage 2, head 50 > 30.
// Optimal (each parameter once: 41 20 0 20 0 10): [emb] [blocks.0.fc ..
// blocks.1.act] [head], max 41 -- the same first cut, and blocks.1.act on
// the other side of the second.
TEST(PartitionGreedy, ZeroParameterCallOpensTheNextStage) {
  Loaded m;
  ASSERT_MODEL_LOADED("tied_model.json", &m.d);
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 3, nullptr, 0, &g.r));
  EXPECT_EQ(g.r.threshold, 30);
  EXPECT_EQ(g.Stages(m.d),
            (Names{{"emb"},
                   {"blocks.0.fc", "blocks.0.act", "blocks.1.fc"},
                   {"blocks.1.act", "head"}}));
  int64_t mx = 0;
  EXPECT_EQ(Optimal(m, 3, &mx), (std::vector<int>{0, 1, 5, 6}));
  EXPECT_EQ(mx, 41);
}

// Difference 4, what a call counts: 003's _get_count takes the module's
// parameters() -- a tied parameter counts in every module holding it, and a
// parameter declared on a module with children (the root's "scale") is in
// no call's count, only in the total. Tied model: emb 40 (not 41: no
// scale), blocks.0.fc 16 + 4 = 20, head 40 (tied emb.weight) + 10 = 50;
// stages 40, 40, 50. The optimal counts give 41, 20, 0, 20, 0, 10.
TEST(PartitionGreedy, CountsModuleParametersTiedIncluded) {
  Loaded m;
  ASSERT_MODEL_LOADED("tied_model.json", &m.d);
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 3, nullptr, 0, &g.r));
  EXPECT_EQ(std::vector<int64_t>(g.r.call_params, g.r.call_params + 6),
            (std::vector<int64_t>{40, 20, 0, 20, 0, 50}));
  EXPECT_EQ(g.Params(), (std::vector<int64_t>{40, 40, 50}));
  EXPECT_EQ(LeafParams(m.d), (std::vector<int64_t>{41, 20, 0, 20, 0, 10}));
}

// Difference 5, repeated calls: 003 splits the calls, and a repeated call
// "cell_1" counts toward "cell" again; the optimal method splits the leaf
// modules, each once. repeated_call_model.json: embed 32 + 8 = 40, cell 64 +
// 8 = 72, act 0, head 16 + 2 = 18; total 130; calls embed cell act cell act
// cell act head. K = 2: threshold 65. embed 40, cell 112 > 65: cut. act 0,
// cell_1 72 > 65: cut. act_1 0, cell_2 72: cut. act_2 0, head 18: end. 4
// stages for K = 2 (112 72 72 18; the counts sum to 274 > 130). Optimal over
// the leaves 40 72 0 18: cuts after embed (40 | 90), after cell (112 | 18)
// or after act (112 | 18): [embed] [cell act head], 90.
TEST(PartitionGreedy, RepeatedCallsCountTheirModuleAgain) {
  Loaded m;
  ASSERT_MODEL_LOADED("repeated_call_model.json", &m.d);
  ASSERT_EQ(m.d->ncalls, 8);
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 2, nullptr, 0, &g.r));
  std::vector<std::string> names(g.r.node_names, g.r.node_names + 8);
  EXPECT_EQ(names,
            (std::vector<std::string>{"embed", "cell", "act", "cell_1", "act_1",
                                      "cell_2", "act_2", "head"}));
  EXPECT_EQ(std::vector<int64_t>(g.r.call_params, g.r.call_params + 8),
            (std::vector<int64_t>{40, 72, 0, 72, 0, 72, 0, 18}));
  EXPECT_EQ(g.r.threshold, 65);
  EXPECT_EQ(g.Stages(m.d), (Names{{"embed", "cell"},
                                  {"act", "cell"},
                                  {"act", "cell"},
                                  {"act", "head"}}));
  EXPECT_EQ(g.Params(), (std::vector<int64_t>{112, 72, 72, 18}));
  int64_t mx = 0;
  EXPECT_EQ(Optimal(m, 2, &mx), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(mx, 90);
}

// _get_count's fallback is the text before the FIRST '_': a repeated call
// of "out_proj" is "out_proj_1", whose prefix "out" names no module, so it
// counts nothing (and "blk_1" of module "blk" counts blk's parameters).
TEST(PartitionGreedy, RepeatedCallNameSplitAtFirstUnderscore) {
  Loaded m;
  ASSERT_PLANNING_OK(planning_model_desc_parse(
      R"({"class": "M", "children": {
          "blk": {"class": "L", "params": {"w": {"shape": [3]}}},
          "out_proj": {"class": "L", "params": {"w": {"shape": [5]}}}},
          "calls": ["blk", "out_proj", "blk", "out_proj"]})",
      &m.d));
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 1, nullptr, 0, &g.r));
  std::vector<std::string> names(g.r.node_names, g.r.node_names + 4);
  EXPECT_EQ(names, (std::vector<std::string>{"blk", "out_proj", "blk_1",
                                             "out_proj_1"}));
  EXPECT_EQ(std::vector<int64_t>(g.r.call_params, g.r.call_params + 4),
            (std::vector<int64_t>{3, 5, 3, -1}));
  // K = 1: threshold 8; blk 3, out_proj 8, blk_1 11 > 8: cut; out_proj_1
  // counts nothing and opens stage 1 with 0.
  EXPECT_EQ(g.Params(), (std::vector<int64_t>{11, 0}));
}

// Difference 6, skip connections: 003 merges instead of refusing. Edge u1
// -> l2 (from u1.l2, call 5): with K = 4 the calls up to u2.l2 are placed as
// without the edge (stages 0 and 1 as above, u2.seq.2 and u2.l2 in stage
// 2); l2's input u1.l2 is in stage 1 and is not the preceding call, so
// u2.l1 .. u2.l2 (every call after u1.l2) move to stage 1 and l2 joins it:
// 72 x 5 = 360 > 144, cut, the model ends. 2 stages: [l1 .. u1.seq.1] 216,
// [u1.seq.2 .. l2] 360. The optimal method keeps 4 stages (max 216).
TEST(PartitionGreedy, InputFromEarlierStageMerges) {
  Loaded m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  ASSERT_PLANNING_OK(planning_partition_edges_load(
      m.d, DataPath("composite_edges_u1_l2.json").c_str(), &m.e, &m.ne));
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 4, m.e, m.ne, &g.r));
  EXPECT_EQ(g.Stages(m.d), (Names{{"l1", "u1.l1", "u1.seq.0", "u1.seq.1"},
                                  {"u1.seq.2", "u1.l2", "u2.l1", "u2.seq.0",
                                   "u2.seq.1", "u2.seq.2", "u2.l2", "l2"}}));
  EXPECT_EQ(g.Params(), (std::vector<int64_t>{216, 360}));
  int64_t mx = 0;
  EXPECT_EQ(Optimal(m, 4, &mx), (std::vector<int>{0, 4, 5, 10, 12}));
  EXPECT_EQ(mx, 216);

  // Both edges (l1 -> u1.l2 feeds call 5 from call 0; u1 -> l2 feeds call
  // 11 from call 5): l1 .. u1.seq.1 216 > 144, cut; u1.seq.2 opens stage 1;
  // u1.l2's input l1 is in stage 0: u1.seq.2 returns to stage 0 and u1.l2
  // joins it (72 x 4 = 288 > 144, cut). u2.l1 72, u2.seq.0, u2.seq.1 144,
  // u2.seq.2, u2.l2 216 > 144, cut. l2's input u1.l2 is in stage 0: u2.l1 ..
  // u2.l2 return to stage 0 and l2 joins it. One stage of 576.
  Loaded both;
  ASSERT_MODEL_LOADED("composite_model.json", &both.d);
  ASSERT_PLANNING_OK(planning_partition_edges_load(
      both.d, DataPath("composite_edges_two.json").c_str(), &both.e, &both.ne));
  Greedy g2;
  ASSERT_PLANNING_OK(
      planning_partition_greedy(both.d, 4, both.e, both.ne, &g2.r));
  EXPECT_EQ(g2.r.nstages, 1);
  EXPECT_EQ(g2.Params(), (std::vector<int64_t>{576}));
}

// An input from the preceding call never merges, even across a cut: edge
// u1.seq.1 -> u1.seq.2 joins stage 0's last call to stage 1's first, and
// the split stays as without edges.
TEST(PartitionGreedy, PrecedingCallInputDoesNotMerge) {
  Loaded m;
  ASSERT_MODEL_LOADED("composite_model.json", &m.d);
  ASSERT_PLANNING_OK(planning_partition_edges_parse(
      m.d, R"([["u1.seq.1", "u1.seq.2"]])", nullptr, &m.e, &m.ne));
  Greedy g;
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 4, m.e, m.ne, &g.r));
  EXPECT_EQ(g.Params(), (std::vector<int64_t>{216, 216, 144}));
  EXPECT_EQ(g.r.bounds[1], 4);
}

TEST(PartitionGreedy, Errors) {
  Loaded m;
  ASSERT_MODEL_LOADED("repeated_call_model.json", &m.d);
  Greedy g;
  EXPECT_PLANNING_ERROR(planning_partition_greedy(m.d, 0, nullptr, 0, &g.r),
                        TPDP_ERR_INVALID_ARGUMENT, "planning_partition_greedy",
                        "number of stages is 0");
  EXPECT_EQ(g.r.nstages, 0);
  EXPECT_PLANNING_ERROR(planning_partition_greedy(nullptr, 2, nullptr, 0, &g.r),
                        TPDP_ERR_NULL_POINTER, "'model'");
  // Edge cell -> head: over calls it feeds head (call 7) from the last
  // call of cell before it, cell_2 (call 5).
  ASSERT_PLANNING_OK(planning_partition_edges_parse(
      m.d, R"([["cell", "head"]])", nullptr, &m.e, &m.ne));
  ASSERT_PLANNING_OK(planning_partition_greedy(m.d, 2, m.e, m.ne, &g.r));
  // As above up to act_2, which opens stage 3 after cell_2's cut; head's
  // input cell_2 is in stage 2 and is not the preceding call, so act_2
  // returns to stage 2 and head joins it: 72 + 0 + 18 = 90 > 65.
  EXPECT_EQ(g.Params(), (std::vector<int64_t>{112, 72, 90}));
  planning_partition_greedy_free(&g.r);

  Loaded never;
  ASSERT_PLANNING_OK(planning_model_desc_parse(
      R"({"class": "M", "children": {"a": {"class": "L"}, "b": {"class": "L"},
          "c": {"class": "L"}}, "calls": ["a", "b"]})",
      &never.d));
  ASSERT_PLANNING_OK(planning_partition_edges_parse(
      never.d, R"([["a", "c"]])", nullptr, &never.e, &never.ne));
  EXPECT_PLANNING_ERROR(
      planning_partition_greedy(never.d, 1, never.e, never.ne, &g.r),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0] [\"a\", \"c\"]",
      "\"c\" is never called");
  Loaded late;
  ASSERT_PLANNING_OK(planning_model_desc_parse(
      R"({"class": "M", "children": {"a": {"class": "L"}, "b": {"class": "L"}},
          "calls": ["b", "a"]})",
      &late.d));
  ASSERT_PLANNING_OK(planning_partition_edges_parse(
      late.d, R"([["a", "b"]])", nullptr, &late.e, &late.ne));
  EXPECT_PLANNING_ERROR(
      planning_partition_greedy(late.d, 1, late.e, late.ne, &g.r),
      TPDP_ERR_INVALID_ARGUMENT, "\"a\" is not called before");
}

}  // namespace
