// SPDX-License-Identifier: BSD-3-Clause
// tpdp_comm_agree on 2, 3 and 4 ranks: every rank returns the status of the
// lowest-ranked failing rank, and its message followed by "(rank R of
// NAME)", whichever ranks fail; nothing when none does. The expected
// strings are written here from the cases, not read from the library.
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

int Me() { return tpdp_test::WorldRank(); }
int P() { return tpdp_test::WorldSize(); }

// The agreement's result on this rank: its status and message.
struct Outcome {
  tpdp_status st;
  std::string msg;
};

Outcome Agree(tpdp_comm *c, tpdp_status local, const char *message) {
  tpdp_status st = tpdp_comm_agree(c, local, message);
  return {st, tpdp_last_error()};
}

// The message every rank must carry when rank `who` of `comm` failed with
// `text`, as tpdp_comm_agree's header states it.
std::string Agreed(const std::string &text, int who, const std::string &comm) {
  return "tpdp_comm_agree: " + text + " (rank " + std::to_string(who) + " of " +
         comm + ")";
}

// The communicator still works after an agreement: a sum over the ranks.
void ExpectUsable(tpdp_comm *c) {
  int32_t one = 1, sum = 0;
  tpdp_tensor s = tpdp_tensor_1d(&one, TPDP_I32, 1);
  tpdp_tensor r = tpdp_tensor_1d(&sum, TPDP_I32, 1);
  EXPECT_TPDP_OK(tpdp_allreduce(c, &s, &r, TPDP_OP_SUM));
  EXPECT_EQ(sum, tpdp_comm_size(c));
}

TEST(CommAgree, NoRankFails) {
  tpdp_clear_error();
  Outcome o = Agree(tpdp_test::World(), TPDP_SUCCESS, nullptr);
  EXPECT_EQ(o.st, TPDP_SUCCESS);
  EXPECT_EQ(o.msg, "");
  // A message passed with a success is not read.
  o = Agree(tpdp_test::World(), TPDP_SUCCESS, "not an error");
  EXPECT_EQ(o.st, TPDP_SUCCESS);
  EXPECT_EQ(o.msg, "");
  ExpectUsable(tpdp_test::World());
}

TEST(CommAgree, TheLastRankFailsEveryRankGetsItsStatusAndMessage) {
  const int last = P() - 1;
  const std::string text = "disk full writing shard " + std::to_string(last);
  Outcome o =
      Agree(tpdp_test::World(), Me() == last ? TPDP_ERR_IO : TPDP_SUCCESS,
            Me() == last ? text.c_str() : nullptr);
  EXPECT_EQ(o.st, TPDP_ERR_IO);
  EXPECT_EQ(o.msg, Agreed(text, last, "world"));
  ExpectUsable(tpdp_test::World());
}

TEST(CommAgree, RankOneFailsWithTheMessageOfAFailedCall) {
  // No local_message: rank 1's tpdp_last_error() at the call, that of the
  // tpdp call that failed there.
  tpdp_status local = TPDP_SUCCESS;
  if (Me() == 1) {
    char storage[32];
    int ndim = 0;
    int64_t sizes[TPDP_MAX_DIMS];
    const char *names[TPDP_MAX_DIMS];
    local = tpdp_mesh_parse("dp=0", storage, &ndim, sizes, names);
    ASSERT_EQ(local, TPDP_ERR_BAD_DIM_SIZE);
  }
  const std::string rank1 = Me() == 1 ? tpdp_last_error() : "";
  Outcome o = Agree(tpdp_test::World(), local, nullptr);
  EXPECT_EQ(o.st, TPDP_ERR_BAD_DIM_SIZE);
  // Every rank carries rank 1's message, which names the failed call.
  EXPECT_NE(o.msg.find("tpdp_comm_agree: tpdp_mesh_parse: "), std::string::npos)
      << o.msg;
  EXPECT_NE(o.msg.find(" (rank 1 of world)"), std::string::npos) << o.msg;
  if (Me() == 1) {
    EXPECT_EQ(o.msg, Agreed(rank1, 1, "world"));
  }
}

TEST(CommAgree, TwoRanksFailTheLowerWins) {
  // Ranks 1 and the last (rank 0 and 1 on 2 ranks) fail with different
  // statuses and messages: every rank gets the lower one's.
  const int lo = P() == 2 ? 0 : 1, hi = P() - 1;
  tpdp_status local = TPDP_SUCCESS;
  std::string text;
  if (Me() == lo) {
    local = TPDP_ERR_SHAPE_MISMATCH;
    text = "shape [2, 3] where [3, 2] was expected";
  } else if (Me() == hi) {
    local = TPDP_ERR_OUT_OF_MEMORY;
    text = "out of memory on the higher rank";
  }
  Outcome o =
      Agree(tpdp_test::World(), local, text.empty() ? nullptr : text.c_str());
  EXPECT_EQ(o.st, TPDP_ERR_SHAPE_MISMATCH);
  EXPECT_EQ(o.msg,
            Agreed("shape [2, 3] where [3, 2] was expected", lo, "world"));
  ExpectUsable(tpdp_test::World());
}

TEST(CommAgree, EveryRankFailsRankZeroWins) {
  const std::string text = "failure of rank " + std::to_string(Me());
  Outcome o =
      Agree(tpdp_test::World(), Me() == 0 ? TPDP_ERR_NOT_FOUND : TPDP_ERR_STATE,
            text.c_str());
  EXPECT_EQ(o.st, TPDP_ERR_NOT_FOUND);
  EXPECT_EQ(o.msg, Agreed("failure of rank 0", 0, "world"));
}

