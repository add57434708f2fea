// SPDX-License-Identifier: BSD-3-Clause
// Round trips of sharded checkpoints on 4 MPI ranks: saved on 1, 2, 3 or 4
// ranks (sub-communicators of the world) with one mesh and dtype, loaded on
// 1, 2, 3 or 4 ranks with another mesh, other placements and another
// dtype, uneven shards included; every loaded element is checked against
// the function of its global position that filled the saved tensors.
// Also: one writer per distinct slice, spread over the ranks; load errors
// (missing tensor, shape, dtype, corrupt, truncated and lying files) are
// the same status and message on every rank, naming the tensor and file.
#include <fcntl.h>

#include <map>

#include "tests/ckpt/ckpt_test_util.h"

using namespace ckpt_test;

namespace {

// The test model's tensors (uneven on 2, 3 and 4 ranks), with their
// placements on each mesh of the tests.
struct Layout {
  std::string mesh;
  std::vector<std::string> pl; /* per tensor; "" = no spec */
};

const char *const kNames[] = {"layers.0.w", "layers.0.v", "b",    "col",
                              "plain",      "scalar",     "empty"};
const V kShapes[] = {{11, 7}, {5, 9}, {11}, {6, 10}, {3}, {}, {0, 4}};

std::vector<TensorDef> Defs(const Layout &l) {
  std::vector<TensorDef> d;
  for (size_t i = 0; i < l.pl.size(); i++)
    d.push_back({kNames[i], kShapes[i], l.pl[i]});
  return d;
}

const Layout kDp2Tp2 = {"dp=2,tp=2",
                        {"R,S0", "S0,S1", "R,S0", "R,S1", "", "", "R,S0"}};
const Layout kTp4 = {"tp=4", {"S0", "S1", "S0", "S1", "", "", "S1"}};
const Layout kDp4 = {"dp=4", {"R", "R", "R", "R", "", "", "R"}};
const Layout kTp3 = {"tp=3", {"S1", "S0", "S0", "S0", "", "", "S0"}};
const Layout kDp1Tp2 = {"dp=1,tp=2",
                        {"R,S1", "S1,S0", "R,S0", "S0,S0", "", "", "R,S0"}};
const Layout kOne = {"d=1", {"R", "S0", "R", "S1", "", "", "R"}};

// The first n world ranks as a communicator (NULL on the others).
tpdp_comm *Sub(int n) {
  tpdp_comm *c = nullptr;
  int r = tpdp_test::WorldRank();
  EXPECT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), r < n ? 0 : -1, r, &c));
  return c;
}

void Save(const std::string &dir, int n, const Layout &l, tpdp_dtype dt) {
  tpdp_comm *c = Sub(n);
  if (c) {
    Model m(c, l.mesh, Defs(l), dt, true);
    EXPECT_TPDP_OK(tpdp_state_dict_set_meta(m.sd(), "step", "12"));
    EXPECT_TPDP_OK(tpdp_checkpoint_save(m.sd(), dir.c_str(), c, nullptr));
    tpdp_comm_destroy(c);
  }
  tpdp_barrier(tpdp_test::World());
}

void LoadAndCheck(const std::string &dir, int n, const Layout &l,
                  tpdp_dtype dt) {
  tpdp_comm *c = Sub(n);
  if (c) {
    Model m(c, l.mesh, Defs(l), dt, false);
    EXPECT_TPDP_OK(tpdp_checkpoint_load(m.sd(), dir.c_str(), c, nullptr));
    EXPECT_EQ(m.Mismatches(), 0)
        << "loaded on " << l.mesh << " as " << tpdp_dtype_name(dt);
    const char *step = tpdp_state_dict_get_meta(m.sd(), "step");
    EXPECT_STREQ(step ? step : "(none)", "12");
    tpdp_comm_destroy(c);
  }
  tpdp_barrier(tpdp_test::World());
}

struct Case {
  int save_n;
  Layout save;
  tpdp_dtype save_dt;
  int load_n;
  Layout load;
  tpdp_dtype load_dt;
};

