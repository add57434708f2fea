// The stage partitioner (tools/partition.h) against an independent brute
// force over every placement of the cut points, on random small cases, plus
// hand-worked cases on seed 000's toy model and the error messages.
#include "tools/partition.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tools/model_json.h"

namespace {

using tpdp_test::DataPath;

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

std::vector<tpdp_partition_edge> ToC(const std::vector<Edge> &edges) {
  std::vector<tpdp_partition_edge> v;
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
    tpdp_status st = tpdp_partition_solve(w.data(), n, k, ce.data(),
                                          (int)ce.size(), bounds.data(), &mx);
    if (k > n) {
      EXPECT_EQ(st, TPDP_ERR_INVALID_ARGUMENT) << tpdp_last_error();
      continue;
    }
    if (!b.feasible) {
      impossible++;
      EXPECT_EQ(st, TPDP_ERR_UNSUPPORTED) << tpdp_last_error();
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
      EXPECT_NE(std::string(tpdp_last_error()).find(needle), std::string::npos)
          << tpdp_last_error() << " lacks " << needle;
      EXPECT_EQ(bounds, std::vector<int>(k + 1, -7));  // untouched
      EXPECT_EQ(mx, -7);
    } else {
      solved++;
      ASSERT_EQ(st, TPDP_SUCCESS) << tpdp_last_error();
      EXPECT_EQ(mx, b.best);
      EXPECT_EQ(bounds, b.bounds);
    }
    // Max stage count vs the brute force over every k.
    int maxk = 0;
    for (int kk = 1; kk <= n; kk++)
      if (BruteForce(w, kk, edges).feasible) maxk = kk;
    int got = -1;
    ASSERT_TPDP_OK(
        tpdp_partition_max_stages(n, ce.data(), (int)ce.size(), &got));
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
  ASSERT_TPDP_OK(
      tpdp_partition_solve(w.data(), 5, 2, nullptr, 0, b.data(), &mx));
  EXPECT_EQ(mx, 8);
  EXPECT_EQ(b, (std::vector<int>{0, 3, 5}));
  // 3 stages, cut pairs (a, b): (1,2) 10, (1,3) 6, (1,4) 6, (2,3) 6,
  // (2,4) 5, (3,4) 8 -> [3 1 | 4 1 | 5], 5.
  std::vector<int> b3(4);
  ASSERT_TPDP_OK(
      tpdp_partition_solve(w.data(), 5, 3, nullptr, 0, b3.data(), &mx));
  EXPECT_EQ(mx, 5);
  EXPECT_EQ(b3, (std::vector<int>{0, 2, 4, 5}));
  // Edge leaf 1 -> leaf 4 allows one cut among boundaries 2..4, so a = 1:
  // (1,2) 10, (1,3) 6, (1,4) 6. Tie: the first stages as long as possible
  // -> [3 | 1 4 1 | 5].
  tpdp_partition_edge e = {1, 4, "x", "y"};
  ASSERT_TPDP_OK(tpdp_partition_solve(w.data(), 5, 3, &e, 1, b3.data(), &mx));
  EXPECT_EQ(mx, 6);
  EXPECT_EQ(b3, (std::vector<int>{0, 1, 4, 5}));
}

TEST(Partition, ArgumentErrors) {
  std::vector<int64_t> w = {1, 2, 3};
  std::vector<int> b(5);
  int64_t mx = 0;
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(w.data(), 3, 0, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "number of stages is 0");
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(w.data(), 3, 4, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "cannot split 3 leaf modules into 4");
  std::vector<int64_t> neg = {1, -2, 3};
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(neg.data(), 3, 2, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "weights[1] is -2");
  std::vector<int64_t> big = {INT64_MAX, 1};
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(big.data(), 2, 2, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "overflows");
  tpdp_partition_edge back = {2, 1, "c", "b"};
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(w.data(), 3, 2, &back, 1, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0] [\"c\", \"b\"]", "src < dst");
  tpdp_partition_edge out = {0, 3, nullptr, nullptr};
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(w.data(), 3, 2, &out, 1, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0] leaf 0 -> leaf 3");
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(nullptr, 3, 2, nullptr, 0, b.data(), &mx),
      TPDP_ERR_NULL_POINTER, "weights");
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(w.data(), 0, 1, nullptr, 0, b.data(), &mx),
      TPDP_ERR_INVALID_ARGUMENT, "no leaf modules");
  int m = 0;
  EXPECT_TPDP_ERROR(tpdp_partition_max_stages(3, nullptr, 2, &m),
                    TPDP_ERR_NULL_POINTER, "edges");
}