TEST(CommAgree, ALongMessageIsCutButNamesTheRank) {
  const int last = P() - 1;
  const std::string text(3000, 'x');
  Outcome o =
      Agree(tpdp_test::World(), Me() == last ? TPDP_ERR_PARSE : TPDP_SUCCESS,
            Me() == last ? text.c_str() : nullptr);
  EXPECT_EQ(o.st, TPDP_ERR_PARSE);
  const std::string tail = " (rank " + std::to_string(last) + " of world)";
  ASSERT_GE(o.msg.size(), tail.size());
  EXPECT_EQ(o.msg.substr(o.msg.size() - tail.size()), tail);
  EXPECT_NE(o.msg.find(std::string(500, 'x')), std::string::npos);
}

TEST(CommAgree, AFailureWithoutAMessageNamesItsStatus) {
  const int last = P() - 1;
  tpdp_clear_error();
  Outcome o = Agree(tpdp_test::World(),
                    Me() == last ? TPDP_ERR_TIMEOUT : TPDP_SUCCESS, "");
  EXPECT_EQ(o.st, TPDP_ERR_TIMEOUT);
  EXPECT_EQ(o.msg, Agreed("TPDP_ERR_TIMEOUT (no message)", last, "world"));
  // NULL with an empty last error: the same.
  tpdp_clear_error();
  o = Agree(tpdp_test::World(), Me() == last ? TPDP_ERR_IO : TPDP_SUCCESS,
            nullptr);
  EXPECT_EQ(o.st, TPDP_ERR_IO);
  EXPECT_EQ(o.msg, Agreed("TPDP_ERR_IO (no message)", last, "world"));
}

TEST(CommAgree, AStatusThatIsNoStatusFailsThatRank) {
  const int last = P() - 1;
  Outcome o = Agree(
      tpdp_test::World(),
      Me() == last ? static_cast<tpdp_status>(1000) : TPDP_SUCCESS, nullptr);
  EXPECT_EQ(o.st, TPDP_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(o.msg, Agreed("argument 'local_status' (1000) is not a "
                          "tpdp_status value",
                          last, "world"));
  ExpectUsable(tpdp_test::World());
}

TEST(CommAgree, RanksAreThoseOfTheCommunicator) {
  // On a split of the world into even and odd world ranks, in reverse
  // order: the lowest failing rank is counted in the split.
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), Me() % 2, -Me(), &c));
  const int n = tpdp_comm_size(c), me = tpdp_comm_rank(c);
  ASSERT_EQ(me, n - 1 - Me() / 2);
  // Every rank of the split but its rank 0 fails, each with its own text.
  const std::string text = "split rank " + std::to_string(me);
  Outcome o = Agree(c, me > 0 ? TPDP_ERR_IO : TPDP_SUCCESS, text.c_str());
  if (n == 1) {
    EXPECT_EQ(o.st, TPDP_SUCCESS);
  } else {
    EXPECT_EQ(o.st, TPDP_ERR_IO);
    EXPECT_EQ(o.msg, Agreed("split rank 1", 1, tpdp_comm_name(c)));
  }
  ExpectUsable(c);
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

TEST(CommAgree, OneRankAlone) {
  // A communicator of one rank agrees with itself, message and all.
  tpdp_comm *c = nullptr;
  ASSERT_TPDP_OK(tpdp_comm_split(tpdp_test::World(), Me(), 0, &c));
  EXPECT_EQ(Agree(c, TPDP_SUCCESS, nullptr).st, TPDP_SUCCESS);
  Outcome o = Agree(c, TPDP_ERR_IO, "alone");
  EXPECT_EQ(o.st, TPDP_ERR_IO);
  EXPECT_EQ(o.msg, Agreed("alone", 0, tpdp_comm_name(c)));
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

TEST(CommAgree, ComparedLikeACollectiveWithDebugCollectives) {
  // With TPDP_DEBUG_COLLECTIVES, tpdp_comm_agree on one rank against an
  // allreduce on the others fails on every rank instead of mixing the
  // two exchanges; tpdp_comm_agree on every rank runs as usual.
  setenv("TPDP_DEBUG_COLLECTIVES", "1", 1);
  tpdp_comm *c = nullptr;
  tpdp_status made = tpdp_comm_split(tpdp_test::World(), 0, Me(), &c);
  unsetenv("TPDP_DEBUG_COLLECTIVES");
  ASSERT_TPDP_OK(made);
  const std::string name = tpdp_comm_name(c);
  Outcome o = Agree(c, Me() == 1 ? TPDP_ERR_IO : TPDP_SUCCESS, "debug");
  EXPECT_EQ(o.st, TPDP_ERR_IO);
  EXPECT_EQ(o.msg, Agreed("debug", 1, name));
  int32_t v = 1;
  tpdp_tensor t = tpdp_tensor_1d(&v, TPDP_I32, 1);
  tpdp_status st = Me() == 0 ? tpdp_comm_agree(c, TPDP_SUCCESS, nullptr)
                             : tpdp_allreduce(c, &t, &t, TPDP_OP_SUM);
  EXPECT_EQ(st, TPDP_ERR_INVALID_ARGUMENT);
  const std::string msg = tpdp_last_error();
  EXPECT_NE(msg.find("collective mismatch on " + name), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 0 called tpdp_comm_agree (#2)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("tpdp_allreduce sum i32 x 1 (#2)"), std::string::npos)
      << msg;
  EXPECT_TPDP_OK(tpdp_comm_destroy(c));
}

}  // namespace