TEST(CheckpointLoad, RoundTripsAcrossMeshesRanksAndDtypes) {
  const Case cases[] = {
      {4, kDp2Tp2, TPDP_F32, 4, kDp2Tp2, TPDP_F32},
      {4, kDp2Tp2, TPDP_F32, 4, kTp4, TPDP_F32},
      {4, kDp2Tp2, TPDP_F32, 4, kDp4, TPDP_BF16},
      {4, kDp2Tp2, TPDP_F32, 3, kTp3, TPDP_F16},
      {4, kDp2Tp2, TPDP_F32, 2, kDp1Tp2, TPDP_F32},
      {4, kDp2Tp2, TPDP_F32, 1, kOne, TPDP_F64},
      {3, kTp3, TPDP_BF16, 4, kDp2Tp2, TPDP_F32},
      {3, kTp3, TPDP_F16, 2, kDp1Tp2, TPDP_BF16},
      {2, kDp1Tp2, TPDP_F32, 3, kTp3, TPDP_F32},
      {1, kOne, TPDP_F32, 4, kTp4, TPDP_F32},
      {4, kTp4, TPDP_BF16, 1, kOne, TPDP_BF16},
  };
  for (const Case &k : cases) {
    SCOPED_TRACE("saved on " + std::to_string(k.save_n) + " ranks " +
                 k.save.mesh + " as " + tpdp_dtype_name(k.save_dt) +
                 ", loaded on " + std::to_string(k.load_n) + " ranks " +
                 k.load.mesh + " as " + tpdp_dtype_name(k.load_dt));
    std::string dir = TempDir(tpdp_test::World(), "roundtrip");
    Save(dir, k.save_n, k.save, k.save_dt);
    LoadAndCheck(dir, k.load_n, k.load, k.load_dt);
  }
}

// Each distinct slice once, by a rank that holds it; bytes spread evenly.
TEST(CheckpointLoad, OneWriterPerDistinctSliceSpreadOverRanks) {
  std::string dir = TempDir(tpdp_test::World(), "writers");
  Save(dir, 4, kDp2Tp2, TPDP_F32);
  if (tpdp_test::WorldRank() != 0) return;
  tpdp_checkpoint *ck = nullptr;
  ASSERT_TPDP_OK(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck));
  EXPECT_EQ(tpdp_checkpoint_world_size(ck), 4);
  EXPECT_EQ(tpdp_checkpoint_generation(ck), 1);
  std::map<int, uint64_t> bytes;
  uint64_t largest = 0;
  std::vector<TensorDef> defs = Defs(kDp2Tp2);
  ASSERT_EQ(tpdp_checkpoint_num_tensors(ck), (int)defs.size());
  for (int i = 0; i < tpdp_checkpoint_num_tensors(ck); i++) {
    tpdp_checkpoint_tensor_info ti;
    ASSERT_TPDP_OK(tpdp_checkpoint_tensor_at(ck, i, &ti));
    EXPECT_EQ(ti.name, defs[i].name);
    int64_t numel = 1;
    for (int64_t s : defs[i].shape) numel *= s;
    EXPECT_EQ(ti.nbytes, (uint64_t)numel * 4) << ti.name << ": written once";
    std::vector<tpdp_placement> pl(2);
    int np = 0;
    if (!defs[i].placements.empty())
      tpdp_placements_parse(defs[i].placements.c_str(), pl.data(), 2, &np);
    for (int j = 0; j < ti.nslices; j++) {
      tpdp_checkpoint_slice_info si;
      ASSERT_TPDP_OK(tpdp_checkpoint_slice_at(ck, i, j, &si));
      V shape = defs[i].shape, off(shape.size(), 0);
      if (np)
        RefLayout({2, 2}, {si.rank / 2, si.rank % 2}, pl, defs[i].shape, &shape,
                  &off);
      for (size_t d = 0; d < shape.size(); d++) {
        EXPECT_EQ(si.shape[d], shape[d]) << ti.name << " slice " << j;
        EXPECT_EQ(si.offsets[d], off[d]) << ti.name << " slice " << j;
      }
      bytes[si.rank] += si.nbytes;
      largest = std::max(largest, si.nbytes);
      EXPECT_TPDP_OK(tpdp_checkpoint_verify_slice(ck, i, j));
    }
  }
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int r = 0; r < 4; r++) {
    lo = std::min(lo, bytes[r]);
    hi = std::max(hi, bytes[r]);
  }
  EXPECT_LE(hi - lo, largest) << "writers unbalanced";
  EXPECT_GT(lo, 0u) << "a rank wrote nothing";
  tpdp_checkpoint_close(ck);
}