struct Loaded {
  tpdp_model_desc *d = nullptr;
  tpdp_partition_edge *e = nullptr;
  int ne = 0;
  ~Loaded() {
    tpdp_partition_edges_free(e, ne);
    tpdp_model_desc_destroy(d);
  }
  std::vector<int64_t> Weights() const {
    std::vector<int64_t> w;
    for (int i = 0; i < d->nleaves; i++) w.push_back(d->leaves[i].params);
    return w;
  }
};

// Seed 000's leaves carry 72 0 72 params in the pattern
// l1 72, u1.l1 72, u1.seq.0 0, u1.seq.1 72, u1.seq.2 0, u1.l2 72,
// u2.l1 72, u2.seq.0 0, u2.seq.1 72, u2.seq.2 0, u2.l2 72, l2 72.
TEST(Partition, Seed000HandWorked) {
  Loaded m;
  ASSERT_TPDP_OK(
      tpdp_model_desc_load(DataPath("composite_model.json").c_str(), &m.d));
  auto w = m.Weights();
  std::vector<int> b(5);
  int64_t mx = 0;
  // 8 Linears of 72 into 4 stages: 144 each; stages as long as possible
  // from the front: [l1 u1.l1 u1.seq.0] [u1.seq.1 u1.seq.2 u1.l2]
  // [u2.l1 u2.seq.0 u2.seq.1 u2.seq.2] [u2.l2 l2].
  ASSERT_TPDP_OK(
      tpdp_partition_solve(w.data(), 12, 4, nullptr, 0, b.data(), &mx));
  EXPECT_EQ(mx, 144);
  EXPECT_EQ(b, (std::vector<int>{0, 3, 6, 10, 12}));

  // Skip u1 -> l2: from u1's last leaf (u1.l2, 5) to l2 (11); at most one
  // cut among boundaries 6..11, so two cuts fall in 1..5 and the last two
  // stages hold leaves 5.. (5 Linears, 360): best 216.
  ASSERT_TPDP_OK(tpdp_partition_edges_parse(m.d, R"([["u1", "l2"]])", nullptr,
                                            &m.e, &m.ne));
  ASSERT_EQ(m.ne, 1);
  EXPECT_EQ(m.e[0].src, 5);
  EXPECT_EQ(m.e[0].dst, 11);
  EXPECT_STREQ(m.e[0].src_name, "u1");
  ASSERT_TPDP_OK(
      tpdp_partition_solve(w.data(), 12, 4, m.e, m.ne, b.data(), &mx));
  EXPECT_EQ(mx, 216);
  EXPECT_EQ(b, (std::vector<int>{0, 4, 5, 10, 12}));
  int maxk = 0;
  ASSERT_TPDP_OK(tpdp_partition_max_stages(12, m.e, m.ne, &maxk));
  EXPECT_EQ(maxk, 7);  // cuts 1..5 plus one in 6..11
  std::vector<int> b8(9);
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(w.data(), 12, 8, m.e, m.ne, b8.data(), &mx),
      TPDP_ERR_UNSUPPORTED, "cannot split 12 leaf modules into 8 stages",
      "edges[0] [\"u1\", \"l2\"]", "at most 7 stages");
}