// A second save into the same directory: a new generation, the old files
// gone, the new checkpoint loadable.
TEST(CheckpointLoad, SavingAgainReplacesThePreviousCheckpoint) {
  std::string dir = TempDir(tpdp_test::World(), "again");
  Save(dir, 4, kDp2Tp2, TPDP_F32);
  Save(dir, 2, kDp1Tp2, TPDP_F32);
  LoadAndCheck(dir, 4, kTp4, TPDP_F32);
  if (tpdp_test::WorldRank() == 0) {
    tpdp_checkpoint *ck = nullptr;
    ASSERT_TPDP_OK(tpdp_checkpoint_open(dir.c_str(), nullptr, &ck));
    EXPECT_EQ(tpdp_checkpoint_generation(ck), 2);
    EXPECT_EQ(tpdp_checkpoint_world_size(ck), 2);
    tpdp_checkpoint_close(ck);
    for (int r = 1; r <= 4; r++) {
      std::string old = dir + "/model-g000001-0000" + std::to_string(r) +
                        "-of-00004.safetensors";
      EXPECT_NE(access(old.c_str(), F_OK), 0) << old << " still exists";
    }
    std::string kept = dir + "/model-g000002-00001-of-00002.safetensors";
    EXPECT_EQ(access(kept.c_str(), F_OK), 0) << kept;
  }
}

// Load on all 4 ranks expecting `status` and a message with `needle`,
// identical on every rank.
void ExpectSameError(const std::string &dir, const Layout &l,
                     const std::vector<TensorDef> &defs, tpdp_status status,
                     std::vector<std::string> needles,
                     tpdp_dtype dt = TPDP_F32) {
  Model m(tpdp_test::World(), l.mesh, defs, dt, false);
  tpdp_clear_error();
  tpdp_status st =
      tpdp_checkpoint_load(m.sd(), dir.c_str(), tpdp_test::World(), nullptr);
  EXPECT_STREQ(tpdp_status_string(st), tpdp_status_string(status))
      << tpdp_last_error();
  std::vector<std::string> all = AllMessages(tpdp_test::World());
  for (size_t r = 1; r < all.size(); r++)
    EXPECT_EQ(all[r], all[0]) << "rank " << r << " differs from rank 0";
  for (const std::string &n : needles)
    EXPECT_NE(all[0].find(n), std::string::npos)
        << "'" << all[0] << "' lacks '" << n << "'";
}

TEST(CheckpointLoad, MismatchesFailIdenticallyOnEveryRank) {
  std::string dir = TempDir(tpdp_test::World(), "mismatch");
  Save(dir, 4, kDp2Tp2, TPDP_F32);
  std::vector<TensorDef> defs = Defs(kTp4);
  defs.push_back({"optim.exp_avg.w", {11, 7}, "S0"});
  ExpectSameError(dir, kTp4, defs, TPDP_ERR_NOT_FOUND,
                  {"tpdp_checkpoint_load", "'optim.exp_avg.w'", "not in"});
  defs = Defs(kTp4);
  defs[1].shape = {5, 8};
  ExpectSameError(dir, kTp4, defs, TPDP_ERR_SHAPE_MISMATCH,
                  {"'layers.0.v'", "[5, 9]", "[5, 8]"});
  ExpectSameError(dir, kTp4, Defs(kTp4), TPDP_ERR_DTYPE_MISMATCH,
                  {"'layers.0.w'", "F32", "i32"}, TPDP_I32);
  // One rank's state dict differs from the others'.
  defs = Defs(kTp4);
  if (tpdp_test::WorldRank() == 2) defs[2].name = "bias";
  ExpectSameError(dir, kTp4, defs, TPDP_ERR_SHAPE_MISMATCH,
                  {"differ across ranks", "'b'", "rank 2 has 'bias'"});
}