TEST(Partition, CombinationOfEdgesNamesTheLastNeeded) {
  Loaded m;
  ASSERT_TPDP_OK(
      tpdp_model_desc_load(DataPath("composite_model.json").c_str(), &m.d));
  ASSERT_TPDP_OK(tpdp_partition_edges_load(
      m.d, DataPath("composite_edges_two.json").c_str(), &m.e, &m.ne));
  ASSERT_EQ(m.ne, 2);
  EXPECT_EQ(m.e[0].src, 0);  // l1
  EXPECT_EQ(m.e[0].dst, 5);  // u1.l2
  auto w = m.Weights();
  std::vector<int> b(5);
  int64_t mx = 0;
  // Edge 0 alone: one cut in 1..5 -> 7 stages; edge 1 alone: 6; both: one
  // cut in 1..5 and one in 6..11 -> 3 stages.
  EXPECT_TPDP_ERROR(
      tpdp_partition_solve(w.data(), 12, 4, m.e, m.ne, b.data(), &mx),
      TPDP_ERR_UNSUPPORTED, "edges[1] [\"u1\", \"l2\"]", "given edges[0];",
      "at most 3 stages");
  ASSERT_TPDP_OK(
      tpdp_partition_solve(w.data(), 12, 3, m.e, m.ne, b.data(), &mx));
}

TEST(Partition, EdgesParseErrors) {
  Loaded m;
  ASSERT_TPDP_OK(
      tpdp_model_desc_load(DataPath("composite_model.json").c_str(), &m.d));
  tpdp_partition_edge *e = nullptr;
  int n = -1;
  // A non-leaf destination means its first leaf.
  ASSERT_TPDP_OK(
      tpdp_partition_edges_parse(m.d, R"([["l1", "u2"]])", nullptr, &e, &n));
  EXPECT_EQ(e[0].src, 0);
  EXPECT_EQ(e[0].dst, 6);
  tpdp_partition_edges_free(e, n);
  EXPECT_TPDP_ERROR(
      tpdp_partition_edges_parse(m.d, R"([["l1", "u1.l9"]])", "E.json", &e, &n),
      TPDP_ERR_NOT_FOUND, "E.json: edges[0][1]: no module named \"u1.l9\"");
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(n, 0);
  EXPECT_TPDP_ERROR(
      tpdp_partition_edges_parse(m.d, R"([["l1", "l2"], ["l1.weight", "l2"]])",
                                 nullptr, &e, &n),
      TPDP_ERR_NOT_FOUND, "edges[1][0]", "\"l1.weight\"", "is a parameter");
  EXPECT_TPDP_ERROR(
      tpdp_partition_edges_parse(m.d, R"([["l2", "l1"]])", nullptr, &e, &n),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0] [\"l2\", \"l1\"]",
      "must go forward");
  EXPECT_TPDP_ERROR(  // u1's last leaf is u1.l2, after u1.l1
      tpdp_partition_edges_parse(m.d, R"([["u1", "u1.l2"]])", nullptr, &e, &n),
      TPDP_ERR_INVALID_ARGUMENT, "edges[0]", "must go forward");
  EXPECT_TPDP_ERROR(
      tpdp_partition_edges_parse(m.d, R"([["l1"]])", nullptr, &e, &n),
      TPDP_ERR_PARSE, "edges[0] must be an array of two module FQNs");
  EXPECT_TPDP_ERROR(
      tpdp_partition_edges_parse(m.d, R"({"l1": "l2"})", nullptr, &e, &n),
      TPDP_ERR_PARSE, "must be a JSON array");
  EXPECT_TPDP_ERROR(tpdp_partition_edges_parse(m.d, "[[", nullptr, &e, &n),
                    TPDP_ERR_PARSE, "not valid JSON");
  EXPECT_TPDP_ERROR(
      tpdp_partition_edges_load(m.d, "/nonexistent/E.json", &e, &n),
      TPDP_ERR_IO, "/nonexistent/E.json");
}

}  // namespace