// Rank 0 damages one data file; every rank's load fails the same way.
void Damage(const std::string &file, const std::string &how) {
  if (tpdp_test::WorldRank() == 0) {
    tpdp_safetensors *f = nullptr;
    ASSERT_TPDP_OK(tpdp_safetensors_open(file.c_str(), &f));
    tpdp_safetensors_tensor t;
    ASSERT_TPDP_OK(tpdp_safetensors_tensor_at(f, 0, &t));
    tpdp_safetensors_close(f);
    int fd = open(file.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    if (how == "flip") {
      unsigned char c;
      ASSERT_EQ(pread(fd, &c, 1, (off_t)t.offset + 3), 1);
      c ^= 0x40;
      ASSERT_EQ(pwrite(fd, &c, 1, (off_t)t.offset + 3), 1);
    } else {
      ASSERT_EQ(ftruncate(fd, (off_t)(t.offset + t.nbytes - 2)), 0);
    }
    close(fd);
  }
  tpdp_barrier(tpdp_test::World());
}

TEST(CheckpointLoad, CorruptFilesFailIdenticallyNamingFileAndTensor) {
  std::string dir = TempDir(tpdp_test::World(), "corrupt");
  Save(dir, 4, kDp2Tp2, TPDP_F32);
  // Rank 1 of the save wrote the first slice of layers.0.w (tp 1).
  std::string f1 = "model-g000001-00002-of-00004.safetensors";
  Damage(dir + "/" + f1, "flip");
  ExpectSameError(dir, kTp4, Defs(kTp4), TPDP_ERR_IO,
                  {f1, "'layers.0.w'", "xxhash64", "corrupt"});
  // verify = 0 skips the checksums: the flipped value loads.
  {
    Model m(tpdp_test::World(), kTp4.mesh, Defs(kTp4), TPDP_F32, false);
    tpdp_checkpoint_options o = TPDP_CHECKPOINT_OPTIONS_INIT;
    o.verify = 0;
    EXPECT_TPDP_OK(
        tpdp_checkpoint_load(m.sd(), dir.c_str(), tpdp_test::World(), &o));
  }
  std::string f2 = "model-g000001-00003-of-00004.safetensors";
  Damage(dir + "/" + f2, "truncate");
  ExpectSameError(dir, kTp4, Defs(kTp4), TPDP_ERR_IO, {f2, "truncated"});
}

TEST(CheckpointLoad, MissingIndexFailsOnEveryRank) {
  std::string dir = TempDir(tpdp_test::World(), "missing");
  ExpectSameError(dir, kTp4, Defs(kTp4), TPDP_ERR_IO,
                  {"index.json", "No such file"});
}

TEST(CheckpointLoad, StrictLoadRefusesTensorsTheStateDictLacks) {
  std::string dir = TempDir(tpdp_test::World(), "strict");
  Save(dir, 4, kDp2Tp2, TPDP_F32);
  std::vector<TensorDef> defs = Defs(kTp4);
  defs.pop_back(); /* no "empty" */
  Model m(tpdp_test::World(), kTp4.mesh, defs, TPDP_F32, false);
  EXPECT_TPDP_OK(
      tpdp_checkpoint_load(m.sd(), dir.c_str(), tpdp_test::World(), nullptr));
  EXPECT_EQ(m.Mismatches(), 0);
  tpdp_checkpoint_options o = TPDP_CHECKPOINT_OPTIONS_INIT;
  o.strict = 1;
  EXPECT_TPDP_ERROR(
      tpdp_checkpoint_load(m.sd(), dir.c_str(), tpdp_test::World(), &o),
      TPDP_ERR_INVALID_ARGUMENT, "'empty'", "strict");
}

// A save that cannot write fails on every rank and commits nothing.
TEST(CheckpointLoad, UnwritableDirectoryFailsOnEveryRank) {
  std::string base = TempDir(tpdp_test::World(), "unwritable");
  std::string file = base + "/a-file";
  if (tpdp_test::WorldRank() == 0) {
    FILE *f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  tpdp_barrier(tpdp_test::World());
  Model m(tpdp_test::World(), kTp4.mesh, Defs(kTp4), TPDP_F32, true);
  tpdp_clear_error();
  tpdp_status st = tpdp_checkpoint_save(m.sd(), (file + "/ckpt").c_str(),
                                        tpdp_test::World(), nullptr);
  EXPECT_EQ(st, TPDP_ERR_IO) << tpdp_last_error();
  std::vector<std::string> all = AllMessages(tpdp_test::World());
  for (size_t r = 1; r < all.size(); r++) EXPECT_EQ(all[r], all[0]);
  EXPECT_NE(all[0].find("a-file"), std::string::npos) << all[0];
}

}  // namespace
